package reservation_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/reservation"
)

// TestKeyRunningForAnotherOrderIsInFlight: a request whose key is running
// here for another order is told the key is in flight, not reused: the
// first may still fail, which frees the key, and the same request is then
// placed. Reused is for a key an order holds.
func TestKeyRunningForAnotherOrderIsInFlight(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	f.stock("a", 5)
	release := f.hold("a")
	results := f.queue(f.svc, "a", req("k-1", line("a", 9))) // short: it will free k-1
	_, _, err := f.svc.Place(ctx, req("k-1", line("a", 2)))
	release()
	got := results()
	if !errors.Is(err, inventory.ErrIdempotencyInFlight) || errors.Is(err, inventory.ErrIdempotencyReused) {
		t.Fatalf("k-1 with another order while the first runs = %v, want ErrIdempotencyInFlight", err)
	}
	if !errors.Is(got[0].err, inventory.ErrInsufficientStock) {
		t.Fatalf("first k-1 = %v, want ErrInsufficientStock", got[0].err)
	}
	placed, replayed, err := f.svc.Place(ctx, req("k-1", line("a", 2)))
	if err != nil || replayed {
		t.Fatalf("retry once the first failed = %+v, %v, %v; want a new order", placed, replayed, err)
	}
	if _, _, err := f.svc.Place(ctx, req("k-1", line("a", 9))); !errors.Is(err, inventory.ErrIdempotencyReused) {
		t.Fatalf("k-1 with another order once placed = %v, want ErrIdempotencyReused", err)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 2 {
		t.Fatalf("audit = %+v, want 2 held", a)
	}
}
