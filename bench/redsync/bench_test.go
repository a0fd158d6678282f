package redsyncbench

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// BenchmarkUncontended: one goroutine, one key, acquire then release — the
// cost of the algorithm itself.
func BenchmarkUncontended(b *testing.B) {
	addrs := stacktest.RequireRedis(b)
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			c := im.newInstance(b, addrs)
			key := keyName()
			ctx := context.Background()
			for b.Loop() {
				if err := c.cycle(ctx, key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkContended16: 16 goroutines on one key, in one instance
// (instances=1) or each in its own (instances=16).
func BenchmarkContended16(b *testing.B) {
	addrs := stacktest.RequireRedis(b)
	for _, im := range impls {
		if im.uncontendedOnly {
			continue
		}
		for _, instances := range []int{1, 16} {
			b.Run(im.name+"/instances="+itoa(instances), func(b *testing.B) {
				cs := make([]client, instances)
				for i := range cs {
					cs[i] = im.newInstance(b, addrs)
				}
				key := keyName()
				var next atomic.Int64
				b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					c := cs[int(next.Add(1)-1)%instances]
					for pb.Next() {
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						err := c.cycle(ctx, key)
						cancel()
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// BenchmarkUncontendedPaired alternates the sides in blocks of pairBlock
// cycles (each on its own key) and reports each side's mean time per cycle
// and its ratio to redsync's. On a shared machine whose load swings from
// second to second, blocks of ~0.1 s taken in turn compare the sides under
// the same conditions, which sub-benchmarks seconds apart do not. (Blocks,
// not single cycles: the requests a side leaves running after it returns
// must overlap its own next cycle, as they do in use, not the other side's.)
// One iteration is one cycle of every side.
func BenchmarkUncontendedPaired(b *testing.B) {
	const pairBlock = 100
	addrs := stacktest.RequireRedis(b)
	cs := make([]client, len(impls))
	keys := make([]string, len(impls))
	for i, im := range impls {
		cs[i], keys[i] = im.newInstance(b, addrs), keyName()
	}
	spent := make([]time.Duration, len(impls))
	ctx := context.Background()
	b.ResetTimer()
	for n := 0; n < b.N; n += pairBlock {
		block := min(pairBlock, b.N-n)
		for i, c := range cs {
			start := time.Now()
			for range block {
				if err := c.cycle(ctx, keys[i]); err != nil {
					b.Fatal(err)
				}
			}
			spent[i] += time.Since(start)
		}
	}
	for i, im := range impls {
		b.ReportMetric(float64(spent[i].Nanoseconds())/float64(b.N), im.name+"-ns/cycle")
		if i > 0 {
			b.ReportMetric(float64(spent[i])/float64(spent[0]), im.name+"/redsync")
		}
	}
	b.ReportMetric(0, "ns/op") // the sum of all sides: meaningless
}
