package reservation_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
// the batch gives up after MaxRewrites rewrites; the orders isolated by
// then fail with their refusal, those not yet isolated as overloaded (the
// refusal is not shown to be theirs), and nothing is placed twice or
// wrongly.
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
	var isolated, overloaded int
	for i, r := range results() {
		switch {
		case errors.Is(r.err, inventory.ErrInvalid) && !errors.Is(r.err, inventory.ErrOverloaded):
			isolated++
		case errors.Is(r.err, inventory.ErrOverloaded) && !errors.Is(r.err, inventory.ErrInvalid):
			overloaded++
		default:
			t.Fatalf("order %d = %v, want ErrInvalid (isolated) or ErrOverloaded (not yet)", i, r.err)
		}
	}
	if isolated == 0 || overloaded == 0 {
		t.Fatalf("%d orders isolated, %d not; want some of each from 40 halved within the bound", isolated, overloaded)
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

// TestLostKeyAnswersTheLoss: in a gathered batch, an order on a SKU whose
// lease is lost is answered with the loss even where the ledger refuses
// it (more than the stock): its refusal was judged without the lease. The
// lease is lost as it is granted (before the claim: the claim does not
// stamp its fence on the row), during the claim, or between the claim and
// the write. The batch's orders of other SKUs are placed, in one write.
func TestLostKeyAnswersTheLoss(t *testing.T) {
	for _, at := range []string{"granted", "claim", "write"} {
		t.Run(at, func(t *testing.T) {
			const n = 2
			f := gatherFixture(t, n)
			ctx := context.Background()
			f.stock("lost", 1)
			var once sync.Once
			var lostToken atomic.Uint64
			f.locker.mu.Lock()
			f.locker.granted = func(l *lock.Lease) {
				if l.Key() == "lost" {
					lostToken.Store(uint64(l.Token()))
					if at == "granted" {
						once.Do(func() { f.locker.loseLease("lost") })
					}
				}
			}
			f.locker.mu.Unlock()
			lose := func(fences []inventory.Fence) {
				if slices.ContainsFunc(fences, func(fc inventory.Fence) bool { return fc.SKU == "lost" }) {
					once.Do(func() { f.locker.loseLease("lost") })
				}
			}
			f.store.mu.Lock()
			switch at {
			case "claim":
				f.store.beforeClaim = lose
			case "write":
				f.store.afterClaim = lose
			}
			f.store.mu.Unlock()
			first, gathered := f.busyFirst()
			reqs := []inventory.PlaceRequest{req("", line("lost", 5))} // the ledger refuses it: stock 1
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
			var ke *inventory.SKUError
			if !errors.Is(errs[0], lock.ErrLeaseLost) || !errors.As(errs[0], &ke) || ke.SKU != "lost" {
				t.Errorf("order on the SKU whose lease was lost = %v, want its loss", errs[0])
			}
			for i, err := range errs[1:] {
				if err != nil {
					t.Errorf("order on s%d, whose lease stood = %v; want placed", i, err)
				}
			}
			if _, writes := f.store.counts(); len(writes) != 2 || writes[1] != n {
				t.Errorf("writes %v, want the first order's and the %d others in one", writes, n)
			}
			if at == "granted" {
				var tok uint64
				if err := f.store.Store.(*postgres.Store).DB().QueryRow(
					`SELECT fence_token FROM skus WHERE sku = 'lost'`).Scan(&tok); err != nil {
					t.Fatal(err)
				}
				if tok == lostToken.Load() {
					t.Errorf("row 'lost' carries fence %d, stamped by the claim of a lease lost before it", tok)
				}
			}
			if a := f.audit("lost"); !a.Consistent || a.Held != 0 {
				t.Errorf("audit lost = %+v, want nothing held", a)
			}
		})
	}
}

// TestRewritesRunOutSparingOthers: a gathered batch loses leases one after
// another, each loss found as its write is tried again after the store
// refused a row as stale, until its rewrites run out. The orders on the
// lost and stale SKUs get their own answers; those whose leases stood,
// not yet written, are answered overloaded (retry), naming no SKU: not the
// last loss (lock_unavailable for a SKU they do not have).
func TestRewritesRunOutSparingOthers(t *testing.T) {
	const n = 3
	f := gatherFixture(t, n)
	ctx := context.Background()
	// l0 is lost after the claim; each write that reaches the store from
	// then on is refused for the lowest y<j> row in it, as l<j> is lost:
	// two rewrites a loss, the last one's (l<losses-1>) the one found
	// when none are left.
	losses := reservation.MaxRewrites/2 + 1
	var reqs []inventory.PlaceRequest
	for i := range losses {
		f.stock(fmt.Sprintf("l%d", i), 2)
		reqs = append(reqs, req("", line(fmt.Sprintf("l%d", i), 1)))
	}
	for j := 1; j < losses; j++ {
		f.stock(fmt.Sprintf("y%d", j), 2)
		reqs = append(reqs, req("", line(fmt.Sprintf("y%d", j), 1)))
	}
	for i := range n {
		reqs = append(reqs, req("", line(fmt.Sprintf("s%d", i), 1)))
	}
	var once sync.Once
	f.store.onClaim(func(fences []inventory.Fence) {
		if slices.ContainsFunc(fences, func(fc inventory.Fence) bool { return fc.SKU == "l0" }) {
			once.Do(func() { f.locker.loseLease("l0") })
		}
	})
	first, gathered := f.busyFirst()
	f.store.mu.Lock()
	f.store.refuse = func(w inventory.Write) error {
		for _, k := range w.SKUs { // in SKU order
			if strings.HasPrefix(k.SKU, "y") {
				f.locker.loseLease("l" + k.SKU[1:])
				return &inventory.SKUError{SKU: k.SKU, Err: inventory.ErrStaleFence}
			}
		}
		return nil
	}
	f.store.mu.Unlock()
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
		sku := reqs[i].Lines[0].SKU
		var ke *inventory.SKUError
		switch sku[0] {
		case 'l':
			if !errors.Is(err, lock.ErrLeaseLost) || !errors.As(err, &ke) || ke.SKU != sku {
				t.Errorf("order on %s, whose lease was lost = %v, want its loss", sku, err)
			}
		case 'y':
			if !errors.Is(err, inventory.ErrStaleFence) || !errors.As(err, &ke) || ke.SKU != sku {
				t.Errorf("order on %s, whose row was refused stale = %v, want its stale fence", sku, err)
			}
		default:
			if !errors.Is(err, inventory.ErrOverloaded) || errors.Is(err, lock.ErrLeaseLost) || errors.As(err, &ke) {
				t.Errorf("order on %s, whose lease stood = %v, want ErrOverloaded naming no SKU", sku, err)
			}
			if a := f.audit(sku); !a.Consistent || a.Held != 0 {
				t.Errorf("audit %s = %+v, want nothing held", sku, a)
			}
		}
	}
}
