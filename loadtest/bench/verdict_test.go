package bench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/loadtest/bench/judge"
)

// The verdicts' edge cases, each found by a review of how the figures are
// judged: a figure just short of its target, a broken limit, a damaged judged window, a peak read in one round, a latency
// never recorded.

func TestRatioJustShortOfItsTargetMisses(t *testing.T) {
	runs := []Run{judgedRun("redlock", benchHot, "on", 2995.1, 20)}
	limits := []Limits{{Backend: "redlock", Floor: &Judged{Result: judge.Result{OrdersPerS: 10_000}}}}
	ratios := benchRatios([]string{"redlock"}, runs, nil)
	addLimitRatios(ratios, runs, limits)
	for _, tr := range evaluateTargets(ratios) {
		if tr.ID == "floor" && (tr.Status != TargetMissed || fmtRatio(tr.Value) != "0.299") {
			t.Fatalf("hot 2995.1/s ÷ floor 10000/s: %s, printed %s; want missed, 0.299", tr.Status, fmtRatio(tr.Value))
		}
	}
	if m := medianTargets([]TargetResult{target("floor", "f", "redlock", "≥0.3×", 1, val(0.2999)),
		target("floor", "f", "redlock", "≥0.3×", 2, val(0.3)), target("floor", "f", "redlock", "≥0.3×", 3, val(0.29995))}); m[0].Status != TargetMissed {
		t.Fatalf("median 0.29995 of three rounds: %s, want missed", m[0].Status)
	}
}

// TestValueJustPastItsLimitKeepsItsVerdict: a rate, milliseconds or
// megabytes just past their limit never print as the limit: 3699.6/s
// MISSED is not "3700/s", 100.04 ms against ≤100 ms not "100.0 ms", and a
// peak of 149.96 MB, under its cap of 150, not "150.0 MB".
func TestValueJustPastItsLimitKeepsItsVerdict(t *testing.T) {
	const hot, p99 = "hot ≥ 3,700 orders/s", "1,000 SKUs p99 ≤ 100 ms"
	var results []TargetResult
	for r := 1; r <= 3; r++ {
		results = append(results, target("hot-rate", hot, "redlock", "≥3700/s", r, val(3699.6)), target("spread-p99", p99, "redlock", "≤100 ms", r, val(100.04)))
	}
	m := medianTargets(results)
	var buf bytes.Buffer
	printMedians(&buf, &Result{Settings: Settings{Rounds: 3}, TargetMedians: m})
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.Contains(line, "MISSED") && (strings.Contains(line, " 3700/s") || strings.Contains(line, " 100.0 ms")) {
			t.Errorf("a MISSED target printed as its very limit: %q", line)
		}
	}
	for _, c := range []struct {
		want string
		v    float64
		got  string
	}{
		{"≥3700/s", 3699.6, "3699/s"}, {"≥3700/s", 3700, "3700/s"}, {"≥3700/s", 3700.9, "3700/s"},
		{"≤100 ms", 100.04, "100.1 ms"}, {"≤100 ms", 99.96, "100.0 ms"}, {"≤100 ms", 1.1, "1.1 ms"}, {"≤100 ms", 12.3, "12.3 ms"},
		{"<150 MB", 149.96, "149.9 MB"}, {"<150 MB", 150, "150.0 MB"}, {"<150 MB", 0.7, "0.7 MB"},
	} {
		if got := fmtTargetValue(TargetResult{Want: c.want}, &c.v); got != c.got {
			t.Errorf("%v against %s printed %q, want %q", c.v, c.want, got, c.got)
		}
	}
}

func TestBrokenFloorJudgesNothing(t *testing.T) {
	runs := []Run{judgedRun("redlock", benchHot, "on", 3000, 20)}
	floor := &Judged{Result: judge.Result{OrdersPerS: 9000, Status: map[string]int{"201": 90_000, "0": 400_000}}}
	ratios := benchRatios([]string{"redlock"}, runs, nil)
	addLimitRatios(ratios, runs, []Limits{{Backend: "redlock", Floor: floor}})
	if v := ratios[0].Judged.HotOverFloor; v != nil {
		t.Fatalf("÷ a floor that answered 400,000 transport errors = %v; want none", *v)
	}
}

func TestDamagedJudgedWindowIsUnsafe(t *testing.T) {
	run := judgedRun("redlock", benchHot, "on", 3000, 20)
	run.Judge.Readback = &Readback{Safe: false, Verdict: "UNSAFE: a 201 without its unit"}
	ratios := benchRatios([]string{"redlock"}, []Run{run}, nil)
	var buf bytes.Buffer
	Print(&buf, &Result{Pass: false, Runs: []Run{run}, Backends: ratios, Settings: Settings{Instances: 3, Clients: 64, SpreadSKUs: 1000, Rounds: 1}})
	if !ratios[0].JudgedUnsafe || !strings.Contains(buf.String(), "UNSAFE") {
		t.Fatalf("a damaged judged window: judged_unsafe %v, table:\n%s", ratios[0].JudgedUnsafe, buf.String())
	}
}

func TestPeakReadOnceJudgedOnIt(t *testing.T) {
	m := medianTargets([]TargetResult{target("rss", benchTargets[4].text, "redlock", "<150 MB", 1, val(180)),
		target("rss", benchTargets[4].text, "redlock", "<150 MB", 2, nil), target("rss", benchTargets[4].text, "redlock", "<150 MB", 3, nil)})
	if m[0].Status != TargetMissed || *m[0].Value != 180 {
		t.Fatalf("a 180 MB peak read in one round of three: %+v, want missed on 180", m[0])
	}
}

func TestUnrecordedLatencyJudgesNothing(t *testing.T) {
	on, off := judgedRun("redlock", benchHot, "on", 3000, 20), judgedRun("redlock", benchHot, "off", 400, 400)
	on.LatencyMs.P99 = 0
	ratios := benchRatios([]string{"redlock"}, []Run{on, off}, nil)
	for _, tr := range evaluateTargets(ratios) {
		if tr.ID == "p99" && tr.Status != TargetNoData {
			t.Fatalf("hot p99 coalesced 0 (none recorded) ≤ uncoalesced: %s, want no data", tr.Status)
		}
	}
}
