package redlock

import (
	"context"

	"github.com/stockguard/stockguard/internal/lock"
)

// Acquire implements lock.Locker. It retries with jittered pauses while the
// key is held, until ctx is done; with lock.TryOnce it makes one attempt.
// Errors wrap lock.ErrNotAcquired (a majority answered but the key was
// held), lock.ErrUnavailable (fewer than a majority answered, on
// retry.MaxUnavailable attempts in a row) or ctx.Err(), and join the failing
// nodes' *lock.NodeError. A cancelled Acquire returns after it has deleted
// what its attempt wrote, on every node.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	return l.loop.Acquire(ctx, key, opts, l.attempt)
}

// attempt is one round of requests to every node.
func (l *Locker) attempt(ctx context.Context, key string, o lock.Options, turn func()) (*lock.Lease, error) {
	a := l.newAttempt(ctx, key, o.TTL)
	out, err := a.run(ctx)
	if err != nil {
		return nil, err
	}
	if cerr := ctx.Err(); cerr != nil {
		// Granted just as the caller gave up: the caller will not use the
		// lease, and a cancelled Acquire must leave no key behind.
		_ = a.release(true)
		return nil, cerr
	}
	return l.lease(a, out, o, turn), nil
}

func (l *Locker) lease(a *attempt, out outcome, o lock.Options, turn func()) *lock.Lease {
	lease, _ := lock.NewLease(lock.LeaseParams{
		Key: a.key, Token: out.token, ID: a.id, Deadline: out.deadline,
		TTL: o.TTL, Watchdog: !o.NoWatchdog, Handle: &handle{a: a, turn: turn},
		OnLost: func(err error) {
			turn() // the key is free on the nodes, or someone else's
			l.m.Lost()
			l.cfg.log.Warn("redlock: lease lost", "key", a.key, "token", out.token, "err", err)
		},
	})
	return lease
}

// AcquireBatch implements lock.Locker.
func (l *Locker) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	return lock.EachOnce(ctx, l, keys, opts...)
}
