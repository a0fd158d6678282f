package reservation

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
)

// maxHoldWait bounds how long one acquisition waits, in all, for keys
// held elsewhere while it holds some of its own. Keys are taken in sorted
// order, so waiting cannot deadlock, but every key held meanwhile is
// blocked for everyone else: an order of 100 lines stuck behind its last
// key would stall every order on its other 99. Each later key is first
// tried once (no wait); only the waits for keys found held count against
// the bound, not the round trips of keys that were free. Past the bound
// the acquisition releases what it holds and starts over, in line again
// for its first key, until its lock wait runs out (then lock_unavailable).
// The postgres backend takes a multi-key operation's locks in one
// statement and bounds that wait itself (pglock.WithHoldWait, default 1s,
// the value here too).
const maxHoldWait = time.Second

// errHoldWait is an acquisition that passed maxHoldWait holding keys.
var errHoldWait = errors.New("reservation: held keys past the hold-wait bound")

// acquireAll locks keys (sorted) for as long as ctx allows, holding some
// while waiting for the rest at most maxHoldWait at a time.
func (s *Service) acquireAll(ctx context.Context, keys []string, opts []lock.Option) (lock.Set, error) {
	if _, multi := s.locker.(lock.MultiAcquirer); multi || len(keys) == 1 {
		return lock.AcquireAll(ctx, s.locker, keys, opts...)
	}
	for {
		set, err := s.acquireHolding(ctx, keys, opts)
		if !errors.Is(err, errHoldWait) {
			return set, err
		}
		s.log.Debug("gave up held keys past the hold-wait bound; queueing again", "keys", len(keys), "hold_wait", maxHoldWait)
	}
}

// acquireHolding is one attempt: the first key as long as ctx allows, each
// later one tried once and, if held, waited for within what is left of
// maxHoldWait. On any failure it releases what it holds.
func (s *Service) acquireHolding(ctx context.Context, keys []string, opts []lock.Option) (lock.Set, error) {
	first, err := s.locker.Acquire(ctx, keys[0], opts...)
	if err != nil {
		return nil, err
	}
	set := lock.Set{first}
	fail := func(err error) (lock.Set, error) {
		rctx, cancel := detached(ctx)
		defer cancel()
		return nil, errors.Join(err, set.Release(rctx))
	}
	tryOnce := append(slices.Clip(opts), lock.TryOnce())
	budget := maxHoldWait
	for _, k := range keys[1:] {
		lease, err := s.locker.Acquire(ctx, k, tryOnce...)
		if errors.Is(err, lock.ErrNotAcquired) && ctx.Err() == nil {
			start := time.Now()
			wctx, cancel := context.WithTimeout(ctx, budget)
			lease, err = s.locker.Acquire(wctx, k, opts...)
			expired := wctx.Err() != nil
			cancel()
			budget -= time.Since(start)
			if err != nil && ctx.Err() == nil && expired {
				return fail(errHoldWait)
			}
		}
		if err != nil {
			return fail(err)
		}
		set = append(set, lease)
	}
	return set, nil
}
