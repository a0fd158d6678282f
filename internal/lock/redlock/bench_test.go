package redlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/redlock"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// benchModes are the two ways to run the backend: with the fencing token
// (three rounds a cycle) and without (two, as redsync).
var benchModes = []struct {
	name string
	opts []redlock.Option
}{
	{"fenced", nil},
	{"unfenced", []redlock.Option{redlock.WithoutFencing()}},
}

func benchCycle(b *testing.B, l lock.Locker, key string) {
	timedCycle(b, l, key, nil)
}

// phases sums the time a cycle spends in Acquire and in Release.
type phases struct{ acquire, release time.Duration }

func (p *phases) report(b *testing.B) {
	b.ReportMetric(float64(p.acquire.Microseconds())/float64(b.N), "acquire-µs/op")
	b.ReportMetric(float64(p.release.Microseconds())/float64(b.N), "release-µs/op")
}

// timedCycle is one acquire→release cycle, its phases added to p unless nil.
func timedCycle(b *testing.B, l lock.Locker, key string, p *phases) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	lease, err := l.Acquire(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	mid := time.Now()
	if err := lease.Release(ctx); err != nil {
		b.Fatal(err)
	}
	if p != nil {
		p.acquire += mid.Sub(start)
		p.release += time.Since(mid)
	}
}

// reportCPU adds the client's CPU time per op since start (cpu-µs/op): on a
// machine shared with other work, wall time per op swings with the load,
// CPU time much less.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64((cpuTime()-start).Microseconds())/float64(b.N), "cpu-µs/op")
}

// BenchmarkUncontended: one goroutine, one key, acquire then release.
func BenchmarkUncontended(b *testing.B) {
	addrs := stacktest.RequireRedis(b)
	for _, m := range benchModes {
		b.Run(m.name, func(b *testing.B) {
			l := newLocker(b, addrs, m.opts...)
			key := locktest.Key(b)
			var p phases
			cpu := cpuTime()
			for b.Loop() {
				timedCycle(b, l, key, &p)
			}
			reportCPU(b, cpu)
			p.report(b)
		})
	}
}

// BenchmarkContended16: 16 goroutines on one key, sharing one Locker (one
// service instance), spread over three (the hot SKU of three instances), or
// each with its own (sixteen instances).
func BenchmarkContended16(b *testing.B) {
	addrs := stacktest.RequireRedis(b)
	for _, m := range benchModes {
		for _, lockers := range []int{1, 3, 16} {
			b.Run(fmt.Sprintf("%s/lockers=%d", m.name, lockers), func(b *testing.B) {
				ls := make([]*redlock.Locker, lockers)
				for i := range ls {
					ls[i] = newLocker(b, addrs, m.opts...)
				}
				key := locktest.Key(b)
				var next atomic.Int64
				b.SetParallelism(max(1, 16/runtimeProcs()))
				cpu := cpuTime()
				b.RunParallel(func(pb *testing.PB) {
					l := ls[int(next.Add(1)-1)%lockers]
					for pb.Next() {
						benchCycle(b, l, key)
					}
				})
				reportCPU(b, cpu)
			})
		}
	}
}

// BenchmarkKeys1000: 16 goroutines over 1000 keys, one Locker: the common
// case of a service under load, where collisions are rare.
func BenchmarkKeys1000(b *testing.B) {
	addrs := stacktest.RequireRedis(b)
	for _, m := range benchModes {
		b.Run(m.name, func(b *testing.B) {
			l := newLocker(b, addrs, m.opts...)
			base := locktest.Key(b)
			b.SetParallelism(max(1, 16/runtimeProcs()))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					benchCycle(b, l, fmt.Sprintf("%s-%d", base, rand.IntN(1000)))
				}
			})
		})
	}
}

// BenchmarkBatch: 16 keys taken and released as one batch (one request per
// node per round) against 16 single acquisitions one after the other; an
// op is all 16 keys.
func BenchmarkBatch(b *testing.B) {
	addrs := stacktest.RequireRedis(b)
	for _, m := range benchModes {
		b.Run(m.name, func(b *testing.B) {
			l := newLocker(b, addrs, m.opts...)
			keys := benchKeys(b, 16)
			b.Run("batch16", func(b *testing.B) {
				cpu := cpuTime()
				tries := 0
				for b.Loop() {
					tries += benchBatchCycle(b, l, keys)
				}
				reportCPU(b, cpu)
				b.ReportMetric(float64(tries)/float64(b.N), "tries/op")
			})
			b.Run("single16", func(b *testing.B) {
				for b.Loop() {
					for _, k := range keys {
						benchCycle(b, l, k)
					}
				}
			})
		})
	}
}

func benchKeys(b *testing.B, n int) []string {
	base := locktest.Key(b)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%02d", base, i)
	}
	return keys
}

// benchBatchCycle takes keys in one batch and releases them, and returns
// the tries it took. A batch may still find keys held just after the last
// cycle's release: that release waits for a majority of its own deletes
// for a split's pause at most, and a delete slower than that leaves the
// last cycle's value standing where the next try splits on it. A caller
// of a one-try batch tries those keys again, and so does this, rather
// than fail the suite (before the release waited, once in about 40,000
// cycles on two busy cores).
func benchBatchCycle(b *testing.B, l lock.Locker, keys []string) (tries int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var leases lock.Set
	for want := keys; len(want) > 0; tries++ {
		batch, err := l.AcquireBatch(ctx, want)
		if err != nil {
			b.Fatal(err)
		}
		leases, want = append(leases, batch.Leases...), batch.Held
	}
	if err := leases.Release(ctx); err != nil {
		b.Fatal(err)
	}
	return tries
}
