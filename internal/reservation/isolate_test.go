package reservation_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/reservation"
)

// poison refuses, as the database refuses a byte sequence it cannot store,
// any write carrying an order whose key starts with "poison"; named says
// whether the refusal names the order or only says the text was invalid.
func poison(named bool) func(w inventory.Write) error {
	return func(w inventory.Write) error {
		for _, o := range w.Orders {
			if strings.HasPrefix(o.IdempotencyKey, "poison") {
				err := fmt.Errorf("fake store: invalid byte sequence: %w", inventory.ErrInvalid)
				if named {
					return &inventory.OrderError{ID: o.ID, Err: err}
				}
				return err
			}
		}
		return nil
	}
}

// TestBatchIsolatesRefusedOrder: a write refused because of one order —
// named by the store or not — fails that order alone; the others of its
// batch are placed, and the retries stay within the bound.
func TestBatchIsolatesRefusedOrder(t *testing.T) {
	for _, named := range []bool{true, false} {
		t.Run(fmt.Sprintf("named=%v", named), func(t *testing.T) {
			f := newFixture(t, reservation.Coalescing{})
			f.stock("a", 100)
			f.store.refuse = poison(named)
			release := f.hold("a")
			reqs := make([]inventory.PlaceRequest, 9)
			for i := range reqs {
				reqs[i] = req(fmt.Sprintf("k-%d", i), line("a", 1))
			}
			reqs[5].IdempotencyKey = "poison-5"
			results := f.queue(f.svc, "a", reqs...)
			release()
			for i, r := range results() {
				if i == 5 {
					if !errors.Is(r.err, inventory.ErrInvalid) {
						t.Fatalf("the refused order = %v, want its own ErrInvalid", r.err)
					}
					continue
				}
				if r.err != nil {
					t.Fatalf("order %d, a neighbour of the refused one: %v", i, r.err)
				}
			}
			if a := f.audit("a"); !a.Consistent || a.Held != 8 {
				t.Fatalf("audit = %+v, want the 8 neighbours held", a)
			}
		})
	}
}

// TestBatchRewritesAreBounded: when every order is refused one by one,
// the batch gives up after MaxRewrites rewrites and the orders not yet
// isolated fail with the refusal; nothing is placed twice or wrongly.
func TestBatchRewritesAreBounded(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 100)
	f.store.refuse = poison(false)
	release := f.hold("a")
	reqs := make([]inventory.PlaceRequest, 40)
	for i := range reqs {
		reqs[i] = req(fmt.Sprintf("poison-%d", i), line("a", 1))
	}
	results := f.queue(f.svc, "a", reqs...)
	release()
	for i, r := range results() {
		if !errors.Is(r.err, inventory.ErrInvalid) {
			t.Fatalf("order %d = %v, want ErrInvalid", i, r.err)
		}
	}
	attempts := f.store.tried()
	if attempts > 1+reservation.MaxRewrites {
		t.Fatalf("%d write attempts, want at most %d", attempts, 1+reservation.MaxRewrites)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 0 {
		t.Fatalf("audit = %+v", a)
	}
}

// TestBatchUnattributedFailure: a write failure that names no order (the
// database did not answer) is the whole batch's: one attempt, every order
// fails with it.
func TestBatchUnattributedFailure(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 100)
	down := errors.New("fake store: connection refused")
	f.store.refuse = func(inventory.Write) error { return down }
	release := f.hold("a")
	results := f.queue(f.svc, "a", req("", line("a", 1)), req("k-1", line("a", 1)), req("", line("a", 1)))
	release()
	for i, r := range results() {
		if !errors.Is(r.err, down) {
			t.Fatalf("order %d = %v, want the store's error", i, r.err)
		}
	}
	attempts := f.store.tried()
	if attempts != 1 {
		t.Fatalf("%d write attempts, want 1", attempts)
	}
}
