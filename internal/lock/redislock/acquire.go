package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/lock/retry"
)

// errHeld is the cause of an attempt that found the key held.
var errHeld = fmt.Errorf("held by another lease: %w", lock.ErrNotAcquired)

// Acquire implements lock.Locker. It retries with jittered pauses while the
// key is held, until ctx is done; with lock.TryOnce it makes one attempt.
// Errors wrap lock.ErrNotAcquired (held), lock.ErrUnavailable (server
// unreachable on retry.MaxUnavailable attempts in a row) or ctx.Err(); and
// lock.ErrCleanupPending when the clean-up of an attempt that failed or was
// cut short was not confirmed by the server in time: it goes on in the
// background (redisnode.Release). An attempt in flight when ctx ends runs to
// its reply or the node timeout; its clean-up does not hold the caller past
// ctx.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	return l.loop.Acquire(ctx, key, opts, l.attempt)
}

// AcquireBatch implements lock.Locker: one script call takes every key
// whose line in this Locker is free (a key another goroutine of this
// Locker holds, acquires or waits for counts as held; see
// retry.Loop.AcquireBatch), each under its own lease id with its own token
// from its counter, and a lease per key obtained is built as Acquire would.
// Errors wrap lock.ErrInvalidKey, lock.ErrUnavailable or ctx.Err(); nothing
// is then held, unless they also wrap lock.ErrCleanupPending, as for
// Acquire.
func (l *Locker) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	return l.loop.AcquireBatch(ctx, keys, opts, l.grab)
}

// attempt is one try on the server, under a fresh lease id.
func (l *Locker) attempt(ctx context.Context, key string, o lock.Options, turn func()) (*lock.Lease, error) {
	leases, err := l.grab(ctx, []string{key}, o, []func(){turn})
	if err != nil {
		return nil, err
	}
	if leases[0] == nil {
		return nil, errHeld
	}
	return leases[0], nil
}

// grab takes keys in one script call, each under a fresh lease id, and
// returns a lease per key obtained (nil where held), aligned with keys.
func (l *Locker) grab(ctx context.Context, keys []string, o lock.Options, turns []func()) ([]*lock.Lease, error) {
	holds := make([]redisnode.Hold, len(keys))
	ids := make([]uuid.UUID, len(keys))
	for i, k := range keys {
		ids[i] = uuid.New()
		holds[i] = redisnode.Hold{Key: k, ID: ids[i].String()}
	}
	tokens, deadline, err := l.try(ctx, holds, o.TTL)
	if err != nil {
		return nil, err
	}
	if cerr := ctx.Err(); cerr != nil {
		// Granted just as the caller gave up: the caller will not use the
		// leases, and a cancelled acquisition leaves no key behind. Its
		// ctx is done: the clean-up makes its tries regardless.
		return nil, cleanupPending(cerr, l.cleanup(context.WithoutCancel(ctx), holds, granted(tokens), o.TTL))
	}
	leases := make([]*lock.Lease, len(keys))
	for i, tok := range tokens {
		if tok == 0 {
			continue
		}
		key, token := keys[i], lock.Token(tok)
		h := &handle{l: l, hold: holds[i], ttl: o.TTL, turn: turns[i]}
		leases[i], _ = lock.NewLease(lock.LeaseParams{
			Key: key, Token: token, ID: ids[i], Deadline: deadline,
			TTL: o.TTL, Watchdog: !o.NoWatchdog, Handle: h,
			OnLost: func(err error) {
				h.handOn(false) // the key is free in Redis, or someone else's: a loss wakes nobody
				l.m.Lost()
				l.cfg.log.Warn("redis: lease lost", "key", key, "token", token, "err", err)
			},
		})
	}
	return leases, nil
}

// try makes one attempt at every hold, in one call, and returns the tokens
// (0 where held) and the validity deadline of the keys obtained. The
// request runs without the caller's cancellation, bounded by the node
// timeout instead: a command abandoned in flight may still run on the
// server, and only its reply tells whether there is a key to clean up. The
// clean-up of a failed attempt, though, returns by the time ctx is done
// (and goes on in the background): it is not the caller's to wait for.
func (l *Locker) try(ctx context.Context, holds []redisnode.Hold, ttl time.Duration) ([]uint64, time.Time, error) {
	start := time.Now()
	tokens, err := l.node.AcquireIncr(context.WithoutCancel(ctx), holds, ttl, retry.LongestAwait(l.cfg.retryDelay))
	if err != nil {
		cause := fmt.Errorf("%w: %w", lock.ErrUnavailable, l.nodeErr(err))
		if redisnode.Unsent(err) {
			return nil, time.Time{}, cause // it never reached the server: nothing to undo
		}
		// The SETs may have run before the reply was lost, or run later
		// still: a paused server runs what it buffered when it resumes.
		written := make([]redisnode.Written, len(holds))
		for i := range written {
			written[i] = redisnode.Unknown
		}
		return nil, time.Time{}, cleanupPending(cause, l.cleanup(ctx, holds, written, ttl))
	}
	// The keys expire no earlier than start+ttl by the server's clock; the
	// drift allowance covers the two clocks running at different rates.
	validity := ttl - time.Since(start) - retry.Drift(ttl)
	if validity <= 0 {
		cause := fmt.Errorf("%w: granted after %v, no validity left of a %v TTL",
			lock.ErrUnavailable, time.Since(start), ttl)
		return nil, time.Time{}, cleanupPending(cause, l.cleanup(ctx, holds, granted(tokens), ttl))
	}
	return tokens, start.Add(ttl - retry.Drift(ttl)), nil
}

// cleanup deletes, in one call, every key of holds that an attempt that
// failed midway did set (written: what its reply said of each); the
// compare-and-delete leaves the others alone. It returns by the time ctx
// is done; what the server has not confirmed by then goes on in the
// background, and the error says so.
func (l *Locker) cleanup(ctx context.Context, holds []redisnode.Hold, written []redisnode.Written, ttl time.Duration) error {
	if _, _, err := l.node.Release(ctx, holds, wakeAll(len(holds)), written, ttl); err != nil {
		l.cfg.log.Warn("redis: clean-up after a failed attempt", "keys", len(holds), "err", err)
		return fmt.Errorf("clean-up of %d key(s): %w", len(holds), l.nodeErr(err))
	}
	return nil
}

// cleanupPending is cause, joined by the error of the clean-up that followed
// it, if any. Where that clean-up goes on in the background
// (redisnode.ErrPending) the keys may look held until it lands (or their
// TTL ends), and the contract (lock.Locker) says so with
// lock.ErrCleanupPending; a clean-up that ended otherwise left nothing
// going on to say it of. The clean-up's own errors are not wrapped: cause
// says why the call failed.
func cleanupPending(cause, cerr error) error {
	switch {
	case cerr == nil:
		return cause
	case errors.Is(cerr, redisnode.ErrPending):
		return fmt.Errorf("%w (%w: %v)", cause, lock.ErrCleanupPending, cerr)
	}
	return fmt.Errorf("%w (clean-up: %v)", cause, cerr)
}

// granted is what an attempt's reply said of each key: set where it got a
// token, refused (nothing of ours) where not.
func granted(tokens []uint64) []redisnode.Written {
	w := make([]redisnode.Written, len(tokens))
	for i, t := range tokens {
		if t == 0 {
			w[i] = redisnode.Absent
		}
	}
	return w
}

// wakeAll asks a release to wake a waiter on each of n keys it deletes and
// that a refused acquisition flagged (redisnode.WakeIfOurs): on a single
// server, only a delete frees a key.
func wakeAll(n int) []redisnode.Wake {
	w := make([]redisnode.Wake, n)
	for i := range w {
		w[i] = redisnode.WakeIfOurs
	}
	return w
}
