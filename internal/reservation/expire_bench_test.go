package reservation_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/reservation"
)

// BenchmarkExpire is one instance's reaper on a backlog of b.N due one-unit
// holds over 1,000 SKUs, coalescing on (a page of due orders at once,
// sharing batches) and off (one expiry after another, each a batch of one:
// what every expiry cost before status changes were batched), side by side
// on the same machine. The lock is the in-process fenced one, so the rate
// is the service's and the store's alone; placing the holds is not timed.
//
//	go test -run '^$' -bench Expire -benchtime 3s ./internal/reservation/
func BenchmarkExpire(b *testing.B) {
	for _, mode := range []struct {
		name string
		c    reservation.Coalescing
	}{{"coalesce=on", reservation.Coalescing{}}, {"coalesce=off", reservation.Coalescing{Disabled: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			const skus = 1000
			ctx := context.Background()
			store, locker := newPGStore(b), newFencedLocker()
			placer := reservation.New(reservation.Config{Store: store, Locker: locker, LockWait: 5 * time.Second})
			for i := range skus {
				if _, err := placer.SetStock(ctx, fmt.Sprintf("e%03d", i), int64(b.N)); err != nil {
					b.Fatal(err)
				}
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
						r := inventory.PlaceRequest{Hold: time.Second,
							Lines: []inventory.LineRequest{line(fmt.Sprintf("e%03d", i%skus), 1)}}
						if _, _, err := placer.Place(ctx, r); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if b.Failed() {
				return
			}
			counter := &reapCounter{outcomes: map[string]int{}}
			svc := reservation.New(reservation.Config{Store: store, Locker: locker, LockWait: 5 * time.Second,
				Coalescing: mode.c, Observer: counter, Now: func() time.Time { return time.Now().Add(time.Hour) }})
			reap := reservation.NewReaper(svc, time.Second)
			b.ResetTimer()
			start := time.Now()
			for counter.count("expired") < b.N {
				if time.Since(start) > 10*time.Minute {
					b.Fatalf("%d of %d expired in 10 minutes", counter.count("expired"), b.N)
				}
				reap(ctx)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "expiries/s")
			if n := counter.count("failed"); n > 0 {
				b.Fatalf("%d expiries failed", n)
			}
		})
	}
}
