package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
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

// AcquireAll locks every key and returns the leases in sorted order, until
// ctx ends. On any failure it releases what it holds and returns the error.
// Duplicate keys are locked once.
//
// It waits for a key only while it holds nothing or only smaller keys, so
// operations over overlapping keys can never wait on each other in a cycle:
// in one, each would wait for a key the next one holds, and the next one
// waits only for a larger key than those it holds, so the keys waited for
// would grow all the way round the cycle back to the first. Keys it takes
// out of sorted order it takes with TryOnce, which waits for no one.
//
// Sorted order alone would keep every key held while it waits for a later
// one blocked for everyone else: an order of 100 lines stuck behind its last
// key would stall every order on its other 99. So it holds keys while
// waiting at most the hold-wait bound (WithHoldWait, default
// DefaultHoldWait) in all: each later key is first tried once, and only the
// waits for keys found held count against the bound. Past it, it lets go of
// every key it holds and waits on, holding nothing, in the same place in
// that key's line. Giving the wait up and queueing again would put it at the
// back of a line that may always hold more than the bound of work, where it
// would never get the key while every lone acquisition of it does. Once it
// has the key, it tries each smaller key once and takes the larger ones as
// before; a smaller key found held is the next one it lets everything go
// for and waits for, holding nothing. A MultiAcquirer applies the same bound
// its own way (pglock, whose session cannot free a key while it waits in a
// line, leaves the line to free them and rejoins it in the same round trip,
// for good).
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
	m := &multi{l: l, keys: sorted, opts: opts, tryOnce: append(slices.Clip(opts), TryOnce()), bound: Apply(0, opts).HoldWait}
	next := &restart{}
	for {
		lease := next.lease
		if lease == nil {
			var err error
			if lease, err = l.Acquire(ctx, sorted[next.at], opts...); err != nil {
				return nil, err
			}
		}
		set, again, err := m.round(ctx, next.at, lease)
		if again == nil {
			return set, err
		}
		next = again
	}
}

// multi is one AcquireAll on a Locker without a multi-key form of its own.
type multi struct {
	l       Locker
	keys    []string // sorted, unique
	opts    []Option
	tryOnce []Option
	bound   time.Duration
}

// restart is where a round of AcquireAll left off, holding nothing: the key
// to wait for next, keys[at], and its lease when that wait is already over.
type restart struct {
	at    int
	lease *Lease
}

// round holds keys[at] (lease) and takes the other keys around it: each
// smaller key tried once, each larger one tried once and, if held, waited
// for within what is left of the bound. It returns the set; or, with nothing
// held any more, where to start again; or an error, with nothing held.
func (m *multi) round(ctx context.Context, at int, lease *Lease) (Set, *restart, error) {
	set := make(Set, 0, len(m.keys))
	for i, k := range m.keys[:at] {
		got, err := m.l.Acquire(ctx, k, m.tryOnce...)
		if errors.Is(err, ErrNotAcquired) && ctx.Err() == nil {
			// Waiting for k now would be waiting out of order, holding
			// keys[at]: wait for it holding nothing.
			letGo(ctx, append(set, lease))
			return nil, &restart{at: i}, nil
		}
		if err != nil {
			return nil, nil, errors.Join(withCtxErr(ctx, err), append(set, lease).releaseDetached(ctx))
		}
		set = append(set, got)
	}
	set = append(set, lease)
	budget := m.bound
	for i := at + 1; i < len(m.keys); i++ {
		got, err := m.l.Acquire(ctx, m.keys[i], m.tryOnce...)
		if errors.Is(err, ErrNotAcquired) && ctx.Err() == nil {
			var gone bool
			got, budget, gone, err = m.waitHolding(ctx, m.keys[i], set, budget)
			if gone {
				if err != nil {
					return nil, nil, err
				}
				return nil, &restart{at: i, lease: got}, nil
			}
		}
		if err != nil {
			return nil, nil, errors.Join(withCtxErr(ctx, err), set.releaseDetached(ctx))
		}
		set = append(set, got)
	}
	return set, nil, nil
}

// withCtxErr is the error of a try that failed, with ctx's error when ctx
// ended before the answer came and err does not say so: the acquisition
// was cancelled, and its error wraps ctx.Err() as every cancelled
// acquisition's does. A key found held as the deadline passed is then
// ErrNotAcquired and the deadline, as for a key refused until its
// deadline (see ErrNotAcquired), not a plain "held".
func withCtxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", err, cerr)
	}
	return err
}

// waitHolding waits in key's line while it holds held. Once the wait has
// lasted budget, it lets held go and waits on in its place, holding
// nothing. It returns the wait's lease or error, what is left of budget,
// and whether held was let go.
func (m *multi) waitHolding(ctx context.Context, key string, held Set, budget time.Duration) (*Lease, time.Duration, bool, error) {
	start := time.Now()
	gone := make(chan struct{})
	t := time.AfterFunc(budget, func() {
		defer close(gone)
		letGo(ctx, held)
	})
	lease, err := m.l.Acquire(ctx, key, m.opts...)
	if !t.Stop() {
		<-gone
		return lease, 0, true, err
	}
	return lease, budget - time.Since(start), false, err
}

// letGo releases the leases an AcquireAll holds while it goes on waiting.
// The error is dropped, as the operation goes on: the leases are over for
// it either way, and a key whose release did not reach the backend stays
// blocked until its TTL whatever the operation does next.
func letGo(ctx context.Context, held Set) { _ = held.releaseDetached(ctx) }

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

// ContextAll returns a child of parent cancelled, with the set's Err as
// cause, once every lease has ended: for work that one lost lease of many
// does not stop (a batch whose other keys still stand). Like Context it
// starts no goroutine while the leases hold (one per call would be one per
// operation on a hot path), and cancel undoes what it registered on the
// leases, which may outlive the work. A set with no lease has none to end:
// only parent ends it.
func (s Set) ContextAll(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	var left atomic.Int32
	left.Store(int32(len(s)))
	stops := make([]func() bool, 0, len(s))
	for _, l := range s {
		stops = append(stops, context.AfterFunc(l.ctx, func() {
			if left.Add(-1) == 0 {
				cancel(s.Err())
			}
		}))
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
