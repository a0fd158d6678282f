package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
	"github.com/stockguard/stockguard/internal/lock/redis/keyqueue"
)

// maxUnavailable is how many attempts in a row may find no majority of nodes
// answering before Acquire gives up with lock.ErrUnavailable rather than
// waiting out the caller's deadline: a request should fail fast when the
// quorum is gone, yet not on one unlucky round.
const maxUnavailable = 3

// Acquire implements lock.Locker. It retries with jittered pauses while the
// key is held, until ctx is done; with lock.TryOnce it makes one attempt.
// Errors wrap lock.ErrNotAcquired (a majority answered but the key was
// held), lock.ErrUnavailable (fewer than a majority answered, on
// maxUnavailable attempts in a row) or ctx.Err(), and join the failing
// nodes' *lock.NodeError. A cancelled Acquire returns after it has deleted
// what its attempt wrote, on every node.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	if key == "" {
		err := fmt.Errorf("redlock: acquire: %w", lock.ErrInvalidKey)
		l.m.Failed(lockmetrics.Reason(err))
		return nil, err
	}
	o := lock.Apply(l.cfg.ttl, opts)
	if o.TTL < time.Millisecond {
		return nil, fmt.Errorf("redlock: acquire %q: TTL %v below Redis's 1ms resolution", key, o.TTL)
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

// acquire waits for this Locker's turn on key, then polls the nodes. The turn
// is given up on failure, or by the lease's release or loss.
func (l *Locker) acquire(ctx context.Context, key string, o lock.Options) (*lock.Lease, error) {
	turn, err := l.queue.Wait(ctx, key, o.TryOnce)
	if errors.Is(err, keyqueue.ErrBusy) {
		return nil, fmt.Errorf("redlock: acquire %q: %w: %w", key, lock.ErrNotAcquired, err)
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
	unavailable := 0
	var last error
	for {
		if err := ctx.Err(); err != nil {
			return nil, ctxError(key, err, last)
		}
		l.m.Attempt()
		a := l.newAttempt(ctx, key, o.TTL)
		out, err := a.run(ctx)
		if err == nil && ctx.Err() != nil {
			// Granted just as the caller gave up: the caller will not use
			// the lease, and a cancelled Acquire must leave no key behind.
			_ = a.release(true)
			err = ctx.Err()
		}
		if err == nil {
			return l.lease(a, out, o, turn), nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, ctxError(key, cerr, last)
		}
		last = err
		if o.TryOnce {
			return nil, fmt.Errorf("redlock: acquire %q: %w", key, err)
		}
		if errors.Is(err, lock.ErrUnavailable) {
			if unavailable++; unavailable >= maxUnavailable {
				return nil, fmt.Errorf("redlock: acquire %q: %w", key, err)
			}
		} else {
			unavailable = 0
		}
		l.cfg.log.Debug("redlock: acquire: retrying", "key", key, "err", err)
		if err := sleep(ctx, jitter(l.cfg.retryDelay)); err != nil {
			return nil, ctxError(key, err, last)
		}
	}
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
// attempt's error (held, no quorum) for the caller's logs.
func ctxError(key string, err, last error) error {
	if last == nil {
		return fmt.Errorf("redlock: acquire %q: %w", key, err)
	}
	return fmt.Errorf("redlock: acquire %q: %w; last attempt: %w", key, err, last)
}
