package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/retry"
)

// errHeld is the cause of an attempt that found the key held.
var errHeld = fmt.Errorf("held by another lease: %w", lock.ErrNotAcquired)

// Acquire implements lock.Locker. It retries with jittered pauses while the
// key is held, until ctx is done; with lock.TryOnce it makes one attempt.
// Errors wrap lock.ErrNotAcquired (held), lock.ErrUnavailable (server
// unreachable on retry.MaxUnavailable attempts in a row) or ctx.Err().
func (l *Locker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	return l.loop.Acquire(ctx, key, opts, l.attempt)
}

// attempt is one try on the server, under a fresh lease id.
func (l *Locker) attempt(ctx context.Context, key string, o lock.Options, turn func()) (*lock.Lease, error) {
	id := uuid.New()
	h, token, deadline, err := l.try(ctx, key, id.String(), o.TTL, turn)
	if err != nil {
		return nil, err
	}
	if cerr := ctx.Err(); cerr != nil {
		// Granted just as the caller gave up: the caller will not use the
		// lease, and a cancelled Acquire leaves no key behind.
		_ = h.Release(ctx)
		return nil, cerr
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
	validity := ttl - time.Since(start) - retry.Drift(ttl)
	if validity <= 0 {
		l.cleanup(nctx, key, id)
		return nil, 0, time.Time{}, fmt.Errorf("%w: granted after %v, no validity left of a %v TTL",
			lock.ErrUnavailable, time.Since(start), ttl)
	}
	h := &handle{l: l, key: key, id: id, ttl: ttl, turn: turn}
	return h, lock.Token(token), start.Add(ttl - retry.Drift(ttl)), nil
}

// cleanup deletes the key if an attempt that failed midway did set it.
func (l *Locker) cleanup(ctx context.Context, key, id string) {
	if _, err := l.node.Release(ctx, key, id, true); err != nil {
		l.cfg.log.Warn("redis: clean-up after a failed attempt", "key", key, "err", err)
	}
}

// AcquireBatch implements lock.Locker.
func (l *Locker) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	return lock.EachOnce(ctx, l, keys, opts...)
}
