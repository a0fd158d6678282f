package tally

import (
	"math"
	"testing"
	"time"
)

func TestRecorderPercentiles(t *testing.T) {
	r := NewLatency()
	for i := 1; i <= 1000; i++ {
		r.Record(time.Duration(i) * time.Millisecond)
	}
	s := r.Summary()
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want)/want > 0.002 { // 3 significant digits
			t.Errorf("%s = %.3f ms, want %.3f ± 0.2%%", name, got, want)
		}
	}
	if s.Count != 1000 {
		t.Fatalf("count %d", s.Count)
	}
	near("p50", s.P50, 500)
	near("p90", s.P90, 900)
	near("p95", s.P95, 950)
	near("p99", s.P99, 990)
	near("p999", s.P999, 999)
	near("max", s.Max, 1000)
	near("mean", s.Mean, 500.5)
}

func TestRecorderClampsOutliers(t *testing.T) {
	r := NewLatency()
	r.Record(0)
	r.Record(3 * time.Hour)
	s := r.Summary()
	if s.Count != 2 || s.Max < 3599_000 {
		t.Fatalf("outliers not counted: %+v", s)
	}
}

func TestCurve(t *testing.T) {
	if c := NewLatency().Curve(); c != nil {
		t.Fatalf("empty curve = %v", c)
	}
	r := NewLatency()
	for i := 1; i <= 10000; i++ {
		r.Record(time.Duration(i) * time.Microsecond * 100)
	}
	c := r.Curve()
	if c[0].Percentile != 0 || c[len(c)-1].Percentile != 100 {
		t.Fatalf("curve ends %v … %v", c[0], c[len(c)-1])
	}
	// 10,000 samples resolve up to 99.99%: 41 nines-steps plus the maximum.
	if len(c) != 42 {
		t.Errorf("curve has %d points, want 42", len(c))
	}
	for i := 1; i < len(c); i++ {
		if c[i].Percentile <= c[i-1].Percentile || c[i].Ms < c[i-1].Ms {
			t.Fatalf("curve not increasing at %d: %v then %v", i, c[i-1], c[i])
		}
	}
}
