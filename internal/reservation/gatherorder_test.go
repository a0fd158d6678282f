package reservation_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/reservation"
)

// TestGatherKeepsArrivalOrderPerKey: x has one unit; A{x,y} arrives before
// B{x} and both are gathered in one batch while y is held elsewhere for a
// moment. B stays behind A on x (A is placed, B refused), and C{z}, which
// shares no key with A, is placed by the batch as before.
func TestGatherKeepsArrivalOrderPerKey(t *testing.T) {
	r := newRealStack(t)
	ctx := context.Background()
	svc := r.service(nil, nil, reservation.Coalescing{Gatherers: 1})
	first, x, y, z := r.sku("first"), r.sku("x"), r.sku("y"), r.sku("z")
	for _, sku := range []string{first, x, y, z} {
		r.stock(svc, sku, 1)
	}
	r.store.counts()
	// The first order's write waits until A, B and C have gathered behind
	// it, in this order.
	gathered := make(chan struct{})
	var once sync.Once
	r.store.onWrite(func() { once.Do(func() { <-gathered }) })
	firstDone := make(chan error, 1)
	go func() { _, _, err := svc.Place(ctx, req("", line(first, 1))); firstDone <- err }()
	waitFor(t, "the first batch to write", func() bool { return r.store.tried() == 1 })

	release := r.hold(y)
	reqs := []inventory.PlaceRequest{
		req("", line(x, 1), line(y, 1)), // A
		req("", line(x, 1)),             // B
		req("", line(z, 1)),             // C
	}
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, rq := range reqs {
		wg.Go(func() { _, _, errs[i] = svc.Place(ctx, rq) })
		waitFor(t, "order gathered", func() bool { return reservation.Gathering(svc) == i+1 })
	}
	close(gathered)
	if err := <-firstDone; err != nil {
		t.Fatalf("first order: %v", err)
	}
	waitFor(t, "A waiting in x's line", func() bool { return reservation.Queued(svc, x) >= 1 })
	time.Sleep(30 * time.Millisecond)
	release()
	wg.Wait()
	if errs[0] != nil {
		t.Fatalf("A{x,y}, first to arrive = %v; want placed (B{x}, behind it, must not take x's unit)", errs[0])
	}
	if !errors.Is(errs[1], inventory.ErrInsufficientStock) {
		t.Fatalf("B{x} = %v; want insufficient stock, A having taken x's unit", errs[1])
	}
	if errs[2] != nil {
		t.Fatalf("C{z}, sharing no key with A = %v; want placed", errs[2])
	}
	for _, sku := range []string{x, y, z} {
		if a, err := svc.Audit(ctx, sku); err != nil || !a.Consistent || a.Held != 1 {
			t.Fatalf("audit %s = %+v, %v; want its unit held", sku, a, err)
		}
	}
}

// TestInLineErrorNamesTheOrderAhead: an order that waited in line behind
// an earlier order that needs another key, and timed out on that key, is
// told so rather than answered with a key it never asked for.
func TestInLineErrorNamesTheOrderAhead(t *testing.T) {
	r := newRealStack(t)
	r.lockWait = 300 * time.Millisecond
	ctx := context.Background()
	svc := r.service(nil, nil, reservation.Coalescing{Gatherers: 1})
	first, x, y := r.sku("first"), r.sku("x"), r.sku("y")
	for _, sku := range []string{first, x, y} {
		r.stock(svc, sku, 1)
	}
	r.store.counts()
	gathered := make(chan struct{})
	var once sync.Once
	r.store.onWrite(func() { once.Do(func() { <-gathered }) })
	firstDone := make(chan error, 1)
	go func() { _, _, err := svc.Place(ctx, req("", line(first, 1))); firstDone <- err }()
	waitFor(t, "the first batch to write", func() bool { return r.store.tried() == 1 })
	release := r.hold(y) // for longer than the lock wait
	defer release()
	reqs := []inventory.PlaceRequest{req("", line(x, 1), line(y, 1)), req("", line(x, 1))}
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, rq := range reqs {
		wg.Go(func() { _, _, errs[i] = svc.Place(ctx, rq) })
		waitFor(t, "order gathered", func() bool { return reservation.Gathering(svc) == i+1 })
	}
	close(gathered)
	if err := <-firstDone; err != nil {
		t.Fatalf("first order: %v", err)
	}
	wg.Wait()
	want := "waited in line behind an earlier order that also needs " + strconv.Quote(y)
	if errs[1] == nil || !strings.Contains(errs[1].Error(), want) {
		t.Fatalf("{x} behind {x,y} = %v; want it told it %s", errs[1], want)
	}
	if errs[0] == nil || strings.Contains(errs[0].Error(), "waited in line behind") {
		t.Fatalf("{x,y} = %v; want a lock wait for its own key", errs[0])
	}
}
