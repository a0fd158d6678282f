package loadtest

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

func TestRecorderPercentiles(t *testing.T) {
	r := newRecorder()
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
	r := newRecorder()
	r.Record(0)
	r.Record(3 * time.Hour)
	s := r.Summary()
	if s.Count != 2 || s.Max < 3599_000 {
		t.Fatalf("outliers not counted: %+v", s)
	}
}

func TestCurve(t *testing.T) {
	if c := newRecorder().Curve(); c != nil {
		t.Fatalf("empty curve = %v", c)
	}
	r := newRecorder()
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

// TestResultJSONShape pins the keys `load run --json` promises.
func TestResultJSONShape(t *testing.T) {
	res := &Result{Backend: "redlock", Instances: 3, Fencing: "on", LatencyMs: LatencySummary{P50: 1, P95: 2, P99: 3, Max: 4}}
	res.Orders.ErrorCodes = map[string]int{}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"":             {"backend", "instances", "fencing", "orders", "units", "throughput_per_s", "latency_ms", "seed", "duration_s", "verification", "workload", "verdict", "safe"},
		"orders":       {"sent", "reserved", "insufficient", "stale_fence", "lock_unavailable", "errors"},
		"units":        {"stock", "reserved", "oversold", "lost"},
		"latency_ms":   {"p50", "p95", "p99", "max"},
		"verification": {"oversold", "lost", "sources", "disagreements", "disagreement_count"},
	}
	for obj, keys := range want {
		node := m
		if obj != "" {
			var ok bool
			if node, ok = m[obj].(map[string]any); !ok {
				t.Fatalf("%q is not an object in %s", obj, b)
			}
		}
		for _, k := range keys {
			if _, ok := node[k]; !ok {
				t.Errorf("key %q missing from %q", k, obj)
			}
		}
	}
	if m["backend"] != "redlock" || m["instances"] != 3.0 || m["fencing"] != "on" {
		t.Errorf("values: %s", b)
	}
	if lat := m["latency_ms"].(map[string]any); lat["p99"] != 3.0 {
		t.Errorf("latency_ms.p99 = %v", lat["p99"])
	}
}
