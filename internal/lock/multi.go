package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Set is the leases of one multi-key operation, in key order.
type Set []*Lease

// MultiAcquirer is implemented by backends that take a multi-key
// operation's locks more cheaply together than one by one (pglock: on one
// connection). Its AcquireAll has the contract of the function AcquireAll,
// which calls it.
type MultiAcquirer interface {
	AcquireAll(ctx context.Context, keys []string, opts ...Option) (Set, error)
}

// AcquireAll locks every key in sorted order, so two operations over
// overlapping keys can never wait on each other in a cycle. On any failure it
// releases what it already holds and returns the error. Duplicate keys are
// locked once.
//
// Sorted order alone keeps it deadlock-free, but every key held while it
// waits for a later one is blocked for everyone else: an order of 100 lines
// stuck behind its last key would stall every order on its other 99. So it
// holds keys while waiting for the rest at most the hold-wait bound
// (WithHoldWait, default DefaultHoldWait) in all: each later key is first
// tried once, and only the waits for keys found held count against the
// bound. Past it, it releases what it holds and starts over, in line again
// for its first key, until ctx ends. A MultiAcquirer applies the same bound
// its own way.
func AcquireAll(ctx context.Context, l Locker, keys []string, opts ...Option) (Set, error) {
	if m, ok := l.(MultiAcquirer); ok {
		return m.AcquireAll(ctx, keys, opts...)
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	if len(sorted) == 0 {
		return Set{}, nil
	}
	bound := Apply(0, opts).HoldWait
	for {
		set, err := acquireHolding(ctx, l, sorted, opts, bound)
		if !errors.Is(err, errHoldWait) {
			return set, err
		}
	}
}

// errHoldWait is an attempt that passed the hold-wait bound holding keys.
var errHoldWait = errors.New("lock: held keys past the hold-wait bound")

// acquireHolding is one attempt of AcquireAll: the first key as long as ctx
// allows, each later one tried once and, if held, waited for within what is
// left of bound. On any failure it releases what it holds.
func acquireHolding(ctx context.Context, l Locker, keys []string, opts []Option, bound time.Duration) (Set, error) {
	first, err := l.Acquire(ctx, keys[0], opts...)
	if err != nil {
		return nil, err
	}
	set := Set{first}
	fail := func(err error) (Set, error) {
		// A release that never reaches the backend would leave the keys we
		// hold blocked for a whole TTL.
		return nil, errors.Join(err, set.releaseDetached(ctx))
	}
	tryOnce := append(slices.Clip(opts), TryOnce())
	budget := bound
	for _, k := range keys[1:] {
		lease, err := l.Acquire(ctx, k, tryOnce...)
		if errors.Is(err, ErrNotAcquired) && ctx.Err() == nil {
			start := time.Now()
			wctx, cancel := context.WithTimeout(ctx, budget)
			lease, err = l.Acquire(wctx, k, opts...)
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

// Lease returns the lease on key, or nil.
func (s Set) Lease(key string) *Lease {
	for _, l := range s {
		if l.Key() == key {
			return l
		}
	}
	return nil
}

// Err is the first lease's Err that is not nil: the set is only as good as
// its weakest lease.
func (s Set) Err() error {
	for _, l := range s {
		if err := l.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Context returns a child of parent cancelled as soon as any lease ends.
func (s Set) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stops := make([]func() bool, 0, len(s))
	for _, l := range s {
		stops = append(stops, context.AfterFunc(l.ctx, func() { cancel(l.Err()) }))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(context.Canceled)
	}
}

// Release releases every lease, in reverse order, and joins the errors.
// Leases whose backend releases many at once (BatchHandle) are released
// together, in one round per lock server, after the others.
func (s Set) Release(ctx context.Context) error {
	if err := s.release(ctx); err != nil {
		return fmt.Errorf("lock: release set: %w", err)
	}
	return nil
}
