package reservation_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/internal/inventory"
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

// TestLoneOrderStartsNoGoroutine: with coalescing off, an order runs the
// critical section on its request's goroutine and starts no other one,
// which would be one per order: its claim ends once every lease is lost
// through callbacks on the leases. A goroutine carries the profiler labels
// of the one that started it, so the order's are those with its label.
func TestLoneOrderStartsNoGoroutine(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{Disabled: true})
	f.stock("a", 10) // seen, so no lookup
	during := -1
	f.store.mu.Lock()
	f.store.beforeClaim = func([]inventory.Fence) { during = labelled(t, "order", t.Name()) }
	f.store.mu.Unlock()
	pprof.Do(context.Background(), pprof.Labels("order", t.Name()), func(ctx context.Context) {
		if _, _, err := f.svc.Place(ctx, req("", line("a", 1))); err != nil {
			t.Fatal(err)
		}
	})
	if during != 1 {
		t.Errorf("%d goroutines of the order during its claim, want 1: its own", during)
	}
}

// labelled counts the goroutines with the profiler label key=value.
func labelled(t *testing.T, key, value string) int {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	// debug=1: a line "<count> @ <pcs>" per stack and set of labels,
	// followed by "# labels: {...}" if it has any.
	want := fmt.Sprintf("%q:%q", key, value)
	n, count := 0, 0
	for ln := range strings.Lines(buf.String()) {
		if c, _, ok := strings.Cut(ln, " @ "); ok {
			count, _ = strconv.Atoi(c)
		} else if strings.HasPrefix(ln, "# labels: ") && strings.Contains(ln, want) {
			n += count
		}
	}
	return n
}
