package loadtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/cliflag"
	"github.com/stockguard/stockguard/loadtest/compare"
	"github.com/stockguard/stockguard/loadtest/compare/seedtable"
	"github.com/stockguard/stockguard/loadtest/progress"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/run"
)

// ErrUsage marks a command line that could not be understood; the reason
// has already been written to stderr (the error also wraps
// cliflag.ErrReported).
var ErrUsage = cliflag.ErrUsage

// ErrUnsafe marks a run, comparison, benchmark or chaos run that found
// oversold or lost units where none were allowed: stockguard exits 3.
var ErrUnsafe = errors.New("unsafe")

// ErrInterrupted marks a run or comparison stopped by its context (Ctrl-C)
// after printing what it had measured: stockguard exits 130.
var ErrInterrupted = errors.New("interrupted")

// loadEnvPrefix names the variables of the load commands' own flags, so
// that `load chaos --fencing` and `serve --fencing` never read each other's.
const loadEnvPrefix = "STOCKGUARD_LOAD_"

// connectionFlags read the variables serve reads (STOCKGUARD_REDIS_ADDRS…):
// one environment points both the service and the load tester at the same
// servers.
var connectionFlags = []string{"redis-addrs", "zk-servers", "etcd-endpoints", "database-url", "admin-token"}

// newFlags is the flag set of `stockguard load <name>`.
func newFlags(name string, stdout, stderr io.Writer) *cliflag.Set {
	fs := cliflag.New("stockguard load "+name, loadEnvPrefix, stdout, stderr)
	fs.ShareEnv("STOCKGUARD_", connectionFlags...)
	return fs
}

const usageText = `usage: stockguard load <command> [flags]

commands:
  run       drive running instances with a seeded workload, then verify
            from the client's ledger, /audit and the SKU counters
  compare   start instances of the service per lock backend, run the same
            workload on each, print a side-by-side table and write an HTML report
  chaos     inject faults (paused holders, killed Redis and ZooKeeper nodes,
            an expired session, a Redis failover) under load, with fencing
            on and off, and report oversold units and stale writes rejected
  bench     the benchmark suite: store ceiling, then every backend with
            coalescing on and off on one hot SKU and on many, with ratios,
            targets and peak RSS (make bench adds the Go micro-benchmarks)

Run "stockguard load <command> --help" for its flags. Their own flags are
also read from STOCKGUARD_LOAD_<FLAG>; --redis-addrs, --zk-servers,
--etcd-endpoints, --database-url and --admin-token from serve's variables
(STOCKGUARD_REDIS_ADDRS, ...).

exit status: 0 safe, 1 the run failed or is inconclusive (orders whose outcome
stayed unknown), 2 bad usage, 3 units oversold or lost (unless expected), 130
interrupted (the partial summary is printed first).
`

// Main is `stockguard load`: args are what follows "load". It returns an
// error wrapping ErrUsage for a bad command line, ErrInterrupted when ctx
// ended the work early, and ErrUnsafe when damage
// was found that was not expected.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return fmt.Errorf("%w: %w: no command", ErrUsage, cliflag.ErrReported)
	}
	switch args[0] {
	case "run":
		return mainRun(ctx, args[1:], getenv, stdout, stderr)
	case "compare":
		return mainCompare(ctx, args[1:], getenv, stdout, stderr)
	case "chaos":
		return mainChaos(ctx, args[1:], getenv, stdout, stderr)
	case "bench":
		return mainBench(ctx, args[1:], getenv, stdout, stderr)
	case "floor": // hidden: started by bench
		return mainFloor(ctx, args[1:], getenv, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usageText)
		return nil
	}
	fmt.Fprintf(stderr, "stockguard load: unknown command %q\n\n%s", args[0], usageText)
	return fmt.Errorf("%w: %w: unknown command %q", ErrUsage, cliflag.ErrReported, args[0])
}

// workloadFlags are the flags run and compare share.
type workloadFlags struct {
	cfg         run.Config
	rate        string
	seed        uint64
	concurrency int
}

func (wf *workloadFlags) register(fs *flag.FlagSet) {
	c := &wf.cfg
	c.Workload = run.Workload{Lines: run.Range{Min: 1, Max: 3}, Qty: run.Range{Min: 1, Max: 5}}
	c.Progress = progress.Auto
	fs.IntVar(&c.Orders, "orders", 2000, "closed loop: number of orders to send")
	fs.IntVar(&wf.concurrency, "concurrency", 0, "closed loop: concurrent clients (default 32); open loop: cap on requests in flight (default 256)")
	fs.StringVar(&wf.rate, "rate", "", "open loop: fixed arrival rate, e.g. 500/s or 30000/m (needs --duration)")
	fs.DurationVar(&c.Duration, "duration", 0, "open loop: how long to send at --rate, e.g. 30s")
	fs.IntVar(&c.Workload.SKUs, "skus", 20, "number of fresh SKUs created for the run")
	fs.IntVar(&c.Workload.Stock, "stock", 200, "units of stock per SKU")
	fs.Var(&c.Workload.Lines, "lines", "lines per order, lo..hi (distinct SKUs)")
	fs.Var(&c.Workload.Qty, "qty", "units per line, lo..hi")
	fs.Float64Var(&c.Workload.Zipf, "zipf", 1.1, "hot-SKU skew exponent; 0 = uniform")
	fs.Float64Var(&c.Workload.RetryShare, "retry-share", 0.05, "share of orders deliberately resent with the same idempotency key")
	fs.Uint64Var(&wf.seed, "seed", 0, "workload seed; 0 picks one at random (printed, so the run can be repeated)")
	fs.DurationVar(&c.Timeout, "timeout", 2*time.Minute, "bound on the sending phase; unsent orders are skipped (open loop: default --duration + 1m, and at least --duration)")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", 30*time.Second, "bound on each HTTP request")
	fs.IntVar(&c.HoldSeconds, "hold-seconds", 900, "hold_seconds of every order (1..86400); must outlast the run until it is verified, --timeout + 4 × --request-timeout + 90s (330 by default), or it is refused: an expired hold's units would be sold again")
	fs.Var(&c.Progress, "progress", "progress bar on stderr: auto (terminal, or runs over 3s), on, off")
}

// finish resolves defaults that depend on other flags; set says whether a
// flag was given.
func (wf *workloadFlags) finish(set func(name string) bool) error {
	c := &wf.cfg
	if wf.rate != "" {
		r, err := parseRate(wf.rate)
		if err != nil {
			return err
		}
		c.Rate = r
		if set("orders") {
			return errors.New("--orders is for the closed loop; with --rate the count is rate × duration")
		}
		c.Orders = 0
		if !set("timeout") {
			c.Timeout = c.Duration + run.OpenLoopGrace
		}
	}
	c.Concurrency = wf.concurrency
	if !set("concurrency") {
		c.Concurrency = 32
		if c.Rate > 0 {
			c.Concurrency = 256
		}
	}
	c.Workload.Seed = wf.seed
	if c.Workload.Seed == 0 {
		c.Workload.Seed = rand.Uint64N(1<<53-1) + 1 // fits a JSON number exactly
	}
	return nil
}

// parseRate reads "500", "500/s" or "30000/m" as orders per second.
func parseRate(s string) (float64, error) {
	num, unit, _ := strings.Cut(strings.TrimSpace(s), "/")
	r, err := strconv.ParseFloat(num, 64)
	if err != nil || r <= 0 {
		return 0, fmt.Errorf("rate %q: want a positive number, e.g. 500/s", s)
	}
	switch unit {
	case "", "s":
		return r, nil
	case "m":
		return r / 60, nil
	}
	return 0, fmt.Errorf("rate %q: unit must be /s or /m", s)
}

func mainRun(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("run", stdout, stderr)
	var wf workloadFlags
	wf.register(fs.FlagSet)
	var urls, jsonPath string
	var expectUnsafe bool
	fs.StringVar(&urls, "urls", "", "comma-separated base URLs of running instances (required), e.g. http://127.0.0.1:8081,http://127.0.0.1:8082")
	fs.StringVar(&wf.cfg.AdminToken, "admin-token", "", "bearer token for PUT /v1/skus (the instances' --admin-token)")
	fs.StringVar(&jsonPath, "json", "", "write the result as JSON to this file")
	fs.BoolVar(&expectUnsafe, "expect-unsafe", false, "exit 0 even if units were oversold or lost (for none/local demonstrations); an INCONCLUSIVE run still exits 1")
	fs.StringVar(&wf.cfg.Label, "label", "", "free text recorded in the result")
	fs.StringVar(&wf.cfg.Backend, "backend", "", "lock backend the instances run (informational, recorded in the result)")
	fs.StringVar(&wf.cfg.Fencing, "fencing", "", "fencing mode the instances run, on|off: recorded in the result; off skips the check of the rows' fence tokens, which unfenced writes do not stamp")
	fs.Synopsis("--urls=URL,... [--orders=N --concurrency=C | --rate=R/s --duration=D] [flags]")
	fs.About("Drives running instances with a seeded workload, then verifies from the client's ledger, /audit and the\n" +
		"SKU counters; orders it never heard an answer to are resent with their key until one settles them\n" +
		"(a run left with unresolved orders is INCONCLUSIVE, exit 1). Ctrl-C, in any phase, stops and prints\n" +
		"what was measured so far, not verified (exit 130).")
	fs.Example("stockguard load run --urls=http://127.0.0.1:8081,http://127.0.0.1:8082 --orders=5000 --concurrency=64")
	fs.Example("STOCKGUARD_ADMIN_TOKEN=secret stockguard load run --urls=http://127.0.0.1:8080 --rate=500/s --duration=30s")
	if err := fs.Parse(args, getenv); err != nil {
		return cliflag.Done(err)
	}
	if err := wf.finish(fs.IsSet); err != nil {
		return fs.Fail("%v", err)
	}
	cfg := wf.cfg
	for _, u := range cliflag.SplitList(urls) {
		cfg.URLs = append(cfg.URLs, strings.TrimRight(u, "/"))
	}
	cfg.ExpectedUnsafe = expectUnsafe
	if err := cfg.Validate(); err != nil {
		return fs.Fail("%v", err)
	}
	res, err := run.Execute(ctx, cfg, stderr)
	if errors.Is(err, run.ErrInterrupted) {
		fmt.Fprintln(stdout, "interrupted: what was measured so far (not verified)")
	} else if err != nil {
		return fmt.Errorf("load run: %w", err)
	}
	res.PrintTable(stdout)
	if jsonPath != "" {
		if err := report.WriteJSON(jsonPath, res); err != nil {
			return fmt.Errorf("load run: %w", err)
		}
		fmt.Fprintf(stdout, "wrote %s\n", jsonPath)
	}
	if err != nil {
		return fmt.Errorf("load run: %w: %w", ErrInterrupted, err)
	}
	return runVerdict(res, expectUnsafe)
}

// runVerdict is the error of a verified run: ErrUnsafe for damage, unless
// expectUnsafe; errFailed for an inconclusive run whatever expectUnsafe
// says, since that flag excuses oversold or lost units, not a run whose
// orders could not all be accounted for.
func runVerdict(res *run.Result, expectUnsafe bool) error {
	switch {
	case res.Damaged() && !expectUnsafe:
		return fmt.Errorf("load run: %w: %s", ErrUnsafe, res.Verdict)
	case !res.Safe && !res.Damaged():
		// Inconclusive: no damage found, but not every order accounted for.
		return fmt.Errorf("load run: %w: %s", errFailed, res.Verdict)
	}
	return nil
}

func mainCompare(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("compare", stdout, stderr)
	var wf workloadFlags
	wf.register(fs.FlagSet)
	var cc compare.Config
	var backends, requireUnsafe string
	fs.StringVar(&backends, "backends", strings.Join(compare.AllBackends(), ","), "comma-separated lock backends to compare")
	fs.IntVar(&cc.Instances, "instances", 3, "service instances per backend")
	fs.StringVar(&cc.ReportPath, "report", "out/report.html", "write the self-contained HTML report here (empty: none)")
	fs.StringVar(&cc.JSONPath, "json", "out/compare.json", "write the comparison as JSON here (empty: none)")
	fs.StringVar(&cc.Bin, "bin", "", "stockguard binary to start instances from (default: this executable)")
	fs.StringVar(&requireUnsafe, "require-unsafe", "", "test flag: comma-separated expected-unsafe backends (none, local) that must show damage")
	fs.DurationVar(&cc.StartupTimeout, "startup-timeout", 30*time.Second, "how long instances get to answer /healthz")
	fs.StringVar(&cc.LockTTL, "lock-ttl", "", "--lock-ttl passed to every instance (default: the service's)")
	fs.StringVar(&cc.RedisAddrs, "redis-addrs", "", "--redis-addrs for the instances (none: the service's default)")
	fs.StringVar(&cc.ZKServers, "zk-servers", "", "--zk-servers for the instances (none: the service's default)")
	fs.StringVar(&cc.EtcdEndpoints, "etcd-endpoints", "", "--etcd-endpoints for the instances (none: the service's default)")
	fs.StringVar(&cc.DatabaseURL, "database-url", "", "--database-url for the instances (none: the service's default)")
	fs.BoolVar(&cc.FreshDB, "fresh-db", true, "give each backend its own scratch database on the --database-url server, dropped after its run (one deployment, one backend: token spaces differ)")
	fs.StringVar(&cc.LogDir, "logs", "", "keep instance logs in this directory (default: a temporary one, kept only on failure)")
	fs.StringVar(&cc.Label, "label", "", "free text shown in the report")
	seed := seedtable.DefaultSettings()
	var seedOn bool
	var seedFencing string
	fs.BoolVar(&seedOn, "seed-table", true, "measure the source article's table per backend after its run (throughput, release after the holder dies, fairness, availability, fencing)")
	fs.StringVar(&seedFencing, "seed-fencing", strings.Join(seed.Fencing, ","), "comma-separated backends whose seed-table fencing cells run chaos pause-holder, fencing on and off")
	fs.IntVar(&seed.Throughput.Orders, "seed-orders", seed.Throughput.Orders, "orders of each seed-table throughput run (hot SKU, 1,000 SKUs)")
	fs.DurationVar(&seed.LockTTL, "seed-lock-ttl", seed.LockTTL, "--lock-ttl of the seed table's own instances (release after the holder dies, fencing)")
	fs.DurationVar(&seed.Window, "seed-window", seed.Window, "how long each seed-table availability cell keeps its servers down")
	fs.DurationVar(&seed.Fairness, "seed-fairness", seed.Fairness, "how long the seed-table fairness contention runs")
	fs.Var((*serveFlagList)(&cc.ServeFlags), "serve-flag", "further flag for every instance, repeatable, e.g. --serve-flag=--coalesce=off")
	fs.Synopsis("[--backends=none,local,...] [--instances=3] [workload flags] [--report=FILE] [--json=FILE]")
	fs.About("Starts its own instances of the service per lock backend (with an explicit environment, recorded in the\n" +
		"result), runs the same workload on each, prints a side-by-side table and writes an HTML report.")
	fs.Example("stockguard load compare --backends=redis,redlock,zookeeper --orders=3000 --report=out/report.html")
	fs.Example("STOCKGUARD_REDIS_ADDRS=10.0.0.1:6379 STOCKGUARD_LOAD_INSTANCES=2 stockguard load compare --backends=redis")
	if err := fs.Parse(args, getenv); err != nil {
		return cliflag.Done(err)
	}
	if err := wf.finish(fs.IsSet); err != nil {
		return fs.Fail("%v", err)
	}
	cc.Run = wf.cfg
	cc.Backends = cliflag.SplitList(backends)
	cc.RequireUnsafe = cliflag.SplitList(requireUnsafe)
	if seedOn {
		seed.Fencing = cliflag.SplitList(seedFencing)
		seed.Throughput.Seed = cc.Run.Workload.Seed
		cc.Seed = &seed
	}
	if err := orSelf(&cc.Bin); err != nil {
		return fmt.Errorf("load compare: %w", err)
	}
	if err := cc.Validate(); err != nil {
		return fs.Fail("%v", err)
	}
	cr, err := compare.Execute(ctx, cc, stderr)
	interrupted := err != nil && cr != nil && ctx.Err() != nil
	if interrupted {
		fmt.Fprintln(stdout, "interrupted: the backends measured so far (the last one partly, not verified)")
	} else if err != nil {
		return fmt.Errorf("load compare: %w", err)
	}
	compare.PrintTable(stdout, cr)
	if cr.SeedSettings != nil {
		seedtable.Print(stdout, cr.SeedTables(), *cr.SeedSettings)
	}
	if cc.ReportPath != "" {
		cr.ReportPath = cc.ReportPath
		if err := report.WriteFile(cc.ReportPath, compare.Report(cr)); err != nil {
			return fmt.Errorf("load compare: %w", err)
		}
		fmt.Fprintf(stdout, "report: %s\n", cc.ReportPath)
	}
	if cc.JSONPath != "" {
		if err := report.WriteJSON(cc.JSONPath, cr); err != nil {
			return fmt.Errorf("load compare: %w", err)
		}
		fmt.Fprintf(stdout, "json: %s\n", cc.JSONPath)
	}
	if interrupted {
		return fmt.Errorf("load compare: %w: %w", ErrInterrupted, err)
	}
	if !cr.Pass {
		return fmt.Errorf("load compare: %w%s", unsafeIf(compareDamaged(cr)), strings.Join(cr.Failures, "; "))
	}
	return nil
}

// orSelf fills an empty --bin with the running executable: by default the
// load tester starts instances of the very binary it runs in.
func orSelf(bin *string) error {
	if *bin != "" {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this executable: %w", err)
	}
	*bin = exe
	return nil
}

// errFailed marks a failure that is not damage: stockguard exits 1 for it.
var errFailed = errors.New("failed")

// unsafeIf is the failure's sentinel, ErrUnsafe only when units were
// oversold or lost where none were allowed (exit 3): a backend that did not
// start or a --require-unsafe backend that came out clean is a plain failure.
func unsafeIf(damaged bool) error {
	if damaged {
		return fmt.Errorf("%w: ", ErrUnsafe)
	}
	return fmt.Errorf("%w: ", errFailed)
}

// compareDamaged reports whether a backend that should be safe showed
// damage, in its run or in its seed table's runs.
func compareDamaged(cr *compare.Result) bool {
	for _, e := range cr.Backends {
		if e.ExpectedUnsafe {
			continue
		}
		if (e.Result != nil && e.Result.Damaged()) || (e.SeedTable != nil && e.SeedTable.Damaged()) {
			return true
		}
	}
	return false
}
