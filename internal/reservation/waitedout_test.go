package reservation_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/reservation"
)

// slowCancelLocker is a lock backend whose wait in a key's line answers its
// context's end late (pglock: "later when the server is slow to answer the
// wait's cancel, at most 5 s more"; a paused or cut-off lock server).
type slowCancelLocker struct {
	*fencedLocker
	extra time.Duration
}

func (l *slowCancelLocker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	lease, err := l.fencedLocker.Acquire(ctx, key, opts...)
	if err != nil && !lock.Apply(0, opts).TryOnce && ctx.Err() != nil {
		time.Sleep(l.extra)
	}
	return lease, err
}

// TestLockWaitBehindALockCallIsTheLocks: a SKU held by another instance;
// two orders for it queue on this one. The second spends its whole lock
// wait behind the queue leader's acquisition of that very key (the lock
// servers' time, nothing else), though it was not in the leader's waiting
// set when the acquisition began: it answers lock_unavailable (an earlier
// rule answered overloaded, blaming the instance's load).
func TestLockWaitBehindALockCallIsTheLocks(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 10)
	slow := &slowCancelLocker{fencedLocker: f.locker, extra: 400 * time.Millisecond}
	svc := reservation.New(reservation.Config{Store: f.store, Locker: slow, LockWait: 300 * time.Millisecond})
	defer f.hold("a")() // another instance holds the key throughout
	results := f.queue(svc, "a", req("", line("a", 1)), req("", line("a", 1)))
	got := results()
	for i, r := range got {
		t.Logf("order %d: %v", i, r.err)
	}
	if !errors.Is(got[0].err, lock.ErrNotAcquired) {
		t.Fatalf("head = %v, want ErrNotAcquired", got[0].err)
	}
	if !errors.Is(got[1].err, lock.ErrNotAcquired) {
		t.Fatalf("the order behind the head's acquisition of the held key = %v; want lock_unavailable (its wait was the lock's)", got[1].err)
	}
}

// TestLoadIsNotBlamedOnTheStore: a healthy database (every claim and write
// answers in milliseconds) and one hot SKU with more orders queued than the
// batches can serve within the lock wait. The orders that run out of it
// waited in line; none may answer store_unavailable ("the database could
// not answer", an unknown outcome to clients) because the leader happened
// to be inside a store call when its wait ended (a rule that looked only
// there answered 226 of 1,000 so).
func TestLoadIsNotBlamedOnTheStore(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 100000)
	svc := reservation.New(reservation.Config{Store: f.store, Locker: f.locker, LockWait: 250 * time.Millisecond,
		Coalescing: reservation.Coalescing{MaxBatch: 1}})
	release := f.hold("a")
	const n = 1000
	var wg sync.WaitGroup
	first := time.Now()
	errs := make([]error, n)
	// The head queues first; the others join its queue.
	wg.Go(func() { _, _, errs[0] = svc.Place(context.Background(), req("", line("a", 1))) })
	waitFor(t, "queue", func() bool { return reservation.Queued(svc, "a") == 1 })
	for i := 1; i < n; i++ {
		wg.Go(func() { _, _, errs[i] = svc.Place(context.Background(), req("", line("a", 1))) })
	}
	waitFor(t, "all queued", func() bool { return reservation.Queued(svc, "a") >= n-5 })
	start := time.Now()
	t.Logf("queued in %s", start.Sub(first).Round(time.Millisecond))
	release()
	wg.Wait()
	took := time.Since(start)
	claims, writes := f.store.counts()
	var ok, store, over, lockErr, other int
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, inventory.ErrStoreUnavailable):
			store++
		case errors.Is(err, inventory.ErrOverloaded):
			over++
		case errors.Is(err, lock.ErrNotAcquired):
			lockErr++
		default:
			other++
			t.Logf("other: %v", err)
		}
	}
	t.Logf("%d orders in %s: %d placed (%d claims, %d writes: %.1f ms per store call), %d store_unavailable, %d overloaded, %d lock_unavailable, %d other",
		n, took.Round(time.Millisecond), ok, claims, len(writes), float64(took.Milliseconds())/float64(max(1, claims+len(writes))), store, over, lockErr, other)
	if store > 0 {
		t.Fatalf("%d orders that waited in line behind a healthy database answered store_unavailable", store)
	}
}
