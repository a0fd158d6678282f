package redlock

import (
	"context"
	"errors"

	"github.com/stockguard/stockguard/internal/lock"
)

// Acquire implements lock.Locker. It retries with jittered pauses while the
// key is held, until ctx is done; with lock.TryOnce it makes one attempt.
// Errors wrap lock.ErrNotAcquired (a majority answered but the key was
// held), lock.ErrUnavailable (fewer than a majority answered, on
// retry.MaxUnavailable attempts in a row) or ctx.Err(), and join the failing
// nodes' *lock.NodeError. A failed attempt on a live ctx returns after
// it has deleted what it wrote on every node that confirmed the delete;
// where a node did not (it did not answer in the node's tries, or its lock
// write may still land, see the package doc), the error also wraps
// lock.ErrCleanupPending and the delete goes on in the background. Once
// ctx is done an attempt in flight runs to its majority or the node
// timeout, and its clean-up waits, for up to another node timeout, only
// for the nodes that answered its lock write (they answer the delete in a
// round trip): the deletes on the others, and any not confirmed by then,
// go on in the background, and the error wraps lock.ErrCleanupPending.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	return l.loop.Acquire(ctx, key, opts, l.attempt)
}

// AcquireBatch implements lock.Locker: one attempt for every key whose line
// in this Locker is free (a key another goroutine of this Locker holds,
// acquires or waits for counts as held; see retry.Loop.AcquireBatch), each
// round one request per node carrying all the keys, each key under its own
// lease id with its own token, validity and watchdog, as if acquired alone.
// Keys a majority did not grant (or whose token did not reach a majority)
// are unlocked on every node that may hold them and reported held (their
// clean-up, where a node does not confirm it, goes on in the background).
// Errors wrap lock.ErrInvalidKey, lock.ErrUnavailable (fewer than a
// majority answered) or ctx.Err(); nothing is then held on any node,
// unless they also wrap lock.ErrCleanupPending, as for Acquire.
func (l *Locker) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	return l.loop.AcquireBatch(ctx, keys, opts, l.grab)
}

// attempt is one round of requests to every node for key.
func (l *Locker) attempt(ctx context.Context, key string, o lock.Options, turn func()) (*lock.Lease, error) {
	leases, t, err := l.take(ctx, []string{key}, o, []func(){turn})
	if err != nil {
		return nil, err
	}
	if leases[0] == nil {
		return nil, t.err(0)
	}
	return leases[0], nil
}

// grab is retry.Grab: one attempt for keys.
func (l *Locker) grab(ctx context.Context, keys []string, o lock.Options, turns []func()) ([]*lock.Lease, error) {
	leases, t, err := l.take(ctx, keys, o, turns)
	if err != nil {
		return nil, err
	}
	for _, lease := range leases {
		if lease != nil {
			return leases, nil
		}
	}
	// Nothing obtained: because the keys are held, or because the nodes
	// are down, which the caller must hear as an error, not as "held".
	if err := t.unavailable(); err != nil {
		return nil, err
	}
	if t.cleanup != nil {
		// Held elsewhere, as the keys are reported; our writes on the nodes
		// that did not confirm their delete go on being deleted.
		l.cfg.log.Warn("redlock: clean-up of a batch that obtained nothing", "keys", len(keys), "err", t.cleanup)
	}
	return leases, nil
}

// take makes one attempt at keys and returns a lease per key obtained (nil
// for the others, already unlocked), aligned with keys, and the tally that
// explains the rest.
func (l *Locker) take(ctx context.Context, keys []string, o lock.Options, turns []func()) ([]*lock.Lease, *tally, error) {
	a := l.newAttempt(ctx, keys, o.TTL)
	out, err := a.run(ctx)
	if err != nil {
		return nil, nil, err
	}
	if cerr := ctx.Err(); cerr != nil {
		// Granted just as the caller gave up: the caller will not use the
		// leases, and a cancelled acquisition must leave no key behind.
		var got []held
		for k, ok := range out.obtained {
			if ok {
				got = append(got, held{a: a, k: k})
			}
		}
		// The attempt's clean-up, if it was cut short too (t.cleanup), goes
		// on in the background as well: a late lock write may still land.
		return nil, nil, cleanupPending(cerr, errors.Join(out.t.cleanup, l.release(ctx, got, allDeletes)))
	}
	leases := make([]*lock.Lease, len(keys))
	for k, ok := range out.obtained {
		if ok {
			leases[k] = l.lease(a, k, out, o, turns[k])
		}
	}
	return leases, out.t, nil
}

func (l *Locker) lease(a *attempt, k int, out outcome, o lock.Options, turn func()) *lock.Lease {
	key, token := a.keys[k], lock.Token(a.tokens[k])
	h := &handle{a: a, k: k, turn: turn}
	lease, _ := lock.NewLease(lock.LeaseParams{
		Key: key, Token: token, ID: a.ids[k], Deadline: out.deadline,
		TTL: o.TTL, Watchdog: !o.NoWatchdog, Handle: h,
		OnLost: func(err error) {
			h.handOn(false) // the key is free on the nodes, or someone else's: a loss wakes nobody
			l.m.Lost()
			l.cfg.log.Warn("redlock: lease lost", "key", key, "token", token, "err", err)
		},
	})
	return lease
}
