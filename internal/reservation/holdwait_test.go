package reservation_test

import (
	"context"
	"testing"
	"time"

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
