package inventory

import (
	"errors"
	"slices"
	"testing"
)

func TestLedgerReserveAllOrNothing(t *testing.T) {
	l := newLedger(map[string]SKU{"a": {SKU: "a", Available: 5}, "b": {SKU: "b", Available: 1}},
		map[string]Fence{"a": {SKU: "a", Token: 7}, "b": {SKU: "b", Token: 9}},
		map[string]error{"x": &SKUError{SKU: "x", Err: ErrUnknownSKU}})
	order := func(lines ...Line) *Order { return &Order{Lines: lines} }
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
		err := l.reserve(c.o)
		if !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Fatalf("%s: reserve = %v, want %v", c.name, err, c.err)
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
	if err := l.reserve(order(Line{SKU: "b", Quantity: 4})); !errors.As(err, &se) || se.SKU != "b" || se.Available != 0 {
		t.Fatalf("stock error = %v", err)
	}
	skus, fences := l.write()
	if len(skus) != 2 || skus[0].SKU != "a" || skus[0].Reserved != 5 || skus[1].Reserved != 1 || fences[1].Token != 9 {
		t.Fatalf("write = %+v %+v", skus, fences)
	}
	c := l.clone()
	c.skus["a"] = SKU{SKU: "a", Available: 99}
	if l.skus["a"].Available != 0 || len(c.changed) != 0 {
		t.Fatal("clone shares counters with its ledger")
	}
}

func TestMergeSorted(t *testing.T) {
	cases := []struct{ a, b, want []string }{
		{nil, nil, []string{}},
		{[]string{"a"}, nil, []string{"a"}},
		{[]string{"a", "c"}, []string{"b", "c", "d"}, []string{"a", "b", "c", "d"}},
		{[]string{"b"}, []string{"a"}, []string{"a", "b"}},
	}
	for _, c := range cases {
		if got := mergeSorted(c.a, c.b); !slices.Equal(got, c.want) {
			t.Errorf("mergeSorted(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
