package pglock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// BenchmarkAcquireRelease is one holder taking and releasing a free key: the
// backend's floor, two round trips (try-lock with nextval, unlock).
func BenchmarkAcquireRelease(b *testing.B) {
	l := newLocker(b, stacktest.NewDatabase(b, b.Context()))
	key := locktest.Key(b)
	ctx := context.Background()
	for b.Loop() {
		lease, err := l.Acquire(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireRelease16 is 16 goroutines of one instance on one key:
// the hand-off rate of a hot SKU. ns/op is per acquisition.
func BenchmarkAcquireRelease16(b *testing.B) {
	const workers = 16
	l := newLocker(b, stacktest.NewDatabase(b, b.Context()))
	key := locktest.Key(b)
	ctx := context.Background()
	// Warm the pool so the timing does not count 16 connects.
	var warm []*lock.Lease
	for i := range workers {
		warm = append(warm, locktest.MustAcquire(b, l, key+string(rune('a'+i))))
	}
	for _, lease := range warm {
		locktest.MustRelease(b, lease)
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ResetTimer()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				lease, err := l.Acquire(ctx, key)
				if err != nil {
					b.Error(err)
					return
				}
				if err := lease.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
