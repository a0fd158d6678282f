package loadtest

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
)

// defaultDatabaseURL is the service's own --database-url default, used for
// the store ceiling when neither --database-url nor the environment names one.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5433/stockguard?sslmode=disable"

// BenchConfig is one `load bench`: the store ceiling, then for every backend
// the hot-SKU and spread workloads with coalescing on and off.
type BenchConfig struct {
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
	DatabaseURL     string
	LogDir          string // empty: temporary, kept only for failed runs
	StartupTimeout  time.Duration
	// LockBenchPath and StoreBenchPath are `go test -bench` logs to parse
	// into the result (make bench writes them); empty: none.
	LockBenchPath  string
	StoreBenchPath string
	// FreshDB runs the suite in a scratch database (see scratchDatabase)
	// on the server DatabaseURL names, dropped at the end.
	FreshDB bool
	Quick   bool
}

// BenchSettings records the configuration in the result.
type BenchSettings struct {
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
}

// BenchResult is out/bench.json.
type BenchResult struct {
	GeneratedAt     time.Time       `json:"generated_at"`
	DurationS       float64         `json:"duration_s"`
	Machine         MachineInfo     `json:"machine"`
	LoadAvg         LoadSummary     `json:"load_avg_1m"`
	Settings        BenchSettings   `json:"settings"`
	LockBenchmarks  *GoBenchOutput  `json:"lock_benchmarks,omitempty"`
	StoreBenchmarks *GoBenchOutput  `json:"store_benchmarks,omitempty"`
	StoreCeiling    StoreCeiling    `json:"store_ceiling"`
	Runs            []BenchRun      `json:"runs"`
	Backends        []BackendRatios `json:"backends"`
	Targets         []TargetResult  `json:"targets"`
	Pass            bool            `json:"pass"`
	Failures        []string        `json:"failures"`
}

func (bc BenchConfig) validate() error {
	if len(bc.Backends) == 0 {
		return errors.New("no backends")
	}
	for _, b := range bc.Backends {
		if !slices.Contains(AllBackends(), b) {
			return fmt.Errorf("backend %q: want one of %s", b, strings.Join(AllBackends(), ","))
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
	case bc.MaxRate <= 0 || bc.ordersPerRun() > MaxOrders:
		return fmt.Errorf("max-rate %v × duration %v: want 1..%d orders a run", bc.MaxRate, bc.Duration, MaxOrders)
	case bc.CeilingConns < 1 || bc.CeilingConns > 256:
		return fmt.Errorf("ceiling-conns %d: want 1..256", bc.CeilingConns)
	case bc.Bin == "":
		return errors.New("no stockguard binary: set --bin")
	case bc.StartupTimeout <= 0:
		return fmt.Errorf("startup-timeout %v: want > 0", bc.StartupTimeout)
	}
	return nil
}

func (bc BenchConfig) ordersPerRun() int {
	return max(bc.Clients, int(math.Ceil(bc.MaxRate*bc.Duration.Seconds())))
}

func (bc BenchConfig) settings() BenchSettings {
	return BenchSettings{Backends: bc.Backends, Instances: bc.Instances, Clients: bc.Clients, SpreadSKUs: bc.SpreadSKUs,
		RunDurationS: bc.Duration.Seconds(), OrdersPerRun: bc.ordersPerRun(), CeilingDurationS: bc.CeilingDuration.Seconds(),
		CeilingConns: bc.CeilingConns, Seed: bc.Seed, FreshDB: bc.FreshDB, Quick: bc.Quick}
}

// RunBench runs the suite. Progress goes to stderr. Damage and missed
// targets are reported in the result; an error means the suite could not
// be carried out (the result then holds what was measured so far).
func RunBench(ctx context.Context, bc BenchConfig, stderr io.Writer) (*BenchResult, error) {
	if err := bc.validate(); err != nil {
		return nil, err
	}
	started := time.Now()
	load := startLoadSampler(2 * time.Second)
	res := &BenchResult{GeneratedAt: started.UTC(), Machine: readMachine(), Settings: bc.settings(),
		StoreCeiling: StoreCeiling{Method: "pgx, one fenced conditional UPDATE of one row per transaction, no lock", Conns: bc.CeilingConns}}
	finish := func() {
		res.LoadAvg = load.stop()
		res.DurationS = benchRound(time.Since(started).Seconds(), 1)
	}
	for _, gb := range []struct {
		path string
		dst  **GoBenchOutput
	}{{bc.LockBenchPath, &res.LockBenchmarks}, {bc.StoreBenchPath, &res.StoreBenchmarks}} {
		if gb.path == "" {
			continue
		}
		out, err := ParseGoBenchFile(gb.path)
		if err != nil {
			finish()
			return res, fmt.Errorf("bench: %w", err)
		}
		*gb.dst = &out
	}
	runs := len(bc.Backends) * 4
	fmt.Fprintf(stderr, "bench: %d backends × 2 workloads × coalescing on/off = %d runs of %v, %d clients, %d instances each; "+
		"store ceiling %v before each backend\n", len(bc.Backends), runs, bc.Duration, bc.Clients, bc.Instances, bc.CeilingDuration)
	if bc.FreshDB {
		u, drop, err := scratchDatabase(ctx, cmp.Or(bc.DatabaseURL, defaultDatabaseURL))
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
	probe, err := openCeiling(ctx, cmp.Or(bc.DatabaseURL, defaultDatabaseURL), bc.CeilingConns)
	if err != nil {
		finish()
		return res, fmt.Errorf("bench: %w", err)
	}
	defer probe.close()
	ceilings := map[string]float64{}
	for _, b := range bc.Backends {
		if ctx.Err() != nil {
			break
		}
		s, err := bc.ceilingSample(ctx, probe, b)
		if err != nil {
			finish()
			return res, fmt.Errorf("bench: %w", err)
		}
		fmt.Fprintf(stderr, "bench: store ceiling %.0f orders/s (load %.2f)\n", s.PerS, s.LoadAvg1)
		res.StoreCeiling.Samples = append(res.StoreCeiling.Samples, s)
		ceilings[b] = s.PerS
		for _, w := range []string{benchHot, benchSpread} {
			for _, mode := range []string{"on", "off"} {
				if ctx.Err() != nil {
					break
				}
				fmt.Fprintf(stderr, "bench [%d/%d] %s, %s, coalesce %s\n", len(res.Runs)+1, runs, b, bc.describe(w), mode)
				res.Runs = append(res.Runs, bc.runOne(ctx, b, w, mode, stderr))
			}
		}
	}
	var per []float64
	for _, s := range res.StoreCeiling.Samples {
		per = append(per, s.PerS)
	}
	res.StoreCeiling.MedianPerS = benchRound(median(per), 1)
	res.Backends = benchRatios(bc.Backends, res.Runs, ceilings)
	res.Targets = evaluateTargets(res.Backends)
	res.Failures = runFailures(res.Runs)
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

// migrate applies the service's migrations with its own binary, so that
// the ceiling's scratch table can copy the shape of skus before any
// instance has started.
func (bc BenchConfig) migrate(ctx context.Context, stderr io.Writer) error {
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

func (bc BenchConfig) ceilingSample(ctx context.Context, p *ceilingProbe, before string) (CeilingSample, error) {
	s := CeilingSample{Before: before, At: time.Now().UTC(), LoadAvg1: loadAvg1()}
	n, elapsed, err := p.measure(ctx, bc.CeilingDuration)
	if err != nil {
		return s, err
	}
	s.Writes, s.DurationS = n, benchRound(elapsed.Seconds(), 3)
	s.PerS = benchRound(float64(n)/elapsed.Seconds(), 1)
	return s, nil
}

func (bc BenchConfig) describe(workload string) string {
	if workload == benchHot {
		return "1 hot SKU"
	}
	return fmt.Sprintf("%d SKUs", bc.SpreadSKUs)
}

// workload is the orders of one run: single-line, one-unit orders, so that
// the hot SKU's rate is its orders' rate, with stock for every order even
// if all landed on one SKU (no insufficient_stock to muddy the rates), no
// deliberate retries, a fixed seed for equal terms across backends.
func (bc BenchConfig) workload(kind string) Workload {
	n := bc.ordersPerRun()
	w := Workload{SKUs: 1, Stock: n, Lines: Range{1, 1}, Qty: Range{1, 1}, Seed: bc.Seed}
	if kind == benchSpread {
		w.SKUs = bc.SpreadSKUs
	}
	return w
}

// runOne is one compare of one backend with --coalesce=mode.
func (bc BenchConfig) runOne(ctx context.Context, backend, workload, mode string, stderr io.Writer) BenchRun {
	w := bc.workload(workload)
	run := BenchRun{Backend: backend, Workload: workload, SKUs: w.SKUs, Coalesce: mode, Fencing: fencingFor(backend),
		ExpectedUnsafe: ExpectedUnsafe(backend), LoadAvg1: loadAvg1()}
	cc := CompareConfig{
		Backends: []string{backend}, Instances: bc.Instances, Bin: bc.Bin, StartupTimeout: bc.StartupTimeout,
		RedisAddrs: bc.RedisAddrs, ZKServers: bc.ZKServers, DatabaseURL: bc.DatabaseURL,
		Label:      fmt.Sprintf("bench %s %s coalesce=%s", backend, workload, mode),
		ServeFlags: []string{"--coalesce=" + mode},
		Run: Config{Workload: w, Orders: w.Stock, Concurrency: bc.Clients, Timeout: bc.Duration,
			RequestTimeout: 30 * time.Second, HoldSeconds: 900, Progress: ProgressOff},
	}
	if bc.LogDir != "" {
		// One directory a run: compare names logs <backend>-<n>.log.
		cc.LogDir = filepath.Join(bc.LogDir, fmt.Sprintf("%s-%s-coalesce-%s", backend, workload, mode))
	}
	cr, err := Compare(ctx, cc, stderr)
	if err != nil && (cr == nil || len(cr.Backends) == 0) {
		run.Error = err.Error()
		return run
	}
	e := cr.Backends[0]
	run.PeakRSSMB, run.InstanceRSSMB = e.PeakRSSMB, e.InstanceRSSMB
	r := e.Result
	if r == nil {
		run.Error = cmp.Or(e.Error, "no result")
		return run
	}
	run.Ran = true
	run.DurationS, run.OrdersPerS, run.ReservedPerS = r.DurationS, r.ThroughputPerS, r.ReservedPerS
	run.Orders, run.LatencyMs = r.Orders, r.LatencyMs
	run.Oversold, run.Lost, run.Disagreements = r.Units.Oversold, r.Units.Lost, r.Verification.DisagreementCount
	run.Safe, run.Verdict = r.Safe, r.Verdict
	return run
}
