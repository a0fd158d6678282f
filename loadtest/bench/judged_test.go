package bench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/loadtest/bench/cpu"
	"github.com/stockguard/stockguard/loadtest/bench/judge"
	"github.com/stockguard/stockguard/loadtest/bench/naive"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// judgedRun is a completed run judged at perS with p99.
func judgedRun(backend, workload, coalesce string, perS, p99 float64) Run {
	r := benchRunOf(backend, workload, coalesce, perS/2, p99*2, 40)
	r.Judge = &Judged{Result: judge.Result{OrdersPerS: perS, Created: int64(perS * 10), LatencyMs: tally.LatencySummary{P99: p99},
		CreatedLatencyMs: tally.LatencySummary{P99: p99}, Status: map[string]int{"201": int(perS * 10)}},
		Readback: &Readback{Safe: true, Verdict: "safe"},
		CPU:      &cpu.Window{Orders: int64(perS * 10), TotalPerOrderUs: 900, Classes: []cpu.Usage{{Class: "instances", PerOrderUs: 400}, {Class: "redis", PerOrderUs: 500}}}}
	return r
}

func TestJudgedRatiosAndTargets(t *testing.T) {
	runs := []Run{
		judgedRun("redlock", benchHot, "on", 3800, 20),
		judgedRun("redlock", benchSpread, "on", 3000, 90),
		judgedRun("redlock", benchSpread, "off", 600, 300),
		judgedRun("zookeeper", benchHot, "on", 3799, 30),
		judgedRun("zookeeper", benchSpread, "on", 1500, 100.1),
		judgedRun("postgres", benchSpread, "on", 2000, 50),
		judgedRun("redis", benchSpread, "on", 1900, 50),
	}
	limits := []Limits{
		{Backend: "redlock", NaiveSpread: &naive.Result{Library: "go-redsync", OrdersPerS: 2000}, NaiveHot: &naive.Result{OrdersPerS: 200},
			Floor: &Judged{Result: judge.Result{OrdersPerS: 12000}}},
		{Backend: "zookeeper", NaiveSpread: &naive.Result{OrdersPerS: 1010}, Floor: &Judged{Error: "did not start"}},
		{Backend: "postgres", SpreadCeiling: &CeilingSample{PerS: 8000}},
	}
	ratios := benchRatios([]string{"redlock", "zookeeper", "postgres", "redis"}, runs, nil)
	addLimitRatios(ratios, runs, limits, 2)
	rl := ratios[0].Judged
	if *rl.SpreadOverNaive != 1.5 || *rl.HotOverNaive != 19 || *rl.HotOverFloor != 0.317 || rl.SpreadOffPerS != 600 ||
		rl.HotCPUUs["total"] != 900 || rl.HotCPUUs["redis"] != 500 {
		t.Errorf("redlock: %s", dumpRatios(ratios[:1]))
	}
	if ratios[1].Judged.HotOverFloor != nil { // the floor failed
		t.Errorf("zookeeper ÷floor %v, want none", *ratios[1].Judged.HotOverFloor)
	}
	if *ratios[2].Judged.SpreadOverSpreadCeiling != 0.25 || *ratios[3].Judged.SpreadOverPostgres != 0.95 {
		t.Errorf("postgres/redis: %s", dumpRatios(ratios[2:]))
	}
	got := map[string]TargetStatus{}
	for _, tr := range evaluateTargets(ratios) {
		got[tr.Backend+"/"+tr.ID] = tr.Status
	}
	checks := []struct {
		key  string
		want TargetStatus
	}{
		{"redlock/naive-spread", TargetMet}, {"redlock/spread-p99", TargetMet}, {"redlock/hot-rate", TargetMet}, {"redlock/floor", TargetMet},
		{"zookeeper/naive-spread", TargetMissed}, {"zookeeper/spread-p99", TargetMissed}, {"zookeeper/hot-rate", TargetMissed},
		{"zookeeper/floor", TargetNoData}, {"postgres/spread-ceiling", TargetMet}, {"postgres/spread-p99", TargetMet}, {"redis/over-postgres", TargetMissed},
	}
	for _, c := range checks {
		if got[c.key] != c.want {
			t.Errorf("%s: %s, want %s", c.key, got[c.key], c.want)
		}
	}
	res := &Result{Pass: true, Settings: Settings{Instances: 3, Clients: 64, SpreadSKUs: 1000, JudgeWindowS: 10, JudgeWarmupS: 2},
		Runs: runs, Limits: limits, Backends: ratios, Targets: evaluateTargets(ratios)}
	var buf bytes.Buffer
	Print(&buf, res)
	for _, s := range []string{"== limits", "go-redsync", "12000", "== the judge", "201:38000", "== ratios and targets, the judge", "≥1.5× met", "≥3800/s MISSED"} {
		if !strings.Contains(buf.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, buf.String())
		}
	}
}

// TestCPUBound: the bound counts the classes that serve the backend's
// orders (the idle ZooKeeper and etcd of a redlock window are left out)
// and marks a target out of reach only when even the bound misses it.
func TestCPUBound(t *testing.T) {
	hot := judgedRun("redlock", benchHot, "on", 1000, 20)
	hot.Judge.CPU = &cpu.Window{Orders: 10000, Classes: []cpu.Usage{{Class: "instances", PerOrderUs: 300}, {Class: "postgres", PerOrderUs: 100},
		{Class: "redis", PerOrderUs: 50}, {Class: "client", PerOrderUs: 50}, {Class: "zookeeper", PerOrderUs: 500}, {Class: "etcd", PerOrderUs: 50}}}
	spread := judgedRun("redlock", benchSpread, "on", 1400, 50)
	limits := []Limits{{Backend: "redlock", NaiveSpread: &naive.Result{OrdersPerS: 1000}, Floor: &Judged{Result: judge.Result{OrdersPerS: 20000}}}}
	runs := []Run{hot, spread}
	ratios := benchRatios([]string{"redlock"}, runs, nil)
	addLimitRatios(ratios, runs, limits, 2)
	j := ratios[0].Judged
	// Hot: 500 µs an order serving → 4,000/s on 2 cores, 0.2× the floor.
	// Spread: 900 µs → 2,222/s, 2.222× the naive loop.
	if j.HotCPUBoundPerS != 4000 || *j.HotBoundOverFloor != 0.2 || j.SpreadCPUBoundPerS != 2222 || *j.SpreadBoundOverNaive != 2.222 {
		t.Fatalf("bounds: %s", dumpRatios(ratios))
	}
	byID := map[string]TargetResult{}
	for _, tr := range evaluateTargets(ratios) {
		byID[tr.ID] = tr
	}
	if f := byID["floor"]; f.Status != TargetMissed || !f.OutOfReach || *f.CPUBound != 0.2 {
		t.Errorf("floor: %+v, want missed and out of reach at 0.2", f)
	}
	if hr := byID["hot-rate"]; hr.Status != TargetMissed || hr.OutOfReach || *hr.CPUBound != 4000 {
		t.Errorf("hot-rate: %+v, want missed within reach (4,000/s ≥ 3,700)", hr)
	}
	if ns := byID["naive-spread"]; ns.Status != TargetMissed || ns.OutOfReach {
		t.Errorf("naive-spread: %+v, want missed (1.4) within reach (2.222)", ns)
	}
	if p := byID["spread-p99"]; p.CPUBound != nil {
		t.Errorf("spread-p99 has a CPU bound %v; only rates have one", *p.CPUBound)
	}
	var buf bytes.Buffer
	Print(&buf, &Result{Machine: MachineInfo{NProc: 2}, Runs: runs, Limits: limits, Backends: ratios, Targets: evaluateTargets(ratios)})
	for _, s := range []string{
		"hot ≥ 0.3× HTTP floor (got 0.05; at most 0.2 with all 2 cores serving orders at the window's CPU an order: out of reach on this machine unless the CPU an order falls)",
		"hot ≥ 3,700 orders/s (got 1000/s; at most 4000/s with all 2 cores",
		"naive go-redsync loop (got 1.4; at most 2.222 with",
	} {
		if !strings.Contains(buf.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, buf.String())
		}
	}
}

func TestFmtRatioKeepsAMissVisible(t *testing.T) {
	for v, want := range map[float64]string{1.496: "1.496", 0.3: "0.3", 7.2: "7.2", 14.53: "14.5", 0.0994: "0.099"} {
		if got := fmtRatio(&v); got != want {
			t.Errorf("fmtRatio(%v) = %q, want %q", v, got, want)
		}
	}
}
