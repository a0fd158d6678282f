package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
	"github.com/stockguard/stockguard/internal/lock/redis/keyqueue"
)

// maxUnavailable is how many attempts in a row may find the server
// unreachable before Acquire gives up with lock.ErrUnavailable rather than
// waiting out the caller's deadline: a request should fail fast when the
// backend is down, yet not on a single dropped connection.
const maxUnavailable = 3

// errHeld is the cause of an attempt that found the key held.
var errHeld = fmt.Errorf("held by another lease: %w", lock.ErrNotAcquired)

// Acquire implements lock.Locker. It retries with jittered pauses while the
// key is held, until ctx is done; with lock.TryOnce it makes one attempt.
// Errors wrap lock.ErrNotAcquired (held), lock.ErrUnavailable (server
// unreachable on maxUnavailable attempts in a row) or ctx.Err().
func (l *Locker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	if key == "" {
		err := fmt.Errorf("redis: acquire: %w", lock.ErrInvalidKey)
		l.m.Failed(lockmetrics.Reason(err))
		return nil, err
	}
	o := lock.Apply(l.cfg.ttl, opts)
	if o.TTL < time.Millisecond {
		return nil, fmt.Errorf("redis: acquire %q: TTL %v below Redis's 1ms resolution", key, o.TTL)
	}
	begin := time.Now()
	lease, err := l.acquire(ctx, key, o)
	if err != nil {
		l.m.Failed(lockmetrics.Reason(err))
		return nil, err
	}
	l.m.Acquired(time.Since(begin))
	return lease, nil
}

// acquire waits for this Locker's turn on key, then polls Redis. The turn is
// given up on failure, or by the lease's release or loss.
func (l *Locker) acquire(ctx context.Context, key string, o lock.Options) (*lock.Lease, error) {
	turn, err := l.queue.Wait(ctx, key, o.TryOnce)
	if errors.Is(err, keyqueue.ErrBusy) {
		return nil, fmt.Errorf("redis: acquire %q: %w: %w", key, lock.ErrNotAcquired, err)
	}
	if err != nil {
		return nil, ctxError(key, err, nil)
	}
	lease, err := l.poll(ctx, key, o, turn)
	if err != nil {
		turn()
	}
	return lease, err
}

func (l *Locker) poll(ctx context.Context, key string, o lock.Options, turn func()) (*lock.Lease, error) {
	id := uuid.New()
	unavailable := 0
	var last error
	for {
		if err := ctx.Err(); err != nil {
			return nil, ctxError(key, err, last)
		}
		l.m.Attempt()
		h, token, deadline, err := l.try(ctx, key, id.String(), o.TTL, turn)
		if err == nil {
			if cerr := ctx.Err(); cerr != nil {
				// Granted just as the caller gave up: the caller will not
				// use the lease, and the contract is that a cancelled
				// Acquire leaves no key behind.
				_ = h.Release(ctx)
				return nil, ctxError(key, cerr, nil)
			}
			lease, _ := lock.NewLease(lock.LeaseParams{
				Key: key, Token: token, ID: id, Deadline: deadline,
				TTL: o.TTL, Watchdog: !o.NoWatchdog, Handle: h,
				OnLost: func(err error) {
					turn() // the key is free in Redis, or someone else's
					l.m.Lost()
					l.cfg.log.Warn("redis: lease lost", "key", key, "token", token, "err", err)
				},
			})
			return lease, nil
		}
		last = err
		if o.TryOnce {
			return nil, fmt.Errorf("redis: acquire %q: %w", key, err)
		}
		if errors.Is(err, lock.ErrUnavailable) {
			if unavailable++; unavailable >= maxUnavailable {
				return nil, fmt.Errorf("redis: acquire %q: %d attempts: %w", key, unavailable, err)
			}
		} else {
			unavailable = 0
		}
		l.cfg.log.Debug("redis: acquire: retrying", "key", key, "err", err)
		if err := sleep(ctx, jitter(l.cfg.retryDelay)); err != nil {
			return nil, ctxError(key, err, last)
		}
	}
}

// try makes one attempt. The request runs without the caller's
// cancellation, bounded by the node timeout instead: a command abandoned in
// flight may still run on the server, and only its reply tells whether there
// is a key to clean up.
func (l *Locker) try(ctx context.Context, key, id string, ttl time.Duration, turn func()) (*handle, lock.Token, time.Time, error) {
	start := time.Now()
	nctx := context.WithoutCancel(ctx)
	token, ok, err := l.node.AcquireIncr(nctx, key, id, ttl)
	if err != nil {
		// The SET may have run before the reply was lost.
		l.cleanup(nctx, key, id)
		return nil, 0, time.Time{}, fmt.Errorf("%w: %w", lock.ErrUnavailable, l.nodeErr(err))
	}
	if !ok {
		return nil, 0, time.Time{}, errHeld
	}
	// The key expires no earlier than start+ttl by the server's clock; the
	// drift allowance covers the two clocks running at different rates.
	validity := ttl - time.Since(start) - drift(ttl)
	if validity <= 0 {
		l.cleanup(nctx, key, id)
		return nil, 0, time.Time{}, fmt.Errorf("%w: granted after %v, no validity left of a %v TTL",
			lock.ErrUnavailable, time.Since(start), ttl)
	}
	h := &handle{l: l, key: key, id: id, ttl: ttl, turn: turn}
	return h, lock.Token(token), start.Add(ttl - drift(ttl)), nil
}

// cleanup deletes the key if an attempt that failed midway did set it.
func (l *Locker) cleanup(ctx context.Context, key, id string) {
	if _, err := l.node.Release(ctx, key, id); err != nil {
		l.cfg.log.Warn("redis: clean-up after a failed attempt", "key", key, "err", err)
	}
}

// drift is the clock drift allowance of the Redlock paper: 1% of the TTL plus
// 2 ms for the granularity of the server's expiry.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// jitter draws a pause uniformly from [d/2, 3d/2).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ctxError reports an acquisition ended by its context, keeping the last
// attempt's error (held, unavailable) for the caller's logs.
func ctxError(key string, err, last error) error {
	if last == nil {
		return fmt.Errorf("redis: acquire %q: %w", key, err)
	}
	return fmt.Errorf("redis: acquire %q: %w; last attempt: %w", key, err, last)
}
