package reservation_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stockguard/stockguard/internal/reservation"
)

// TestOrderIDsAreTimeOrdered: ids are version 7 UUIDs, so each order's row
// lands at the right edge of the orders' primary key index.
func TestOrderIDsAreTimeOrdered(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 10)
	var last []byte
	for range 5 {
		o, _, err := f.svc.Place(context.Background(), req("", line("a", 1)))
		if err != nil {
			t.Fatal(err)
		}
		if v := o.ID.Version(); v != 7 {
			t.Fatalf("order id %s is version %d, want 7", o.ID, v)
		}
		if last != nil && bytes.Compare(o.ID[:], last) <= 0 {
			t.Fatalf("order id %s not after the previous %x", o.ID, last)
		}
		last = o.ID[:]
	}
}
