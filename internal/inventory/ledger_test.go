package inventory

import (
	"errors"
	"strings"
	"testing"
)

func testLedger() *Ledger {
	return NewLedger(map[string]SKU{"a": {SKU: "a", Available: 5, Received: 5}, "b": {SKU: "b", Available: 1, Received: 1}},
		map[string]Fence{"a": {SKU: "a", Token: 7}, "b": {SKU: "b", Token: 9}, "x": {SKU: "x", Token: 11}},
		map[string]error{"x": &SKUError{SKU: "x", Err: ErrUnknownSKU}})
}

func order(lines ...Line) *Order { return &Order{Lines: lines} }

func TestLedgerReserveAllOrNothing(t *testing.T) {
	l := testLedger()
	cases := []struct {
		name           string
		o              *Order
		err            error
		availA, availB int64
	}{
		{"fits", order(Line{SKU: "a", Quantity: 2}), nil, 3, 1},
		{"second line short", order(Line{SKU: "a", Quantity: 1}, Line{SKU: "b", Quantity: 2}), ErrInsufficientStock, 3, 1},
		{"unknown line", order(Line{SKU: "a", Quantity: 1}, Line{SKU: "x", Quantity: 1}), ErrUnknownSKU, 3, 1},
		{"both lines", order(Line{SKU: "b", Quantity: 1}, Line{SKU: "a", Quantity: 3}), nil, 0, 0},
		{"sold out", order(Line{SKU: "a", Quantity: 1}), ErrInsufficientStock, 0, 0},
	}
	for _, c := range cases {
		err := l.Reserve(c.o)
		if !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Fatalf("%s: Reserve = %v, want %v", c.name, err, c.err)
		}
		if l.skus["a"].Available != c.availA || l.skus["b"].Available != c.availB {
			t.Fatalf("%s: available a=%d b=%d, want %d %d", c.name, l.skus["a"].Available, l.skus["b"].Available, c.availA, c.availB)
		}
		if err == nil {
			for _, ln := range c.o.Lines {
				if ln.FenceToken != l.fences[ln.SKU].Token {
					t.Fatalf("%s: line %s token %d, want its lease's %d", c.name, ln.SKU, ln.FenceToken, l.fences[ln.SKU].Token)
				}
			}
		}
	}
	var se *StockError
	if err := l.Reserve(order(Line{SKU: "b", Quantity: 4})); !errors.As(err, &se) || se.SKU != "b" || se.Available != 0 {
		t.Fatalf("stock error = %v", err)
	}
	skus, fences := l.Changes()
	if len(skus) != 2 || skus[0].SKU != "a" || skus[0].Reserved != 5 || skus[1].Reserved != 1 || fences[1].Token != 9 {
		t.Fatalf("Changes = %+v %+v", skus, fences)
	}
	c := l.Clone()
	c.skus["a"] = SKU{SKU: "a", Available: 99}
	if l.skus["a"].Available != 0 || len(c.changed) != 0 {
		t.Fatal("clone shares counters with its ledger")
	}
	l.Written()
	if skus, _ := l.Changes(); len(skus) != 0 {
		t.Fatalf("Changes after Written = %+v, want none", skus)
	}
}

// TestLedgerSetAvailable: received follows available up and down, so the
// identity received = available + held + sold survives any stock level.
func TestLedgerSetAvailable(t *testing.T) {
	l := testLedger()
	if err := l.Reserve(order(Line{SKU: "a", Quantity: 2})); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{10, 0, 3, 3} {
		k, err := l.SetAvailable("a", n)
		if err != nil {
			t.Fatal(err)
		}
		if k.Available != n || k.Reserved != 2 || k.Received != n+2 || k.FenceToken != 7 {
			t.Fatalf("set %d: %+v, want available %d, reserved 2, received %d, token 7", n, k, n, n+2)
		}
	}
	if skus, _ := l.Changes(); len(skus) != 1 || skus[0].Available != 3 {
		t.Fatalf("Changes = %+v, want a alone at 3 (an unchanged level is written too)", skus)
	}
	if _, err := l.SetAvailable("x", 1); !errors.Is(err, ErrUnknownSKU) {
		t.Fatalf("SetAvailable on an unknown SKU = %v, want ErrUnknownSKU", err)
	}
	if _, err := l.SetAvailable("c", 1); err == nil {
		t.Fatal("SetAvailable on a SKU under no lease succeeded")
	}
}

// TestLedgerSetAvailableIf: the level is set only over the expected
// counters, a missing SKU counting as 0 of each; a refusal moves nothing
// and names every counter that differs.
func TestLedgerSetAvailableIf(t *testing.T) {
	l := testLedger()
	if err := l.Reserve(order(Line{SKU: "a", Quantity: 2})); err != nil {
		t.Fatal(err)
	}
	l.Written()
	_, err := l.SetAvailableIf("a", 8, StockExpectation{Available: new(int64(5))})
	var ke *SKUError
	if !errors.Is(err, ErrStockChanged) || !errors.As(err, &ke) || ke.SKU != "a" ||
		!strings.HasSuffix(err.Error(), ": available is 3, not the expected 5") {
		t.Fatalf("SetAvailableIf over 5 with 3 available = %v, want ErrStockChanged naming 3", err)
	}
	_, err = l.SetAvailableIf("a", 8, StockExpectation{Available: new(int64(3)), Received: new(int64(4))})
	if !errors.Is(err, ErrStockChanged) || !strings.HasSuffix(err.Error(), ": received is 5, not the expected 4") {
		t.Fatalf("SetAvailableIf over received 4 with 5 = %v, want ErrStockChanged naming received alone", err)
	}
	_, err = l.SetAvailableIf("a", 8, StockExpectation{Available: new(int64(5)), Received: new(int64(4))})
	if !errors.Is(err, ErrStockChanged) ||
		!strings.HasSuffix(err.Error(), ": available is 3, not the expected 5; received is 5, not the expected 4") {
		t.Fatalf("SetAvailableIf with both wrong = %v, want ErrStockChanged naming both", err)
	}
	if skus, _ := l.Changes(); len(skus) != 0 || l.skus["a"].Available != 3 || l.skus["a"].Received != 5 {
		t.Fatalf("a refused level moved the ledger: %+v, changes %+v", l.skus["a"], skus)
	}
	k, err := l.SetAvailableIf("a", 8, StockExpectation{Available: new(int64(3)), Received: new(int64(5))})
	if err != nil || k.Available != 8 || k.Reserved != 2 || k.Received != 10 {
		t.Fatalf("SetAvailableIf over the 3 available, 5 received = %+v, %v; want available 8, received 10", k, err)
	}
	if k, err := l.SetAvailableIf("a", 9, StockExpectation{}); err != nil || k.Available != 9 || k.Received != 11 {
		t.Fatalf("SetAvailableIf with no expectation = %+v, %v; want it set as SetAvailable sets it", k, err)
	}
	if _, err := l.SetAvailableIf("x", 1, StockExpectation{Available: new(int64(4))}); !errors.Is(err, ErrStockChanged) ||
		!strings.Contains(err.Error(), "available is 0") {
		t.Fatalf("SetAvailableIf on a missing SKU expecting 4 = %v, want ErrStockChanged naming 0", err)
	}
	if _, err := l.SetAvailableIf("x", 1, StockExpectation{Available: new(int64(0)), Received: new(int64(5))}); !errors.Is(err, ErrStockChanged) ||
		!strings.HasSuffix(err.Error(), ": received is 0, not the expected 5") {
		t.Fatalf("SetAvailableIf on a missing SKU expecting received 5 = %v, want ErrStockChanged naming received 0", err)
	}
	l.refused["s"] = &SKUError{SKU: "s", Err: ErrStaleFence}
	l.fences["s"] = Fence{SKU: "s", Token: 12}
	if _, err := l.SetAvailableIf("s", 1, StockExpectation{Available: new(int64(0)), Received: new(int64(0))}); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("SetAvailableIf on a stale SKU = %v, want ErrStaleFence", err)
	}
}

// TestLedgerSettle: a confirmed hold becomes sold, a cancelled or expired
// one returns to available; received never moves.
func TestLedgerSettle(t *testing.T) {
	cases := []struct {
		to              Status
		available, sold int64
	}{
		{StatusConfirmed, 2, 3},
		{StatusCancelled, 5, 0},
		{StatusExpired, 5, 0},
	}
	for _, c := range cases {
		l := testLedger()
		o := order(Line{SKU: "a", Quantity: 3}, Line{SKU: "b", Quantity: 1})
		if err := l.Reserve(o); err != nil {
			t.Fatal(err)
		}
		if err := l.Settle(o, c.to); err != nil {
			t.Fatalf("%s: %v", c.to, err)
		}
		a := l.skus["a"]
		if a.Available != c.available || a.Reserved != 0 || a.Sold != c.sold || a.Received != 5 {
			t.Fatalf("%s: a = %+v, want available %d, sold %d, received 5", c.to, a, c.available, c.sold)
		}
		if b := l.skus["b"]; b.Reserved != 0 || b.Available+b.Sold != 1 {
			t.Fatalf("%s: b = %+v", c.to, b)
		}
	}
	l := testLedger()
	before := l.skus["a"]
	if err := l.Settle(order(Line{SKU: "a", Quantity: 1}, Line{SKU: "x", Quantity: 1}), StatusCancelled); !errors.Is(err, ErrUnknownSKU) {
		t.Fatalf("Settle with an unknown line = %v, want ErrUnknownSKU", err)
	}
	if l.skus["a"] != before || len(l.changed) != 0 {
		t.Fatal("a refused Settle moved the ledger")
	}
}
