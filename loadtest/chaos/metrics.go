package chaos

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"

	"github.com/stockguard/stockguard/loadtest/client"
)

// Counters scraped from every instance after a chaos run. The first is the
// store's own count of writes it refused as stale: the fence at work, seen
// from the service rather than from the answers the client got.
const (
	metricStaleFence  = "stockguard_stale_fence_total"
	metricLeasesLost  = "stockguard_leases_lost_total"
	metricZKSessLost  = "stockguard_zk_sessions_lost_total"
	metricLockLeasesL = "stockguard_lock_leases_lost_total"
)

var scrapedMetrics = []string{metricStaleFence, metricLeasesLost, metricLockLeasesL, metricZKSessLost}

// scrapeCounters reads base/metrics in the text format and sums, for each
// of names, every series of that name whatever its labels.
func scrapeCounters(ctx context.Context, c *client.Client, base string, names []string) (map[string]float64, error) {
	raw, err := c.Metrics(ctx, base)
	if err != nil {
		return nil, err
	}
	return sumCounters(raw, names), nil
}

// sumCounters parses Prometheus text exposition lines `name{labels} value`.
func sumCounters(raw []byte, names []string) map[string]float64 {
	out := make(map[string]float64, len(names))
	want := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = 0
		want[n] = true
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 && (!ok || i < len(name)) {
			name = line[:i]
			if j := strings.LastIndexByte(line, '}'); j > i {
				rest = strings.TrimSpace(line[j+1:])
			}
		}
		if !want[name] {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			out[name] += v
		}
	}
	return out
}
