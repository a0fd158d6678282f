package bench

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/loadtest/bench/cpu"
	"github.com/stockguard/stockguard/loadtest/bench/judge"
	"github.com/stockguard/stockguard/loadtest/bench/naive"
	"github.com/stockguard/stockguard/loadtest/bench/section"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// judgedRun is a completed run judged at perS with p99.
func judgedRun(backend, workload, coalesce string, perS, p99 float64) Run {
	r := benchRunOf(backend, workload, coalesce, perS/2, p99*2, 40)
	r.Judge = &Judged{Result: judge.Result{OrdersPerS: perS, Created: int64(perS * 10), LatencyMs: judge.VegetaLatency{P99: p99},
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
		// postgres in turns with redis, slower than in its own window:
		// redis is judged against this one.
		{Backend: "redis", RivalBackend: "postgres", Rival: judgedRun("postgres", benchSpread, "on", 1950, 60).Judge},
	}
	ratios := benchRatios([]string{"redlock", "zookeeper", "postgres", "redis"}, runs, nil)
	addLimitRatios(ratios, runs, limits)
	rl := ratios[0].Judged
	if *rl.SpreadOverNaive != 1.5 || *rl.HotOverNaive != 19 || *rl.HotOverFloor != 0.316 || rl.SpreadOffPerS != 600 ||
		rl.HotCPUUs["total"] != 900 || rl.HotCPUUs["redis"] != 500 {
		t.Errorf("redlock: %s", dumpRatios(ratios[:1]))
	}
	if ratios[1].Judged.HotOverFloor != nil { // the floor failed
		t.Errorf("zookeeper ÷floor %v, want none", *ratios[1].Judged.HotOverFloor)
	}
	if *ratios[2].Judged.SpreadOverSpreadCeiling != 0.25 || ratios[2].Judged.SpreadOverPostgres != nil ||
		*ratios[3].Judged.SpreadOverPostgres != 0.974 || ratios[3].Judged.PostgresPerS != 1950 {
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
	for _, s := range []string{"== limits", "go-redsync", "12000", "postgres 1950 (store safe)", "== the judge", "201:38000",
		"== ratios and targets, the judge", "≥1.5× met", "≥3800/s MISSED"} {
		if !strings.Contains(buf.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, buf.String())
		}
	}
	// The rival's window is a row of the judge's table, with its store's verdict.
	if !regexp.MustCompile(`postgres \(turns with redis\)\s+1000\s+on\s+1950\s.*\ssafe\s`).MatchString(buf.String()) {
		t.Errorf("output lacks the rival's row:\n%s", buf.String())
	}
}

// TestRivalJudgedOnlyWhenItsStoreAgrees: redis is judged against the
// postgres window in turns with it, and only one whose store was read back
// and agrees with its answers; a rival that lost units fails the suite.
func TestRivalJudgedOnlyWhenItsStoreAgrees(t *testing.T) {
	runs := []Run{judgedRun("redis", benchSpread, "on", 2000, 50)}
	unread := judgedRun("postgres", benchSpread, "on", 1000, 50).Judge
	unread.Readback = &Readback{Error: "boom", Verdict: "NOT VERIFIED: boom"}
	damaged := judgedRun("postgres", benchSpread, "on", 1000, 50).Judge
	damaged.Readback = &Readback{Problems: 1, Verdict: "UNSAFE: 1 problems (x)"}
	failed := judgedRun("postgres", benchSpread, "on", 1000, 50).Judge
	failed.Error = "attack failed"
	for _, tc := range []struct {
		name     string
		rival    *Judged
		failures int
		damaged  bool
	}{{"not read back", unread, 1, false}, {"damaged", damaged, 1, true}, {"failed", failed, 0, false}, {"none", nil, 0, false}} {
		limits := []Limits{{Backend: "redis", RivalBackend: "postgres", Rival: tc.rival}}
		ratios := benchRatios([]string{"redis"}, runs, nil)
		addLimitRatios(ratios, runs, limits)
		if v := ratios[0].Judged.SpreadOverPostgres; v != nil {
			t.Errorf("%s: redis ÷ postgres %v, want none", tc.name, *v)
		}
		res := &Result{Runs: runs, Limits: limits}
		if fs := rivalFailures(limits); len(fs) != tc.failures || res.Damaged() != tc.damaged {
			t.Errorf("%s: failures %q, damaged %v", tc.name, fs, res.Damaged())
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

func TestFmtTargetValueInTheTargetsUnit(t *testing.T) {
	rate, ms, x := 2141.4, 430.64, 0.1523
	for _, c := range []struct {
		want string
		v    *float64
		got  string
	}{{"≥3700/s", &rate, "2141/s"}, {"≤100 ms", &ms, "430.7 ms"}, {"≥0.3×", &x, "0.152"}, {"≥0.3×", nil, "–"}} {
		if got := fmtTargetValue(TargetResult{Want: c.want}, c.v); got != c.got {
			t.Errorf("%s: %q, want %q", c.want, got, c.got)
		}
	}
}

// TestPrintSections: a hot window's holds, with the share the key was held
// and the hand-offs; a window whose scrape failed says why.
func TestPrintSections(t *testing.T) {
	hot := judgedRun("redlock", benchHot, "on", 2000, 40)
	hot.SKUs = 1
	hot.Judge.Section = &section.Window{DurationS: 10, Holds: 600, HeldShare: 0.8, HoldMs: 13.33, Claims: 600, ClaimMs: 0.9,
		Writes: 1500, WriteMs: 3.7, OrdersPerHold: 33.3, HandOffMs: 3.33}
	failed := judgedRun("zookeeper", benchHot, "on", 1500, 40)
	failed.Judge.SectionError = "section: scrape http://127.0.0.1:1: connection refused\nmore"
	floorOnly := judgedRun("redis", benchHot, "on", 1500, 40) // no section: not printed
	var b bytes.Buffer
	printSections(&b, &Result{Runs: []Run{hot, failed, floorOnly}})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want a title, a header and two rows:\n%s", len(lines), b.String())
	}
	if f := strings.Fields(lines[2]); strings.Join(f, " ") != "redlock 1 on 60 33.3 2.50 13.33 0.90 3.70 80.0% 3.33" {
		t.Errorf("hot row = %q", lines[2])
	}
	if !strings.HasSuffix(lines[3], "connection refused") || !strings.HasPrefix(strings.TrimSpace(lines[3]), "zookeeper") {
		t.Errorf("failed row = %q", lines[3])
	}
}

// TestPrintKernel: each class's kernel µs of its µs an order and its system
// calls an order, "–" for calls /proc would not give and for a class not
// measured; the floor's window is a row too; the stolen share where read.
func TestPrintKernel(t *testing.T) {
	calls, floorCalls, stolen := 5.25, 3.0, 0.183
	hot := judgedRun("redlock", benchHot, "on", 2000, 40)
	hot.SKUs = 1
	hot.Judge.CPU.Classes = []cpu.Usage{{Class: "instances", PerOrderUs: 400, KernelPerOrderUs: 150, SyscallsPerOrder: &calls},
		{Class: "redis", PerOrderUs: 500, KernelPerOrderUs: 300}}
	unjudged := benchRunOf("zookeeper", benchHot, "on", 1000, 40, 40) // no judge: no row
	floor := &Judged{Result: judge.Result{OrdersPerS: 9000}, CPU: &cpu.Window{TotalPerOrderUs: 100, StealShare: &stolen,
		Classes: []cpu.Usage{{Class: "instances", PerOrderUs: 60, KernelPerOrderUs: 30, SyscallsPerOrder: &floorCalls}, {Class: "client", PerOrderUs: 40, KernelPerOrderUs: 10}}}}
	var b bytes.Buffer
	printKernel(&b, &Result{Runs: []Run{hot, unjudged}, Limits: []Limits{{Backend: "redlock", Floor: floor}}})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want a title, a header and two rows:\n%s", len(lines), b.String())
	}
	// 450 of the 900 µs an order in the kernel.
	if got := strings.Join(strings.Fields(lines[2]), " "); got != "redlock 1 on 150/400 µs /5.2 – 300/500 µs /– – – – 50% –" {
		t.Errorf("hot row = %q", got)
	}
	if got := strings.Join(strings.Fields(lines[3]), " "); got != "floor (turns with redlock) 1 – 30/60 µs /3.0 – – – – 10/40 µs /– 40% 18.3%" {
		t.Errorf("floor row = %q", got)
	}
	var none bytes.Buffer
	printKernel(&none, &Result{Runs: []Run{unjudged}})
	if none.Len() != 0 {
		t.Errorf("no judged window, printed:\n%s", none.String())
	}
}

// TestJudgedTurns: each turn's rate, and the share stolen in each when
// the CPU window has one a turn (not for a window measured in one span).
func TestJudgedTurns(t *testing.T) {
	j := &Judged{Result: judge.Result{TurnsPerS: []float64{4342.3, 3823.8}},
		CPU: &cpu.Window{TurnStealShares: []float64{0.031, 0.12}}}
	if got := judgedTurns(j); got != "4342 3824 (stolen 3.1 12.0 %)" {
		t.Errorf("got %q", got)
	}
	j.CPU.TurnStealShares = nil
	if got := judgedTurns(j); got != "4342 3824" {
		t.Errorf("without the shares: got %q", got)
	}
	j.CPU = nil
	if got := judgedTurns(j); got != "4342 3824" {
		t.Errorf("without CPU: got %q", got)
	}
}
