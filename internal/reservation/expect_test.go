package reservation_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/reservation"
)

// stockChanged fails t unless err is the refusal of a conditional level on
// sku whose message ends with differ: the counters that differ, and only
// those.
func stockChanged(t *testing.T, err error, sku, differ string) {
	t.Helper()
	var ke *inventory.SKUError
	if !errors.Is(err, inventory.ErrStockChanged) || !errors.As(err, &ke) || ke.SKU != sku ||
		!strings.HasSuffix(err.Error(), ": "+differ) {
		t.Fatalf("got %v, want ErrStockChanged on %s ending %q", err, sku, differ)
	}
}

// seen is the expectation of a caller that read k: both counters, as the
// client sends them.
func seen(k inventory.SKU) inventory.StockExpectation {
	return inventory.StockExpectation{Available: &k.Available, Received: &k.Received}
}

// TestSetStockIf: a level whose expectation holds is written like any
// other; one whose expectation does not is refused under the lease, after
// the claim, and writes nothing: every counter stays as it was.
func TestSetStockIf(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	f.stock("a", 10)
	k, err := f.svc.SetStockIf(ctx, "a", 15, inventory.StockExpectation{Available: new(int64(10)), Received: new(int64(10))})
	if err != nil || k.Available != 15 || k.Received != 15 {
		t.Fatalf("SetStockIf(15) over the 10 available and received expected = %+v, %v; want available and received 15", k, err)
	}
	if claims, writes := f.store.counts(); claims != 1 || len(writes) != 1 {
		t.Fatalf("matching expectations: %d claims, writes %v; want one of each", claims, writes)
	}
	if _, _, err := f.svc.Place(ctx, req("", line("a", 2))); err != nil {
		t.Fatal(err)
	}
	f.store.counts()
	before, err := f.svc.SKU(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}

	_, err = f.svc.SetStockIf(ctx, "a", 20, inventory.StockExpectation{Available: new(int64(15)), Received: new(int64(15))})
	stockChanged(t, err, "a", "available is 13, not the expected 15")
	if tried := f.store.tried(); tried != 0 {
		t.Fatalf("a refused expectation tried %d writes, want none", tried)
	}
	if claims, _ := f.store.counts(); claims != 1 {
		t.Fatalf("a refused expectation made %d claims, want one: it is judged under the lease", claims)
	}
	after, err := f.svc.SKU(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if after.Available != before.Available || after.Reserved != before.Reserved || after.Sold != before.Sold ||
		after.Received != before.Received {
		t.Fatalf("a refused expectation moved the counters: %+v, then %+v", before, after)
	}
	if a := f.audit("a"); !a.Consistent || a.Received != 15 || a.Held != 2 {
		t.Fatalf("audit = %+v", a)
	}
}

// TestSetStockIfMissingSKU: a SKU that does not exist counts as 0 of each.
// Expectations of 0 create it; any other, of either counter, is refused and
// creates nothing, no empty row either.
func TestSetStockIfMissingSKU(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	for _, c := range []struct {
		expect inventory.StockExpectation
		differ string
	}{
		{inventory.StockExpectation{Available: new(int64(5))}, "available is 0, not the expected 5"},
		{inventory.StockExpectation{Available: new(int64(0)), Received: new(int64(5))}, "received is 0, not the expected 5"},
		{inventory.StockExpectation{Received: new(int64(5))}, "received is 0, not the expected 5"},
	} {
		_, err := f.svc.SetStockIf(ctx, "new", 4, c.expect)
		stockChanged(t, err, "new", c.differ)
		if k, err := f.svc.SKU(ctx, "new"); !errors.Is(err, inventory.ErrUnknownSKU) {
			t.Fatalf("after a refused expectation (%s) the SKU reads %+v, %v; want it unknown", c.differ, k, err)
		}
		if _, _, err := f.svc.Place(ctx, req("", line("new", 1))); !errors.Is(err, inventory.ErrUnknownSKU) {
			t.Fatalf("an order after the refused expectation (%s) = %v, want unknown_sku", c.differ, err)
		}
	}

	k, err := f.svc.SetStockIf(ctx, "new", 4, seen(inventory.SKU{}))
	if err != nil || k.Available != 4 || k.Received != 4 {
		t.Fatalf("SetStockIf(4) expecting 0 and 0 of a missing SKU = %+v, %v; want it created with 4", k, err)
	}
	_, err = f.svc.SetStockIf(ctx, "new", 9, seen(inventory.SKU{}))
	stockChanged(t, err, "new", "available is 4, not the expected 0; received is 4, not the expected 0")
	if k, err := f.svc.SKU(ctx, "new"); err != nil || k.Available != 4 || k.Received != 4 {
		t.Fatalf("after a refused expectation of 0 = %+v, %v; want 4 still", k, err)
	}
}

// TestSetStockIfRepeat is the retry after a lost answer: the first
// attempt lands (10 read, 15 set), orders take 5 units, so available is 10
// again, and the repeat, with the same expectations, must not add 5 more.
// Available alone would pass it; received, which only a PUT moves, refuses
// it.
func TestSetStockIfRepeat(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	f.stock("a", 10)
	read, err := f.svc.SKU(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if k, err := f.svc.SetStockIf(ctx, "a", read.Available+5, seen(read)); err != nil || k.Received != 15 {
		t.Fatalf("the first attempt = %+v, %v; want received 15", k, err)
	}
	if _, _, err := f.svc.Place(ctx, req("", line("a", 5))); err != nil {
		t.Fatal(err)
	}
	_, err = f.svc.SetStockIf(ctx, "a", read.Available+5, seen(read))
	stockChanged(t, err, "a", "received is 15, not the expected 10")
	if k, err := f.svc.SKU(ctx, "a"); err != nil || k.Available != 10 || k.Reserved != 5 || k.Received != 15 {
		t.Fatalf("after the refused repeat = %+v, %v; want available 10, reserved 5, received 15", k, err)
	}
	if a := f.audit("a"); !a.Consistent || a.Received != 15 {
		t.Fatalf("audit = %+v", a)
	}
}

// TestSetStockIfReceivedAlone: another PUT since the read (here one that
// put back the 10 available read, after an order took 5) is refused on
// received alone, and the message names received only.
func TestSetStockIfReceivedAlone(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	f.stock("a", 10)
	read, err := f.svc.SKU(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.svc.Place(ctx, req("", line("a", 5))); err != nil {
		t.Fatal(err)
	}
	f.stock("a", 10)
	_, err = f.svc.SetStockIf(ctx, "a", 12, seen(read))
	stockChanged(t, err, "a", "received is 15, not the expected 10")
	if k, err := f.svc.SKU(ctx, "a"); err != nil || k.Available != 10 || k.Received != 15 {
		t.Fatalf("after the refusal = %+v, %v; want available 10, received 15", k, err)
	}
}

// TestSetStockIfRace is the admin's read, add, write: 10 read, 5 received,
// 15 sent. An order placed between the read and the write makes the write
// fail rather than create the 3 units the order took; read again, it lands
// on what is there.
func TestSetStockIfRace(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	f.stock("a", 10)
	read, err := f.svc.SKU(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.svc.Place(ctx, req("", line("a", 3))); err != nil {
		t.Fatal(err)
	}
	_, err = f.svc.SetStockIf(ctx, "a", read.Available+5, seen(read))
	stockChanged(t, err, "a", "available is 7, not the expected 10")

	if read, err = f.svc.SKU(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	k, err := f.svc.SetStockIf(ctx, "a", read.Available+5, seen(read))
	if err != nil || k.Available != 12 || k.Reserved != 3 || k.Received != 15 {
		t.Fatalf("SetStockIf after a new read = %+v, %v; want available 12, reserved 3, received 15", k, err)
	}
	if a := f.audit("a"); !a.Consistent || a.LostUnits != 0 {
		t.Fatalf("audit = %+v", a)
	}
}

// TestSetStockIfUnderOrders: received units added by read and conditional
// write while orders take units are added exactly: each write an order
// overtook is refused and done again from a new read.
func TestSetStockIfUnderOrders(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	const start, orders, adds, each = 1000, 200, 5, 5
	f.stock("a", start)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range orders / 4 {
				if _, _, err := f.svc.Place(ctx, req("", line("a", 1))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	refused := 0
	for range adds {
		for {
			k, err := f.svc.SKU(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.svc.SetStockIf(ctx, "a", k.Available+each, seen(k))
			if errors.Is(err, inventory.ErrStockChanged) {
				refused++
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	wg.Wait()
	k, err := f.svc.SKU(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if k.Received != start+adds*each || k.Reserved != orders || k.Available != start+adds*each-orders {
		t.Fatalf("after %d orders and %d additions of %d: %+v; want received %d", orders, adds, each, k, start+adds*each)
	}
	if a := f.audit("a"); !a.Consistent {
		t.Fatalf("audit = %+v", a)
	}
	t.Logf("%d conditional writes refused and done again", refused)
}
