package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
func AcquireAll(ctx context.Context, l Locker, keys []string, opts ...Option) (Set, error) {
	if m, ok := l.(MultiAcquirer); ok {
		return m.AcquireAll(ctx, keys, opts...)
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	set := make(Set, 0, len(sorted))
	for _, k := range sorted {
		lease, err := l.Acquire(ctx, k, opts...)
		if err != nil {
			// A release that never reaches the backend would leave the keys
			// we hold blocked for a whole TTL.
			return nil, errors.Join(err, set.releaseDetached(ctx))
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
