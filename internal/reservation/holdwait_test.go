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

// TestHoldWaitIsBounded: an order of two lines whose second SKU is held
// elsewhere does not keep its first locked the whole time it waits: within
// the hold-wait bound the first is free again for an order on it alone,
// and once the second is let go the two-line order is placed.
func TestHoldWaitIsBounded(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{Disabled: true})
	ctx := context.Background()
	f.stock("a", 10)
	f.stock("b", 10)
	releaseB := f.hold("b")
	big := make(chan error, 1)
	go func() {
		_, _, err := f.svc.Place(ctx, req("", line("a", 1), line("b", 1)))
		big <- err
	}()
	time.Sleep(50 * time.Millisecond) // it holds a, waits for b
	start := time.Now()
	if _, _, err := f.svc.Place(ctx, req("", line("a", 1))); err != nil {
		t.Fatalf("an order on a alone: %v", err)
	}
	if d := time.Since(start); d > 3*lock.DefaultHoldWait {
		t.Fatalf("an order on a alone waited %s behind an order holding a for b; bound %s", d, lock.DefaultHoldWait)
	}
	releaseB()
	if err := <-big; err != nil {
		t.Fatalf("the two-line order: %v", err)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 2 {
		t.Fatalf("audit a = %+v", a)
	}
}

// TestLeaderStopsWhenItsOrdersLeave: a queue leader waiting in a key's line
// stops waiting once every order it waits for has left (their clients hung
// up), rather than holding its place, a goroutine and a queue for the whole
// lock wait; the key's next order is served as usual.
func TestLeaderStopsWhenItsOrdersLeave(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 10)
	release := f.hold("a")
	ctxs := make([]context.Context, 3)
	cancels := make([]context.CancelFunc, 3)
	reqs := make([]inventory.PlaceRequest, 3)
	for i := range ctxs {
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
		reqs[i] = req("", line("a", 1))
	}
	results := f.queueCtx(f.svc, "a", ctxs, reqs)
	start := time.Now()
	for _, cancel := range cancels {
		cancel()
	}
	out, _ := results()
	for i, r := range out {
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("order %d, its client gone = %v, want context.Canceled", i, r.err)
		}
	}
	waitFor(t, "the leader to leave the key's line", func() bool { return !reservation.Leading(f.svc, "a") })
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the leader waited %v after its last order left (lock wait 5s)", d)
	}
	release()
	if _, _, err := f.svc.Place(context.Background(), req("", line("a", 1))); err != nil {
		t.Fatalf("the next order on a: %v", err)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 1 {
		t.Fatalf("audit a = %+v, want the one order held", a)
	}
}
