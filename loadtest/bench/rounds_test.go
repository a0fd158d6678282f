package bench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/loadtest/bench/judge"
	"github.com/stockguard/stockguard/loadtest/bench/naive"
)

// target is one round's result of a target of benchTargets or judgedTargets.
func target(id, text, backend, want string, round int, v *float64) TargetResult {
	return TargetResult{ID: id, Target: text, Backend: backend, Want: want, Round: round, Value: v}
}

func val(v float64) *float64 { return &v }

// TestMedianTargetsJudgeTheMedianRound: a target is judged on its median
// over the rounds, not on a lucky or an unlucky one; the memory cap on its
// worst; a target measured in fewer than a majority of the rounds has no
// data.
func TestMedianTargetsJudgeTheMedianRound(t *testing.T) {
	const (
		floor = "hot ≥ 0.3× HTTP floor"
		rate  = "hot ≥ 3,800 orders/s"
		rss   = "peak RSS < 150 MB per instance"
		p99   = "1,000 SKUs p99 ≤ 100 ms"
	)
	var in []TargetResult
	for r, v := range []struct{ floor, rate, rss, p99 *float64 }{
		{val(0.36), val(2800), val(90), nil},
		{val(0.24), val(3900), val(151), val(80)},
		{val(0.26), val(4000), val(100), nil},
	} {
		in = append(in, target("floor", floor, "redlock", "≥0.3×", r+1, v.floor), target("hot-rate", rate, "zookeeper", "≥3800/s", r+1, v.rate),
			target("rss", rss, "zookeeper", "<150 MB", r+1, v.rss), target("spread-p99", p99, "redis", "≤100 ms", r+1, v.p99))
	}
	got := map[string]TargetResult{}
	for _, m := range medianTargets(in) {
		got[m.Backend+"/"+m.ID] = m
		if len(m.Values) != 3 {
			t.Errorf("%s/%s: %d round values, want 3", m.Backend, m.ID, len(m.Values))
		}
	}
	for _, c := range []struct {
		key    string
		value  *float64
		status TargetStatus
	}{
		{"redlock/floor", val(0.26), TargetMissed}, // 0.36 in one round is not the verdict
		{"zookeeper/hot-rate", val(3900), TargetMet},
		{"zookeeper/rss", val(151), TargetMissed}, // the worst round
		{"redis/spread-p99", nil, TargetNoData},   // one round of three measured it
	} {
		m, ok := got[c.key]
		switch {
		case !ok:
			t.Errorf("%s: no median", c.key)
		case m.Status != c.status:
			t.Errorf("%s: %s, want %s", c.key, m.Status, c.status)
		case (m.Value == nil) != (c.value == nil) || m.Value != nil && *m.Value != *c.value:
			t.Errorf("%s: value %s, want %s", c.key, fmtRatio(m.Value), fmtRatio(c.value))
		}
	}

	two := medianTargets([]TargetResult{target("floor", floor, "redlock", "≥0.3×", 1, val(0.28)),
		target("floor", floor, "redlock", "≥0.3×", 2, val(0.33))})
	if v := two[0].Value; v == nil || *v != 0.305 || two[0].Status != TargetMet {
		t.Errorf("two rounds: %+v, want the mean of both, 0.305, met", two[0])
	}
}

// TestPrintRoundsApart: a suite of rounds prints each round's tables under
// its own heading, with only that round's figures, then the medians.
func TestPrintRoundsApart(t *testing.T) {
	res := &Result{Pass: true, Settings: Settings{Instances: 3, Clients: 64, SpreadSKUs: 1000, Rounds: 2}}
	for r, perS := range []float64{3111, 4222} {
		run := judgedRun("redlock", benchHot, "on", perS, 20)
		run.Round = r + 1
		lim := Limits{Backend: "redlock", Round: r + 1, NaiveHot: &naive.Result{OrdersPerS: 200},
			Floor: &Judged{Result: judge.Result{OrdersPerS: 12000}}}
		res.StoreCeiling.Samples = append(res.StoreCeiling.Samples, CeilingSample{Before: "redlock", Round: r + 1, PerS: 1000})
		res.Runs, res.Limits = append(res.Runs, run), append(res.Limits, lim)
		ratios := benchRatios([]string{"redlock"}, []Run{run}, nil)
		addLimitRatios(ratios, []Run{run}, []Limits{lim})
		targets := evaluateTargets(ratios)
		for i := range targets {
			targets[i].Round = r + 1
		}
		ratios[0].Round = r + 1
		res.Backends, res.Targets = append(res.Backends, ratios...), append(res.Targets, targets...)
	}
	res.TargetMedians = medianTargets(res.Targets)
	var buf bytes.Buffer
	Print(&buf, res)
	out := buf.String()
	first, second, ok := strings.Cut(out, "======== round 2 of 2")
	if !ok || !strings.Contains(first, "======== round 1 of 2") {
		t.Fatalf("no round headings:\n%s", out)
	}
	if !strings.Contains(first, "3111") || strings.Contains(first, "4222") || !strings.Contains(second, "4222") {
		t.Errorf("a round's tables show another round's run:\n%s", out)
	}
	for _, s := range []string{"== targets over 2 rounds", "round 1", "round 2", "0.259", "0.351", "0.305", "≥0.3×", "targets met on their medians"} {
		if !strings.Contains(second, s) {
			t.Errorf("medians lack %q:\n%s", s, second)
		}
	}
}
