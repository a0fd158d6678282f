// Package tally holds the figures every load of the tester counts and its
// JSON carries: answers by kind (OrderCounts), the unit arithmetic
// (UnitCounts) and latency, kept in an HDR histogram (Latency) and reported
// as a summary and a percentile curve. run, chaos and bench count with it;
// report draws it.
package tally

import (
	"math"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds from 1 µs to 1 hour with three
// significant digits (0.1% resolution).
const (
	latencyMinUS  = 1
	latencyMaxUS  = int64(time.Hour / time.Microsecond)
	latencyDigits = 3
)

// LatencySummary is the latency of a run in milliseconds.
type LatencySummary struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
}

// PercentilePoint is one point of a latency percentile distribution.
type PercentilePoint struct {
	Percentile float64 `json:"percentile"`
	Ms         float64 `json:"ms"`
}

// Latency is an HDR histogram of latencies, safe for concurrent use.
type Latency struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

// NewLatency returns an empty histogram.
func NewLatency() *Latency {
	return &Latency{h: hdrhistogram.New(latencyMinUS, latencyMaxUS, latencyDigits)}
}

// Record adds one latency; values beyond the range are clamped so that an
// outlier is still counted (as the maximum) rather than dropped.
func (r *Latency) Record(d time.Duration) {
	us := min(max(d.Microseconds(), latencyMinUS), latencyMaxUS)
	r.mu.Lock()
	_ = r.h.RecordValue(us)
	r.mu.Unlock()
}

// Summary returns count, mean and percentiles.
func (r *Latency) Summary() LatencySummary {
	r.mu.Lock()
	defer r.mu.Unlock()
	return summarize(r.h)
}

// Curve returns the percentile distribution for charts.
func (r *Latency) Curve() []PercentilePoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	return curve(r.h)
}

func summarize(h *hdrhistogram.Histogram) LatencySummary {
	if h.TotalCount() == 0 {
		return LatencySummary{}
	}
	return LatencySummary{
		Count: h.TotalCount(),
		Mean:  Round(h.Mean()/1000, 3),
		P50:   usToMs(h.ValueAtPercentile(50)),
		P90:   usToMs(h.ValueAtPercentile(90)),
		P95:   usToMs(h.ValueAtPercentile(95)),
		P99:   usToMs(h.ValueAtPercentile(99)),
		P999:  usToMs(h.ValueAtPercentile(99.9)),
		Max:   usToMs(h.Max()),
	}
}

// curve samples the distribution at percentiles 1−10^(−k/10): evenly spaced
// on the "number of nines" axis that HDR plots use, up to the resolution the
// sample count supports, then the maximum.
func curve(h *hdrhistogram.Histogram) []PercentilePoint {
	n := h.TotalCount()
	if n == 0 {
		return nil
	}
	var pts []PercentilePoint
	for k := 0; k <= 60; k++ {
		p := 100 * (1 - math.Pow(10, -float64(k)/10))
		if k > 0 && (100-p)/100*float64(n) < 1 {
			break
		}
		pts = append(pts, PercentilePoint{Percentile: Round(p, 3), Ms: usToMs(h.ValueAtPercentile(p))})
	}
	return append(pts, PercentilePoint{Percentile: 100, Ms: usToMs(h.Max())})
}

func usToMs(us int64) float64 { return Round(float64(us)/1000, 3) }

// Round rounds v to the given number of decimal places: the precision the
// JSON figures are written with.
func Round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}
