package reservation_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/postgres"
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

// TestStaleRowFailsAlone: in a gathered batch, a row that a newer lease has
// claimed — found by the claim, or only by the write — fails the orders
// that name it (stale_fence) and no other: the batch's orders of other SKUs
// are placed, in one write.
func TestStaleRowFailsAlone(t *testing.T) {
	for _, at := range []string{"claim", "write"} {
		t.Run(at, func(t *testing.T) {
			const n = 4
			f := gatherFixture(t, n)
			ctx := context.Background()
			f.stock("taken", 2)
			takeRow := func() { // as a newer lease's claim would
				if _, err := f.store.Store.(*postgres.Store).DB().Exec(
					`UPDATE skus SET fence_token = 9000000000000000000 WHERE sku = 'taken'`); err != nil {
					t.Error(err)
				}
			}
			if at == "claim" {
				takeRow()
			} else {
				var once sync.Once
				f.store.onClaim(func(fences []inventory.Fence) {
					if slices.ContainsFunc(fences, func(fc inventory.Fence) bool { return fc.SKU == "taken" }) {
						once.Do(takeRow)
					}
				})
			}
			first, gathered := f.busyFirst()
			reqs := []inventory.PlaceRequest{req("", line("taken", 1)), req("", line("s1", 1), line("taken", 1))}
			for i := range n {
				reqs = append(reqs, req("", line(fmt.Sprintf("s%d", i), 1)))
			}
			errs := make([]error, len(reqs))
			var wg sync.WaitGroup
			for i, r := range reqs {
				wg.Go(func() { _, _, errs[i] = f.svc.Place(ctx, r) })
			}
			waitFor(t, "the orders gathered", func() bool { return reservation.Gathering(f.svc) == len(reqs) })
			close(gathered)
			if err := <-first; err != nil {
				t.Fatalf("first order: %v", err)
			}
			wg.Wait()
			for i, err := range errs {
				var ke *inventory.SKUError
				switch {
				case i < 2 && (!errors.As(err, &ke) || ke.SKU != "taken" || !errors.Is(err, inventory.ErrStaleFence)):
					t.Errorf("order %d, naming the taken row = %v, want its stale fence", i, err)
				case i >= 2 && err != nil:
					t.Errorf("order %d, a neighbour of the taken row: %v", i, err)
				}
			}
			if _, writes := f.store.counts(); len(writes) != 2 || writes[1] != n {
				t.Errorf("writes %v, want the first order's and the %d neighbours in one", writes, n)
			}
			if a := f.audit("s1"); !a.Consistent || a.Held != 1 {
				t.Errorf("audit s1 = %+v, want the lone order held, the one with the taken row not", a)
			}
		})
	}
}

// TestLostLeaseFailsAlone: in a gathered batch, the lease of one SKU is
// lost — before the claim, or between the claim and the write. The orders
// that name that SKU fail with the loss (one with a line on a SKU whose
// lease stands fails whole), and no other: the batch's orders of other
// SKUs are written under their own leases and fences, in one write.
func TestLostLeaseFailsAlone(t *testing.T) {
	for _, at := range []string{"claim", "write"} {
		t.Run(at, func(t *testing.T) {
			const n = 4
			f := gatherFixture(t, n)
			ctx := context.Background()
			f.stock("lost", 2)
			var once sync.Once
			lose := func(fences []inventory.Fence) {
				if slices.ContainsFunc(fences, func(fc inventory.Fence) bool { return fc.SKU == "lost" }) {
					once.Do(func() { f.locker.loseLease("lost") })
				}
			}
			f.store.mu.Lock()
			if at == "claim" {
				f.store.beforeClaim = lose
			} else {
				f.store.afterClaim = lose
			}
			f.store.mu.Unlock()
			first, gathered := f.busyFirst()
			reqs := []inventory.PlaceRequest{req("", line("lost", 1)), req("", line("s1", 1), line("lost", 1))}
			for i := range n {
				reqs = append(reqs, req("", line(fmt.Sprintf("s%d", i), 1)))
			}
			errs := make([]error, len(reqs))
			var wg sync.WaitGroup
			for i, r := range reqs {
				wg.Go(func() { _, _, errs[i] = f.svc.Place(ctx, r) })
			}
			waitFor(t, "the orders gathered", func() bool { return reservation.Gathering(f.svc) == len(reqs) })
			close(gathered)
			if err := <-first; err != nil {
				t.Fatalf("first order: %v", err)
			}
			wg.Wait()
			for i, err := range errs {
				switch {
				case i < 2 && !errors.Is(err, lock.ErrLeaseLost):
					t.Errorf("order %d, naming the SKU whose lease was lost = %v, want ErrLeaseLost", i, err)
				case i >= 2 && err != nil:
					t.Errorf("order %d, whose own lease stood = %v; want placed", i, err)
				}
			}
			if _, writes := f.store.counts(); len(writes) != 2 || writes[1] != n {
				t.Errorf("writes %v, want the first order's and the %d others in one", writes, n)
			}
			if a := f.audit("s1"); !a.Consistent || a.Held != 1 {
				t.Errorf("audit s1 = %+v, want the lone order held, the one with the lost SKU not", a)
			}
			if a := f.audit("lost"); !a.Consistent || a.Held != 0 {
				t.Errorf("audit lost = %+v, want nothing held", a)
			}
		})
	}
}
