package redislock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/redislock"
)

func benchCycle(b *testing.B, l lock.Locker, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkUncontended: one goroutine, one key, acquire then release.
func BenchmarkUncontended(b *testing.B) {
	l := newLocker(b, sharedAddr(b))
	key := locktest.Key(b)
	for b.Loop() {
		benchCycle(b, l, key)
	}
}

// BenchmarkContended16: 16 goroutines on one key, sharing one Locker (one
// service instance) or each with its own (sixteen instances).
func BenchmarkContended16(b *testing.B) {
	addr := sharedAddr(b)
	for _, lockers := range []int{1, 16} {
		b.Run(fmt.Sprintf("lockers=%d", lockers), func(b *testing.B) {
			ls := make([]*redislock.Locker, lockers)
			for i := range ls {
				ls[i] = newLocker(b, addr)
			}
			key := locktest.Key(b)
			var next atomic.Int64
			b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				l := ls[int(next.Add(1)-1)%lockers]
				for pb.Next() {
					benchCycle(b, l, key)
				}
			})
		})
	}
}

// BenchmarkKeys1000: 16 goroutines over 1000 keys, one Locker: a service
// under load, where collisions are rare.
func BenchmarkKeys1000(b *testing.B) {
	l := newLocker(b, sharedAddr(b))
	base := locktest.Key(b)
	b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			benchCycle(b, l, fmt.Sprintf("%s-%d", base, rand.IntN(1000)))
		}
	})
}

// BenchmarkBatch: 16 keys taken and released as one batch (one script call
// each way) against 16 single acquisitions one after the other; an op is
// all 16 keys.
func BenchmarkBatch(b *testing.B) {
	l := newLocker(b, sharedAddr(b))
	base := locktest.Key(b)
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%02d", base, i)
	}
	b.Run("batch16", func(b *testing.B) {
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			batch, err := l.AcquireBatch(ctx, keys)
			if err != nil || len(batch.Held) != 0 {
				b.Fatalf("batch: %v, %d held", err, len(batch.Held))
			}
			if err := batch.Leases.Release(ctx); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
	})
	b.Run("single16", func(b *testing.B) {
		for b.Loop() {
			for _, k := range keys {
				benchCycle(b, l, k)
			}
		}
	})
}
