package bench

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/loadtest/compare"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// benchRunOf is a completed, safe run with the given rates and p99.
func benchRunOf(backend, workload, coalesce string, reservedPerS, p99, rss float64) Run {
	return Run{Backend: backend, Workload: workload, Coalesce: coalesce, Ran: true, Safe: true,
		ExpectedUnsafe: compare.ExpectedUnsafe(backend), ReservedPerS: reservedPerS, OrdersPerS: reservedPerS,
		LatencyMs: tally.LatencySummary{P99: p99}, PeakRSSMB: rss, Verdict: "safe: 0 oversold, 0 lost"}
}

func fp(v float64) *float64 { return &v }

func TestBenchRatios(t *testing.T) {
	runs := []Run{
		benchRunOf("redlock", benchHot, "on", 4000, 20, 40),
		benchRunOf("redlock", benchHot, "off", 500, 400, 55.5),
		benchRunOf("redlock", benchSpread, "on", 6000, 10, 42),
		benchRunOf("redlock", benchSpread, "off", 3000, 30, 41),
		// zookeeper: the naive hot run did not complete.
		benchRunOf("zookeeper", benchHot, "on", 900, 80, 30),
		{Backend: "zookeeper", Workload: benchHot, Coalesce: "off", Error: "instances did not start"},
		// none: damaged, by design; a zero naive rate.
		benchRunOf("none", benchHot, "on", 5000, 5, 30),
		benchRunOf("none", benchHot, "off", 0, 5, 30),
	}
	runs[6].Oversold, runs[6].Lost, runs[6].Safe = 7, 2, false
	got := benchRatios([]string{"redlock", "zookeeper", "none"}, runs, map[string]float64{"redlock": 3200, "zookeeper": 0, "none": 3000})
	want := []BackendRatios{
		{Backend: "redlock", HotCoalescedPerS: 4000, HotUncoalescedPerS: 500, CoalescedOverUncoalesced: fp(8), CeilingPerS: 3200,
			CoalescedOverCeiling: fp(1.25), P99CoalescedMs: 20, P99UncoalescedMs: 400, P99CoalescedOverUncoalesced: fp(0.05),
			SpreadCoalescedPerS: 6000, SpreadUncoalescedPerS: 3000, SpreadCoalescedOverUncoalesced: fp(2), PeakRSSMB: 55.5},
		{Backend: "zookeeper", HotCoalescedPerS: 900, P99CoalescedMs: 80,
			PeakRSSMB: 30, Missing: []string{"hot/off", "spread/on", "spread/off"}},
		{Backend: "none", ExpectedUnsafe: true, HotCoalescedPerS: 5000, CeilingPerS: 3000, CoalescedOverCeiling: fp(1.666),
			P99CoalescedMs: 5, P99UncoalescedMs: 5, P99CoalescedOverUncoalesced: fp(1), PeakRSSMB: 30, Oversold: 7, Lost: 2,
			Missing: []string{"spread/on", "spread/off"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ratios:\n got %s\nwant %s", dumpRatios(got), dumpRatios(want))
	}
}

// dumpRatios shows the ratios with their pointers followed.
func dumpRatios(rs []BackendRatios) string {
	b, _ := json.MarshalIndent(rs, "", " ")
	return string(b)
}

func TestEvaluateTargets(t *testing.T) {
	ratios := []BackendRatios{
		{Backend: "redlock", CoalescedOverUncoalesced: fp(5), CoalescedOverCeiling: fp(0.99), P99CoalescedOverUncoalesced: fp(1), PeakRSSMB: 149.9},
		{Backend: "zookeeper", CoalescedOverUncoalesced: fp(9.99), CoalescedOverCeiling: fp(1), P99CoalescedOverUncoalesced: fp(1.01), PeakRSSMB: 150},
		{Backend: "postgres", CoalescedOverUncoalesced: fp(100), P99CoalescedOverUncoalesced: nil},
		{Backend: "local", ExpectedUnsafe: true, CoalescedOverUncoalesced: fp(0.5), CoalescedOverCeiling: fp(0.1), P99CoalescedOverUncoalesced: fp(0.2), PeakRSSMB: 20},
	}
	type row struct {
		backend, id, want string
		status            TargetStatus
	}
	want := []row{
		{"redlock", "ceiling", "≥1×", TargetMissed},
		{"redlock", "speedup", "≥5×", TargetMet}, // the limit itself meets ≥
		{"redlock", "p99", "≤1×", TargetMet},
		{"redlock", "rss", "<150 MB", TargetMet},
		{"zookeeper", "ceiling", "≥1×", TargetMet},
		{"zookeeper", "speedup", "≥10×", TargetMissed},
		{"zookeeper", "p99", "≤1×", TargetMissed},
		{"zookeeper", "rss", "<150 MB", TargetMissed}, // strictly below
		{"postgres", "ceiling", "≥1×", TargetNoData},  // no speedup target for postgres
		{"postgres", "p99", "≤1×", TargetNoData},
		{"postgres", "rss", "<150 MB", TargetNoData}, // no RSS read
		// local: no ceiling target (unfenced, unsafe by design), no speedup target.
		{"local", "p99", "≤1×", TargetMet},
		{"local", "rss", "<150 MB", TargetMet},
	}
	var got []row
	for _, r := range evaluateTargets(ratios) {
		if !slices.ContainsFunc(benchTargets, func(t benchTarget) bool { return t.id == r.ID }) {
			continue // issue 13's: TestJudgedTargets
		}
		got = append(got, row{r.Backend, r.ID, r.Want, r.Status})
		if (r.Status == TargetNoData) != (r.Value == nil) {
			t.Errorf("%s %s: status %s with value %v", r.Backend, r.ID, r.Status, r.Value)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("targets:\n got %v\nwant %v", got, want)
	}
}

func TestRunFailures(t *testing.T) {
	damaged := benchRunOf("redlock", benchSpread, "off", 10, 1, 1)
	damaged.Safe, damaged.Oversold, damaged.Verdict = false, 3, "UNSAFE: 3 units oversold, 0 lost"
	expected := benchRunOf("none", benchHot, "on", 10, 1, 1)
	expected.Safe, expected.Lost = false, 5
	missing := Run{Backend: "zookeeper", Workload: benchHot, Coalesce: "on", Error: "boom"}
	for _, tc := range []struct {
		name string
		runs []Run
		want []string
	}{
		{"all safe", []Run{benchRunOf("redis", benchHot, "on", 1, 1, 1)}, nil},
		{"expected damage passes", []Run{expected}, nil},
		{"safe backend damaged", []Run{expected, damaged}, []string{"redlock spread coalesce=off: UNSAFE: 3 units oversold, 0 lost"}},
		{"did not run", []Run{missing}, []string{"zookeeper hot coalesce=on: did not run: boom"}},
	} {
		if got := runFailures(tc.runs); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestPrintBench checks the table marks targets and names failures.
func TestPrintBench(t *testing.T) {
	runs := []Run{
		benchRunOf("redlock", benchHot, "on", 4000, 20, 40),
		benchRunOf("redlock", benchHot, "off", 500, 400, 45),
	}
	res := &Result{Settings: Settings{Instances: 3, Clients: 64, SpreadSKUs: 1000}, Runs: runs,
		LockBenchmarks: &GoBenchOutput{Benchmarks: []GoBenchmark{{Package: "x/redlock", Name: "BenchmarkUncontended/fenced", NsPerOp: 500000}}},
		StoreCeiling:   StoreCeiling{Samples: []CeilingSample{{Before: "redlock", PerS: 3000}}, MedianPerS: 3000}}
	res.Backends = benchRatios([]string{"redlock"}, runs, map[string]float64{"redlock": 3000})
	res.Targets = evaluateTargets(res.Backends)
	res.Failures = []string{"redlock spread coalesce=on: did not run: x"}
	var buf bytes.Buffer
	Print(&buf, res)
	out := buf.String()
	for _, s := range []string{"Uncontended/fenced", "2000", "8", "≥5× met", "1.33", "≥1× met", "≤1× met", "<150 MB met",
		"missing runs: spread/on, spread/off", "targets met: 4 of 8", "FAIL:", "did not run: x"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}
