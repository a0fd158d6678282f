package reservation_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// TestCloseRefusesOrdersOnceBegun: once Close has begun, an order is
// refused (ErrClosed) even where a batch leader or a gatherer still runs and
// would take it: under a steady stream of orders Close would otherwise never
// drain. What was queued before is still placed.
func TestCloseRefusesOrdersOnceBegun(t *testing.T) {
	// late places an order once Close has begun and checks it is refused
	// at once, before busy lets the running leader or gatherer finish.
	late := func(t *testing.T, svc *reservation.Service, r inventory.PlaceRequest) {
		t.Helper()
		waitFor(t, "Close to begin", func() bool { return reservation.Closing(svc) })
		answer := make(chan error, 1)
		go func() { _, _, err := svc.Place(context.Background(), r); answer <- err }()
		select {
		case err := <-answer:
			if !errors.Is(err, reservation.ErrClosed) {
				t.Errorf("an order sent after Close began = %v, want ErrClosed", err)
			}
		case <-time.After(time.Second):
			t.Errorf("an order sent after Close began was taken in, keeping Close waiting")
		}
	}
	t.Run("queue", func(t *testing.T) {
		f := newFixture(t, reservation.Coalescing{})
		ctx := context.Background()
		f.stock("a", 10)
		release := f.hold("a")
		queued := f.queue(f.svc, "a", req("", line("a", 1)))
		closed := make(chan error, 1)
		go func() { closed <- f.svc.Close(ctx) }()
		late(t, f.svc, req("", line("a", 1)))
		release()
		if err := <-closed; err != nil {
			t.Fatalf("Close = %v", err)
		}
		if r := queued(); r[0].err != nil {
			t.Fatalf("the order queued before Close: %v", r[0].err)
		}
	})
	t.Run("intake", func(t *testing.T) {
		f := gatherFixture(t, 1)
		ctx := context.Background()
		first, gathered := f.busyFirst()
		closed := make(chan error, 1)
		go func() { closed <- f.svc.Close(ctx) }()
		late(t, f.svc, req("", line("s0", 1)))
		close(gathered)
		if err := <-first; err != nil {
			t.Fatalf("the order gathered before Close: %v", err)
		}
		if err := <-closed; err != nil {
			t.Fatalf("Close = %v", err)
		}
	})
}

// TestCloseCutsShort: when Close's context ends first, the runs give up
// their lock waits, answer their orders and exit before Close returns. The
// orders are told the service is shutting down (ErrClosed: 503 with
// Retry-After), not that their client left.
func TestCloseCutsShort(t *testing.T) {
	for _, c := range []reservation.Coalescing{{}, {Disabled: true}} {
		t.Run(fmt.Sprintf("disabled=%v", c.Disabled), func(t *testing.T) {
			f := newFixture(t, c)
			f.stock("a", 10)
			defer f.hold("a")()
			reqs := []inventory.PlaceRequest{req("", line("a", 1)), req("", line("a", 2))}
			var queued func() []result
			if c.Disabled {
				queued = f.alone(reqs...)
			} else {
				queued = f.queue(f.svc, "a", reqs...)
			}
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
				if !errors.Is(r.err, reservation.ErrClosed) || errors.Is(r.err, context.Canceled) {
					t.Errorf("order %d cut short by Close = %v, want ErrClosed", i, r.err)
				}
			}
			if a := f.audit("a"); !a.Consistent || a.Held != 0 {
				t.Fatalf("audit = %+v", a)
			}
		})
	}
}

// hangingWrites makes every Write hang until its context ends, then answer
// as the postgres store does for a write sent and not answered.
type hangingWrites struct {
	inventory.Store
	entered chan struct{}
}

func (h hangingWrites) Write(ctx context.Context, fences []inventory.Fence, w inventory.Write) error {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return fmt.Errorf("fake store: write: %w (%w)", ctx.Err(), inventory.ErrOutcomeUnknown)
}

// TestCloseCutShortWriteStaysUnknown: an order whose write Close cut short
// in flight is answered that its outcome is unknown (the write may have
// landed), never ErrClosed, which tells a client nothing was done: from a
// queue's leader and alone.
func TestCloseCutShortWriteStaysUnknown(t *testing.T) {
	for _, c := range []reservation.Coalescing{{}, {Disabled: true}} {
		t.Run(fmt.Sprintf("disabled=%v", c.Disabled), func(t *testing.T) {
			f := newFixture(t, c)
			f.stock("a", 10)
			entered := make(chan struct{}, 1)
			f.store.Store = hangingWrites{Store: f.store.Store, entered: entered}
			answer := make(chan error, 1)
			go func() { _, _, err := f.svc.Place(context.Background(), req("", line("a", 1))); answer <- err }()
			<-entered
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if err := f.svc.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Close = %v, want DeadlineExceeded", err)
			}
			if err := <-answer; !errors.Is(err, inventory.ErrOutcomeUnknown) || errors.Is(err, reservation.ErrClosed) {
				t.Fatalf("order cut short in its write = %v, want ErrOutcomeUnknown, not ErrClosed", err)
			}
		})
	}
}

// alone starts Place for each request on a service with coalescing off,
// waiting until each waits for its lock; it returns their results once all
// have answered.
func (f *fixture) alone(reqs ...inventory.PlaceRequest) func() []result {
	f.t.Helper()
	out := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		waited := f.locker.waited.Load()
		wg.Go(func() {
			o, replayed, err := f.svc.Place(context.Background(), r)
			out[i] = result{o, replayed, err}
		})
		waitFor(f.t, fmt.Sprintf("order %d waiting for its lock", i), func() bool { return f.locker.waited.Load() > waited })
	}
	return func() []result {
		wg.Wait()
		return out
	}
}
