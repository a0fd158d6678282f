package loadtest

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

// recorder is an HDR histogram safe for concurrent use.
type recorder struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

func newRecorder() *recorder {
	return &recorder{h: hdrhistogram.New(latencyMinUS, latencyMaxUS, latencyDigits)}
}

// Record adds one latency; values beyond the range are clamped so that an
// outlier is still counted (as the maximum) rather than dropped.
func (r *recorder) Record(d time.Duration) {
	us := min(max(d.Microseconds(), latencyMinUS), latencyMaxUS)
	r.mu.Lock()
	_ = r.h.RecordValue(us)
	r.mu.Unlock()
}

// Summary returns count, mean and percentiles.
func (r *recorder) Summary() LatencySummary {
	r.mu.Lock()
	defer r.mu.Unlock()
	return summarize(r.h)
}

// Curve returns the percentile distribution for charts.
func (r *recorder) Curve() []PercentilePoint {
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
		Mean:  round3(h.Mean() / 1000),
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
		pts = append(pts, PercentilePoint{Percentile: round3(p), Ms: usToMs(h.ValueAtPercentile(p))})
	}
	return append(pts, PercentilePoint{Percentile: 100, Ms: usToMs(h.Max())})
}

func usToMs(us int64) float64 { return round3(float64(us) / 1000) }

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
