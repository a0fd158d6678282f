package reservation_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/reservation"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// maxSlowdown is how much slower, by median, a one-line order may answer
// while orders of the maximum size run on other SKUs. Generous: the machine
// is shared and the big orders use its CPU; what it catches is an order
// stuck behind resources the big ones hold (connections, locks), which
// costs seconds, not a few times its milliseconds.
const maxSlowdown = 20

// TestMaxOrdersOnEveryBackend: an order of MaxLines lines is placed on
// every networked backend, alone and coalesced, and so are several such
// orders at once over the same SKUs (they merge into one batch) and over
// overlapping ones; meanwhile a one-line order on another SKU answers
// within its usual latency.
func TestMaxOrdersOnEveryBackend(t *testing.T) {
	for _, name := range networked {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			url := stacktest.NewDatabase(t, ctx)
			store := newPGStoreAt(t, url)
			locker := newBackend(t, name, stackParams(t, url))
			run := uniq()
			newSvc := func(c reservation.Coalescing) *reservation.Service {
				return reservation.New(reservation.Config{Store: store, Locker: locker, LockWait: 30 * time.Second, Coalescing: c})
			}
			on, off := newSvc(reservation.Coalescing{}), newSvc(reservation.Coalescing{Disabled: true})
			const extra = 20 // SKUs beyond one order's, for overlapping orders
			skus := make([]string, inventory.MaxLines+extra)
			for i := range skus {
				skus[i] = fmt.Sprintf("big-%s-%03d", run, i)
				if _, err := on.SetStock(ctx, skus[i], 1000); err != nil {
					t.Fatal(err)
				}
			}
			solo := "solo-" + run
			if _, err := on.SetStock(ctx, solo, 1000); err != nil {
				t.Fatal(err)
			}
			order := func(from int) inventory.PlaceRequest {
				var lines []inventory.LineRequest
				for _, s := range skus[from : from+inventory.MaxLines] {
					lines = append(lines, line(s, 1))
				}
				return req("", lines...)
			}
			place := func(svc *reservation.Service, r inventory.PlaceRequest) error {
				_, _, err := svc.Place(ctx, r)
				return err
			}
			for _, svc := range []*reservation.Service{off, on} {
				if err := place(svc, order(0)); err != nil {
					t.Fatalf("a %d-line order: %v", inventory.MaxLines, err)
				}
			}
			var placed atomic.Int64
			placed.Add(2)
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for i := range 4 {
				// Two on the same SKUs (they share a batch), two shifted
				// (they overlap: each waits for its turn at the head).
				from := (i % 2) * (i/2 + 1) * extra / 2
				wg.Go(func() { errs <- place(on, order(from)) })
			}
			wg.Wait()
			for range 4 {
				if err := <-errs; err != nil {
					t.Fatalf("concurrent %d-line orders: %v", inventory.MaxLines, err)
				}
				placed.Add(1)
			}

			alone := median(t, func() error { return place(on, req("", line(solo, 1))) })
			var unavailable atomic.Int64
			stop := make(chan struct{})
			var bg sync.WaitGroup
			for i := range 2 {
				bg.Go(func() {
					for n := 0; ; n++ {
						select {
						case <-stop:
							return
						default:
						}
						err := place(on, order((i*extra/2+n)%extra))
						switch {
						case err == nil:
							placed.Add(1)
						case errors.Is(err, lock.ErrUnavailable):
							// The lock servers' own timeouts on a starved
							// machine: load for the measurement, not its subject.
							unavailable.Add(1)
						default:
							errs <- err
							return
						}
					}
				})
			}
			time.Sleep(20 * time.Millisecond)
			beside := median(t, func() error { return place(on, req("", line(solo, 1))) })
			close(stop)
			bg.Wait()
			select {
			case err := <-errs:
				t.Fatalf("a %d-line order in the background: %v", inventory.MaxLines, err)
			default:
			}
			t.Logf("%s: one-line order median %s alone, %s beside %d-line orders (%d of them lock_unavailable)",
				name, alone, beside, inventory.MaxLines, unavailable.Load())
			if beside > maxSlowdown*alone {
				t.Fatalf("one-line order median %s beside %d-line orders, %s alone: more than %d× slower",
					beside, inventory.MaxLines, alone, maxSlowdown)
			}
			var held int64
			for _, sku := range skus {
				a := audit(t, on, sku)
				if !a.Consistent {
					t.Fatalf("audit %s = %+v", sku, a)
				}
				held += a.Held
			}
			if want := placed.Load() * inventory.MaxLines; held != want {
				t.Fatalf("%d units held over the big orders' SKUs, want %d", held, want)
			}
		})
	}
}

// median times f over a few runs.
func median(t *testing.T, f func() error) time.Duration {
	t.Helper()
	const runs = 15
	d := make([]time.Duration, runs)
	for i := range d {
		start := time.Now()
		if err := f(); err != nil {
			t.Fatalf("one-line order: %v", err)
		}
		d[i] = time.Since(start)
	}
	slices.Sort(d)
	return d[runs/2]
}

func audit(t *testing.T, svc *reservation.Service, sku string) inventory.Audit {
	t.Helper()
	a, err := svc.Audit(context.Background(), sku)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
