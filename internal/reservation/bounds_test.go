package reservation_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/reservation"
)

// TestQueueBounds: past the orders one SKU's queue may hold, or the queues
// an instance may run, an order is refused at once as overloaded; what was
// queued is placed.
func TestQueueBounds(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{MaxQueued: 2, MaxQueues: 2})
	ctx := context.Background()
	for _, sku := range []string{"a", "b", "c"} {
		f.stock(sku, 10)
	}
	// c is held too: an order whose key is free is gathered (gather.go),
	// not queued; one whose key is held elsewhere needs its queue.
	releaseA, releaseB, releaseC := f.hold("a"), f.hold("b"), f.hold("c")
	queuedA := f.queue(f.svc, "a", req("", line("a", 1)), req("", line("a", 1)))
	queuedB := f.queue(f.svc, "b", req("", line("b", 1)))
	start := time.Now()
	if _, _, err := f.svc.Place(ctx, req("k-a", line("a", 1))); !errors.Is(err, inventory.ErrOverloaded) {
		t.Fatalf("a third order on a full queue = %v, want ErrOverloaded", err)
	}
	if _, _, err := f.svc.Place(ctx, req("", line("c", 1))); !errors.Is(err, inventory.ErrOverloaded) {
		t.Fatalf("an order needing a third queue = %v, want ErrOverloaded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("refusals took %s: an overloaded answer must not wait", d)
	}
	releaseA()
	releaseB()
	releaseC()
	for _, r := range append(queuedA(), queuedB()...) {
		if r.err != nil {
			t.Fatalf("a queued order: %v", r.err)
		}
	}
	if _, _, err := f.svc.Place(ctx, req("", line("c", 1))); err != nil {
		t.Fatalf("an order once the queues drained: %v", err)
	}
}

// TestCloseWaitsForLeaders: Close waits for a batch leader still waiting
// for its lease (its client may have gone), which then places its order
// and releases; afterwards nothing is held and new work is refused.
func TestCloseWaitsForLeaders(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	f.stock("a", 10)
	release := f.hold("a")
	queued := f.queue(f.svc, "a", req("", line("a", 1)))
	closed := make(chan error, 1)
	go func() { closed <- f.svc.Close(ctx) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while a leader still waits", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if err := <-closed; err != nil {
		t.Fatalf("Close = %v", err)
	}
	if r := queued(); r[0].err != nil {
		t.Fatalf("the order its leader served: %v", r[0].err)
	}
	l, err := f.locker.Acquire(ctx, "a", lock.TryOnce())
	if err != nil {
		t.Fatalf("a is still held after Close: %v", err)
	}
	_ = l.Release(ctx)
	if _, _, err := f.svc.Place(ctx, req("", line("a", 1))); !errors.Is(err, reservation.ErrClosed) ||
		!errors.Is(err, inventory.ErrOverloaded) {
		t.Fatalf("Place after Close = %v, want ErrClosed (overloaded)", err)
	}
	if _, err := f.svc.SetStock(ctx, "a", 1); !errors.Is(err, reservation.ErrClosed) {
		t.Fatalf("SetStock after Close = %v, want ErrClosed", err)
	}
}

// TestCloseCutsShort: when Close's context ends first, the leaders give up
// their lock waits, answer their orders and exit before Close returns.
func TestCloseCutsShort(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 10)
	defer f.hold("a")()
	queued := f.queue(f.svc, "a", req("", line("a", 1)), req("", line("a", 2)))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := f.svc.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Close took %s after its deadline", d)
	}
	for i, r := range queued() {
		if r.err == nil {
			t.Fatalf("order %d placed while its lease was held elsewhere", i)
		}
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 0 {
		t.Fatalf("audit = %+v", a)
	}
}
