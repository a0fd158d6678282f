package redsyncbench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

var fairFor = flag.Duration("fair.duration", 3*time.Second, "how long each fairness run contends")

// TestFairness16 has 16 clients contend for one key for a fixed time and
// reports how many acquisitions each got: min, median and max per client,
// for each side, with the clients in one instance and in sixteen.
func TestFairness16(t *testing.T) {
	addrs := stacktest.RequireRedis(t)
	var report strings.Builder
	fmt.Fprintf(&report, "\n%-18s %9s %8s %9s %6s %6s %6s\n", "impl", "instances", "total", "per_s", "min", "median", "max")
	for _, im := range impls {
		if im.uncontendedOnly {
			continue
		}
		for _, instances := range []int{1, 16} {
			counts := contend(t, im, addrs, instances, 16, *fairFor)
			slices.Sort(counts)
			total := 0
			for _, c := range counts {
				total += c
			}
			fmt.Fprintf(&report, "%-18s %9d %8d %9.0f %6d %6d %6d\n", im.name, instances, total,
				float64(total)/fairFor.Seconds(), counts[0], median(counts), counts[len(counts)-1])
		}
	}
	t.Log(report.String())
}

// contend runs clients goroutines spread over instances for d and returns
// each goroutine's acquisition count.
func contend(t *testing.T, im impl, addrs []string, instances, clients int, d time.Duration) []int {
	cs := make([]client, instances)
	for i := range cs {
		cs[i] = im.newInstance(t, addrs)
	}
	key := keyName()
	counts := make([]int, clients)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for g := range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := cs[g%instances].cycle(ctx, key); err != nil {
					if ctx.Err() == nil {
						t.Errorf("%s: %v", im.name, err)
					}
					return
				}
				counts[g]++
			}
		})
	}
	wg.Wait()
	return counts
}

func median(sorted []int) int {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
