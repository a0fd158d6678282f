// Package bench is `stockguard load bench`, the benchmark suite: it
// measures the store ceiling by writing one hot row straight to Postgres
// (pgx, no service and no lock), applies the service's migrations with
// `stockguard migrate`, then runs every backend with coalescing on and off
// on one hot SKU and on many through compare (which starts the instances
// and a scratch database), judges each run's instances with an outside
// generator (vegeta) while reading every process class's CPU, measures
// next to the runs the limits they are compared with (the spread ceiling,
// naive lock loops, an HTTP floor), and reports ratios, targets, peak RSS
// and the machine's load. It does not start lock servers: those of the
// local stack are used.
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/stockguard/stockguard/loadtest/compare"
	"github.com/stockguard/stockguard/loadtest/progress"
	"github.com/stockguard/stockguard/loadtest/run"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// Config is one `load bench`: the store ceiling, then for every backend
// the hot-SKU and spread workloads with coalescing on and off.
type Config struct {
	Backends   []string
	Instances  int
	Clients    int // closed-loop clients of every run
	SpreadSKUs int // SKUs of the spread workload
	// Duration bounds each run's sending phase: runs are timed, not
	// counted, so a backend 50× slower than another does not take 50× as
	// long and the suite's length is known in advance.
	Duration time.Duration
	// MaxRate × Duration orders are generated per run; a service faster
	// than MaxRate ends its run early, which only shortens it.
	MaxRate         float64
	CeilingDuration time.Duration
	CeilingConns    int
	Seed            uint64
	Bin             string
	RedisAddrs      string
	ZKServers       string
	EtcdEndpoints   string
	DatabaseURL     string
	LogDir          string // empty: temporary, kept only for failed runs
	StartupTimeout  time.Duration
	// LockBenchPath and StoreBenchPath are `go test -bench` logs to parse
	// into the result (make bench writes them); empty: none.
	LockBenchPath  string
	StoreBenchPath string
	// FreshDB runs the suite in a scratch database (see compare.ScratchDatabase)
	// on the server DatabaseURL names, dropped at the end.
	FreshDB bool
	Quick   bool
	// JudgeWarmup and JudgeWindow are the outside generator's warm-up and
	// measured window after each run, and the naive loops' and the
	// floor's. A zero window skips the judge, the naive loops and the
	// floor.
	JudgeWarmup time.Duration
	JudgeWindow time.Duration
	// Rounds repeats the whole suite, limits included, this many times;
	// above one, each target is judged on its median over the rounds
	// (Result.TargetMedians): on a shared machine one window can fall in
	// a fast or a slow spell, and a verdict should not hang on it.
	Rounds int
	// ServeFlags are further serve flags for every service instance of
	// every run (not the floor's), after the suite's own --coalesce; they
	// may not set what the suite or compare sets (suiteServeFlags,
	// compare.ValidateServeFlags). They let a tuning be judged without a
	// build of its own: the instances get an explicit environment, so a
	// STOCKGUARD_* variable of the shell does not reach them.
	ServeFlags []string
}

// suiteServeFlags are the serve flags the suite sets on every run: each
// backend runs coalesced and not, so a --coalesce of the caller's would
// make both halves of the comparison the same.
var suiteServeFlags = []string{"coalesce"}

// maxRounds bounds --rounds: a round of the full suite takes 10–16
// minutes on two cores.
const maxRounds = 9

// Settings records the configuration in the result.
type Settings struct {
	Backends         []string `json:"backends"`
	Instances        int      `json:"instances"`
	Clients          int      `json:"clients"`
	SpreadSKUs       int      `json:"spread_skus"`
	RunDurationS     float64  `json:"run_duration_s"`
	OrdersPerRun     int      `json:"orders_generated_per_run"`
	CeilingDurationS float64  `json:"ceiling_duration_s"`
	CeilingConns     int      `json:"ceiling_conns"`
	Seed             uint64   `json:"seed"`
	FreshDB          bool     `json:"fresh_db"`
	Quick            bool     `json:"quick"`
	JudgeWarmupS     float64  `json:"judge_warmup_s"`
	JudgeWindowS     float64  `json:"judge_window_s"`
	Rounds           int      `json:"rounds"`
	ServeFlags       []string `json:"serve_flags,omitempty"`
}

// Result is out/bench.json.
type Result struct {
	GeneratedAt     time.Time      `json:"generated_at"`
	DurationS       float64        `json:"duration_s"`
	Machine         MachineInfo    `json:"machine"`
	LoadAvg         LoadSummary    `json:"load_avg_1m"`
	Settings        Settings       `json:"settings"`
	LockBenchmarks  *GoBenchOutput `json:"lock_benchmarks,omitempty"`
	StoreBenchmarks *GoBenchOutput `json:"store_benchmarks,omitempty"`
	StoreCeiling    StoreCeiling   `json:"store_ceiling"`
	// Limits are the spread ceiling, the naive loops and the HTTP floor,
	// each measured next to the backend's runs it is compared with.
	Limits []Limits `json:"limits"`
	// ServersMissing names servers whose process was not found before
	// some window: their CPU is not in that window's per-order figures.
	ServersMissing []string `json:"servers_missing,omitempty"`
	Runs           []Run    `json:"runs"`
	// Backends and Targets hold one entry per backend (and target) and
	// round, in round order.
	Backends []BackendRatios `json:"backends"`
	Targets  []TargetResult  `json:"targets"`
	// TargetMedians, with more than one round, judges each target on its
	// median over the rounds (see medianTargets).
	TargetMedians []TargetResult `json:"target_medians,omitempty"`
	Pass          bool           `json:"pass"`
	Failures      []string       `json:"failures"`
}

// Validate reports the first invalid field.
func (bc Config) Validate() error {
	if len(bc.Backends) == 0 {
		return errors.New("no backends")
	}
	for i, b := range bc.Backends {
		if !slices.Contains(compare.AllBackends(), b) {
			return fmt.Errorf("backend %q: want one of %s", b, strings.Join(compare.AllBackends(), ","))
		}
		// Each backend's ratios pair its runs with its own limits; a second
		// entry would divide one's runs by the other's limits.
		if slices.Contains(bc.Backends[:i], b) {
			return fmt.Errorf("backend %q listed twice: --rounds repeats a suite", b)
		}
	}
	switch {
	case bc.Instances < 1 || bc.Instances > 32:
		return fmt.Errorf("instances %d: want 1..32", bc.Instances)
	case bc.Clients < 1 || bc.Clients > 10_000:
		return fmt.Errorf("clients %d: want 1..10000", bc.Clients)
	case bc.SpreadSKUs < 2 || bc.SpreadSKUs > 100_000:
		return fmt.Errorf("skus %d: want 2..100000", bc.SpreadSKUs)
	case bc.Duration <= 0 || bc.CeilingDuration <= 0:
		return errors.New("duration and ceiling-duration must be > 0")
	case bc.MaxRate <= 0 || bc.ordersPerRun() > run.MaxOrders:
		return fmt.Errorf("max-rate %v × duration %v: want 1..%d orders a run", bc.MaxRate, bc.Duration, run.MaxOrders)
	case bc.CeilingConns < 1 || bc.CeilingConns > 256:
		return fmt.Errorf("ceiling-conns %d: want 1..256", bc.CeilingConns)
	case bc.Bin == "":
		return errors.New("no stockguard binary: set --bin")
	case bc.StartupTimeout <= 0:
		return fmt.Errorf("startup-timeout %v: want > 0", bc.StartupTimeout)
	case bc.JudgeWarmup < 0 || bc.JudgeWindow < 0:
		return errors.New("judge-warmup and judge-duration must be ≥ 0")
	case bc.Rounds < 1 || bc.Rounds > maxRounds:
		return fmt.Errorf("rounds %d: want 1..%d", bc.Rounds, maxRounds)
	}
	return compare.ValidateServeFlags(bc.ServeFlags, suiteServeFlags...)
}

func (bc Config) ordersPerRun() int {
	return max(bc.Clients, int(math.Ceil(bc.MaxRate*bc.Duration.Seconds())))
}

func (bc Config) settings() Settings {
	return Settings{Backends: bc.Backends, Instances: bc.Instances, Clients: bc.Clients, SpreadSKUs: bc.SpreadSKUs,
		RunDurationS: bc.Duration.Seconds(), OrdersPerRun: bc.ordersPerRun(), CeilingDurationS: bc.CeilingDuration.Seconds(),
		CeilingConns: bc.CeilingConns, Seed: bc.Seed, FreshDB: bc.FreshDB, Quick: bc.Quick,
		JudgeWarmupS: bc.JudgeWarmup.Seconds(), JudgeWindowS: bc.JudgeWindow.Seconds(), Rounds: bc.Rounds,
		ServeFlags: bc.ServeFlags}
}

// Execute runs the suite. Progress goes to stderr. Damage and missed
// targets are reported in the result; an error means the suite could not
// be carried out (the result then holds what was measured so far).
func Execute(ctx context.Context, bc Config, stderr io.Writer) (*Result, error) {
	if err := bc.Validate(); err != nil {
		return nil, err
	}
	started := time.Now()
	load := startLoadSampler(2 * time.Second)
	res := &Result{GeneratedAt: started.UTC(), Machine: readMachine(), Settings: bc.settings(),
		StoreCeiling: StoreCeiling{Method: "pgx, one fenced conditional UPDATE of one row per transaction, no lock", Conns: bc.CeilingConns}}
	finish := func() {
		res.LoadAvg = load.stop()
		res.DurationS = tally.Round(time.Since(started).Seconds(), 1)
	}
	for _, gb := range []struct {
		path string
		dst  **GoBenchOutput
	}{{bc.LockBenchPath, &res.LockBenchmarks}, {bc.StoreBenchPath, &res.StoreBenchmarks}} {
		if gb.path == "" {
			continue
		}
		out, err := parseGoBenchFile(gb.path)
		if err != nil {
			finish()
			return res, fmt.Errorf("bench: %w", err)
		}
		*gb.dst = &out
	}
	runs := len(bc.Backends) * 4 * bc.Rounds
	fmt.Fprintf(stderr, "bench: %d backends × 2 workloads × coalescing on/off × %d round(s) = %d runs of %v, %d clients, %d instances each; "+
		"store ceiling %v before each backend\n", len(bc.Backends), bc.Rounds, runs, bc.Duration, bc.Clients, bc.Instances, bc.CeilingDuration)
	if bc.FreshDB {
		u, drop, err := compare.ScratchDatabase(ctx, cmp.Or(bc.DatabaseURL, compare.DefaultDatabaseURL))
		if err != nil {
			finish()
			return res, fmt.Errorf("bench: %w", err)
		}
		defer drop()
		bc.DatabaseURL = u
	}
	if err := bc.migrate(ctx, stderr); err != nil {
		finish()
		return res, err
	}
	probe, err := openCeiling(ctx, cmp.Or(bc.DatabaseURL, compare.DefaultDatabaseURL), bc.CeilingConns)
	if err != nil {
		finish()
		return res, fmt.Errorf("bench: %w", err)
	}
	defer probe.close()
	kit := &limitsKit{bc: bc}
	defer kit.close()
	for round := 1; round <= bc.Rounds && ctx.Err() == nil; round++ {
		// A single round's figures carry no round number: its JSON stays
		// as it always was.
		tag := 0
		if bc.Rounds > 1 {
			tag = round
			fmt.Fprintf(stderr, "bench: round %d of %d\n", round, bc.Rounds)
		}
		if err := bc.runRound(ctx, tag, res, probe, kit, runs, stderr); err != nil {
			finish()
			return res, err
		}
	}
	res.StoreCeiling.MedianPerS = medianPerS(res.StoreCeiling.Samples)
	if bc.Rounds > 1 {
		res.TargetMedians = medianTargets(res.Targets)
	}
	res.ServersMissing = serversMissing(res.Runs, res.Limits)
	res.Failures = append(runFailures(res.Runs), rivalFailures(res.Limits)...)
	if res.LockBenchmarks != nil {
		res.Failures = append(res.Failures, res.LockBenchmarks.Failures...)
	}
	if res.StoreBenchmarks != nil {
		res.Failures = append(res.Failures, res.StoreBenchmarks.Failures...)
	}
	res.Pass = len(res.Failures) == 0
	finish()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("bench interrupted: %w", err)
	}
	return res, nil
}

// runRound runs every backend once, each after its own store-ceiling
// sample and limits, and adds the round's runs, limits, ratios and targets
// to res, each marked with tag (0 for a single round). runs is the suite's
// number of runs, for the progress lines.
func (bc Config) runRound(ctx context.Context, tag int, res *Result, probe *ceilingProbe, kit *limitsKit, runs int, stderr io.Writer) error {
	ceilings := map[string]float64{}
	for _, b := range bc.Backends {
		if ctx.Err() != nil {
			break
		}
		s, err := bc.ceilingSample(ctx, probe, b)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		s.Round = tag
		fmt.Fprintf(stderr, "bench: store ceiling %.0f orders/s (load %.2f)\n", s.PerS, s.LoadAvg1)
		res.StoreCeiling.Samples = append(res.StoreCeiling.Samples, s)
		ceilings[b] = s.PerS
		lim := Limits{Backend: b, Round: tag}
		for _, w := range []string{benchHot, benchSpread} {
			var p *partner
			if bc.judging() && w == benchHot {
				p = kit.beforeHot(ctx, &lim, stderr)
			} else if bc.judging() {
				p = kit.beforeSpread(ctx, probe, &lim, stderr)
			}
			for _, mode := range []string{"on", "off"} {
				if ctx.Err() != nil {
					break
				}
				fmt.Fprintf(stderr, "bench [%d/%d] %s, %s, coalesce %s\n", len(res.Runs)+1, runs, b, bc.describe(w), mode)
				// The limit takes turns with the window the targets judge
				// against it, coalescing on.
				var with *partner
				if mode == "on" {
					with = p
				}
				r := bc.runOne(ctx, b, w, mode, with, stderr)
				r.Round = tag
				res.Runs = append(res.Runs, r)
				if with != nil {
					p.finish(ctx, &lim)
					p = nil
				}
			}
			p.finish(ctx, &lim) // a run interrupted before its turn
		}
		res.Limits = append(res.Limits, lim)
	}
	// Every ratio of the round comes from the round's own runs and limits.
	ratios := benchRatios(bc.Backends, inRound(res.Runs, tag), ceilings)
	addLimitRatios(ratios, inRound(res.Runs, tag), inRound(res.Limits, tag))
	addHotBounds(ratios, inRound(res.Runs, tag), res.Machine.NProc)
	targets := evaluateTargets(ratios)
	for i := range ratios {
		ratios[i].Round = tag
	}
	for i := range targets {
		targets[i].Round = tag
	}
	res.Backends = append(res.Backends, ratios...)
	res.Targets = append(res.Targets, targets...)
	return nil
}

// inRound is the items of round tag, all of them for a single round (0).
func inRound[T interface{ round() int }](items []T, tag int) []T {
	if tag == 0 {
		return items
	}
	var out []T
	for _, x := range items {
		if x.round() == tag {
			out = append(out, x)
		}
	}
	return out
}

// migrate applies the service's migrations with its own binary, so that
// the ceiling's scratch table can copy the shape of skus before any
// instance has started.
func (bc Config) migrate(ctx context.Context, stderr io.Writer) error {
	args := []string{"migrate"}
	if bc.DatabaseURL != "" {
		args = append(args, "--database-url="+bc.DatabaseURL)
	}
	out, err := exec.CommandContext(ctx, bc.Bin, args...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(stderr, "%s", out)
		return fmt.Errorf("bench: %s migrate: %w", bc.Bin, err)
	}
	return nil
}

func (bc Config) ceilingSample(ctx context.Context, p *ceilingProbe, before string) (CeilingSample, error) {
	s := CeilingSample{Before: before, At: time.Now().UTC(), LoadAvg1: loadAvg1(), Rows: 1}
	n, elapsed, err := p.measure(ctx, bc.CeilingDuration, 1)
	if err != nil {
		return s, err
	}
	s.Writes, s.DurationS, s.PerS = n, roundS(elapsed), perS(n, elapsed)
	return s, nil
}

// judging says whether the outside generator, the naive loops and the
// floor run.
func (bc Config) judging() bool { return bc.JudgeWindow > 0 }

func (bc Config) describe(workload string) string {
	if workload == benchHot {
		return "1 hot SKU"
	}
	return fmt.Sprintf("%d SKUs", bc.SpreadSKUs)
}

// workload is the orders of one run: single-line, one-unit orders, so that
// the hot SKU's rate is its orders' rate, with stock for every order even
// if all landed on one SKU (no insufficient_stock to muddy the rates), no
// deliberate retries, a fixed seed for equal terms across backends.
func (bc Config) workload(kind string) run.Workload {
	n := bc.ordersPerRun()
	w := run.Workload{SKUs: 1, Stock: n, Lines: run.Range{Min: 1, Max: 1}, Qty: run.Range{Min: 1, Max: 1}, Seed: bc.Seed}
	if kind == benchSpread {
		w.SKUs = bc.SpreadSKUs
	}
	return w
}

// benchHoldSeconds is the hold of every order of the suite, the run's and
// the judge's: the most the service accepts (86,400 s), which no suite
// comes near. With a shorter one (900 s) the first backends' holds expired
// while the last ones were measured, all in one scratch database, and the
// reaper's work landed in their throughput and CPU.
const benchHoldSeconds = 86400

// runOne is one compare of one backend with --coalesce=mode; with p, the
// judge alternates between its window and the limit's.
func (bc Config) runOne(ctx context.Context, backend, workload, mode string, p *partner, stderr io.Writer) Run {
	w := bc.workload(workload)
	br := Run{Backend: backend, Workload: workload, SKUs: w.SKUs, Coalesce: mode, Fencing: compare.FencingFor(backend),
		ExpectedUnsafe: compare.ExpectedUnsafe(backend), LoadAvg1: loadAvg1()}
	cc := bc.compareConfig(backend, workload, mode)
	if bc.judging() {
		cc.AfterRun = bc.judgeService(workload, &br.Judge, p, stderr)
	}
	cr, err := compare.Execute(ctx, cc, stderr)
	return br.condense(cr, err)
}

// compareConfig is the compare of one run.
func (bc Config) compareConfig(backend, workload, mode string) compare.Config {
	w := bc.workload(workload)
	cc := compare.Config{
		Backends: []string{backend}, Instances: bc.Instances, Bin: bc.Bin, StartupTimeout: bc.StartupTimeout,
		RedisAddrs: bc.RedisAddrs, ZKServers: bc.ZKServers, EtcdEndpoints: bc.EtcdEndpoints, DatabaseURL: bc.DatabaseURL,
		Label:      fmt.Sprintf("bench %s %s coalesce=%s", backend, workload, mode),
		ServeFlags: append([]string{"--coalesce=" + mode}, bc.ServeFlags...),
		Run: run.Config{Workload: w, Orders: w.Stock, Concurrency: bc.Clients, Timeout: bc.Duration,
			RequestTimeout: 30 * time.Second, HoldSeconds: benchHoldSeconds, Progress: progress.Off},
	}
	if bc.LogDir != "" {
		// One directory a run: compare names logs <backend>-<n>.log.
		cc.LogDir = filepath.Join(bc.LogDir, fmt.Sprintf("%s-%s-coalesce-%s", backend, workload, mode))
	}
	return cc
}

// condense fills br from its compare's outcome. A run that did not
// complete (its instances did not start, or it was interrupted before its
// verification) keeps what it measured but is not Ran, so that none of its
// figures enter the ratios.
func (br Run) condense(cr *compare.Result, err error) Run {
	if err != nil && (cr == nil || len(cr.Backends) == 0) {
		br.Error = err.Error()
		return br
	}
	e := cr.Backends[0]
	br.PeakRSSMB, br.InstanceRSSMB, br.Setup = e.PeakRSSMB, e.InstanceRSSMB, e.Setup
	r := e.Result
	if r == nil {
		br.Error = cmp.Or(e.Error, "no result")
		return br
	}
	br.DurationS, br.OrdersPerS, br.ReservedPerS = r.DurationS, r.ThroughputPerS, r.ReservedPerS
	br.Orders, br.LatencyMs = r.Orders, r.LatencyMs
	br.Oversold, br.Lost, br.Disagreements = r.Units.Oversold, r.Units.Lost, r.Verification.DisagreementCount
	br.Safe, br.Verdict = r.Safe, r.Verdict
	if e.Error != "" {
		br.Error = e.Error
		return br
	}
	br.Ran = true
	return br
}
