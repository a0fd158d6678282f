package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/cliflag"
	"github.com/stockguard/stockguard/internal/gctune"
	"github.com/stockguard/stockguard/loadtest/bench"
	"github.com/stockguard/stockguard/loadtest/bench/floor"
	"github.com/stockguard/stockguard/loadtest/compare"
	"github.com/stockguard/stockguard/loadtest/report"
)

// Run lengths of the full suite and of --quick. Full: 6 backends × 4 runs
// of 8 s plus start, verification and stop (~3 s a run) and 6 ceiling
// samples of 3 s took 265 s on the 2-core machine, and the whole of make
// bench (the go test benchmarks first) 7.5 minutes: under the ~10 minutes
// the suite may take. --quick took 105 s, too long for a test to run it.
// The judge after every run (2 s + 10 s), the naive loops, the floor and
// the spread ceilings add about 8 minutes to the full suite; --quick with
// them took 400 s on the machine shared with other runs (load average 27).
const (
	benchRunDuration      = 8 * time.Second
	benchCeilingDuration  = 3 * time.Second
	quickRunDuration      = 2 * time.Second
	quickCeilingDuration  = time.Second
	benchDefaultMaxRate   = 15_000
	benchDefaultSpreadSKU = 1000
	// The outside generator's (and the naive loops' and floor's) warm-up
	// and window: issue 13's 2 s and 10 s; --quick's are long enough for
	// every connection to be open and a few thousand orders to pass.
	judgeWarmup      = 2 * time.Second
	judgeWindow      = 10 * time.Second
	quickJudgeWarmup = 500 * time.Millisecond
	quickJudgeWindow = 2 * time.Second
)

func mainBench(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", stdout, stderr)
	var bc bench.Config
	var backends, outPath string
	fs.StringVar(&outPath, "out", "out/bench.json", "write the suite's result as JSON here")
	fs.BoolVar(&bc.Quick, "quick", false, fmt.Sprintf("short runs (%v each, ceiling %v) to check the suite works; figures are rough", quickRunDuration, quickCeilingDuration))
	fs.StringVar(&backends, "backends", strings.Join(compare.AllBackends(), ","), "comma-separated lock backends")
	fs.IntVar(&bc.Instances, "instances", 3, "service instances per run")
	fs.IntVar(&bc.Clients, "clients", 64, "closed-loop clients per run")
	fs.IntVar(&bc.SpreadSKUs, "skus", benchDefaultSpreadSKU, "SKUs of the spread workload (the hot workload has one)")
	fs.DurationVar(&bc.Duration, "duration", benchRunDuration, "sending phase of each run")
	fs.DurationVar(&bc.CeilingDuration, "ceiling-duration", benchCeilingDuration, "each store-ceiling sample")
	fs.IntVar(&bc.CeilingConns, "ceiling-conns", 16, "connections writing the hot row for the store ceiling")
	fs.Float64Var(&bc.MaxRate, "max-rate", benchDefaultMaxRate, "orders generated per second of --duration; a faster service ends its run early")
	fs.Uint64Var(&bc.Seed, "seed", 42, "workload seed, the same for every run")
	fs.StringVar(&bc.LockBenchPath, "lock-bench", "", "go test -bench output (a file) of the lock micro-benchmarks to include")
	fs.StringVar(&bc.StoreBenchPath, "store-bench", "", "go test -bench output (a file) of the store benchmarks to include")
	fs.StringVar(&bc.Bin, "bin", "", "stockguard binary to start instances from (default: this executable)")
	fs.StringVar(&bc.RedisAddrs, "redis-addrs", "", "--redis-addrs for the instances (none: the service's default)")
	fs.StringVar(&bc.ZKServers, "zk-servers", "", "--zk-servers for the instances (none: the service's default)")
	fs.StringVar(&bc.EtcdEndpoints, "etcd-endpoints", "", "--etcd-endpoints for the instances (none: the service's default)")
	fs.StringVar(&bc.DatabaseURL, "database-url", "", "--database-url for the instances and the store ceiling (none: the service's default)")
	fs.BoolVar(&bc.FreshDB, "fresh-db", true, "run in a scratch database on the --database-url server, dropped at the end (false: the shared database, with other runs' leftovers)")
	fs.StringVar(&bc.LogDir, "logs", "", "keep every instance log under this directory (default: kept only for failed runs)")
	fs.DurationVar(&bc.StartupTimeout, "startup-timeout", 30*time.Second, "how long instances get to answer /healthz")
	fs.DurationVar(&bc.JudgeWarmup, "judge-warmup", judgeWarmup, "vegeta's warm-up after each run (also the naive loops' and the floor's)")
	fs.IntVar(&bc.Rounds, "rounds", 1, "repeat the whole suite, limits included, and judge each target on its median over the rounds (1..9; about 12 minutes a round)")
	fs.DurationVar(&bc.JudgeWindow, "judge-duration", judgeWindow, "vegeta's measured window after each run, the naive loops' and the floor's; 0 skips all three")
	fs.Var((*serveFlagList)(&bc.ServeFlags), "serve-flag", "further flag for every service instance (not the floor's), repeatable, e.g. --serve-flag=--coalesce-max-batches=1; not --coalesce, which the suite runs both ways")
	fs.Synopsis("[--out=out/bench.json] [--quick] [flags]")
	fs.About("Measures the store ceiling (one hot row, no lock), then runs every backend on one hot SKU and on\n" +
		"--skus SKUs with coalescing on and off, each run judged after by vegeta (64 workers) with the CPU\n" +
		"per order of every process class; next to the runs it measures the spread ceiling, the naive\n" +
		"go-redsync and zk.Lock loops and a bare gin floor, and prints ratios and targets. Each judged window's\n" +
		"SKUs are read back against vegeta's answers. Exits 3 if a safe backend oversold or lost units (in a run\n" +
		"or a judged window), 1 if a run did not complete or could not be verified; a missed target is reported,\n" +
		"not fatal.")
	fs.Example("stockguard load bench --quick --backends=redis,redlock")
	fs.Example("stockguard load bench --backends=redlock --serve-flag=--coalesce-max-batches=1")
	fs.Example("STOCKGUARD_DATABASE_URL=postgres://postgres@db:5432/stockguard stockguard load bench --out=out/bench.json")
	if err := fs.Parse(args, getenv); err != nil {
		return cliflag.Done(err)
	}
	if bc.Quick {
		if !fs.IsSet("duration") {
			bc.Duration = quickRunDuration
		}
		if !fs.IsSet("ceiling-duration") {
			bc.CeilingDuration = quickCeilingDuration
		}
		if !fs.IsSet("judge-warmup") {
			bc.JudgeWarmup = quickJudgeWarmup
		}
		if !fs.IsSet("judge-duration") {
			bc.JudgeWindow = quickJudgeWindow
		}
	}
	bc.Backends = cliflag.SplitList(backends)
	if err := orSelf(&bc.Bin); err != nil {
		return fmt.Errorf("load bench: %w", err)
	}
	if err := bc.Validate(); err != nil {
		return fs.Fail("%v", err)
	}
	res, runErr := bench.Execute(ctx, bc, stderr)
	if res == nil {
		return fmt.Errorf("load bench: %w", runErr)
	}
	bench.Print(stdout, res)
	if err := report.WriteJSON(outPath, res); err != nil {
		return fmt.Errorf("load bench: %w", errors.Join(runErr, err))
	}
	fmt.Fprintf(stdout, "json: %s\n", outPath)
	if runErr != nil && ctx.Err() != nil {
		// Ctrl-C: what was measured so far was printed and written above.
		return fmt.Errorf("load bench: %w: %w", ErrInterrupted, runErr)
	}
	if runErr != nil {
		return fmt.Errorf("load bench: %w", runErr)
	}
	if !res.Pass {
		return fmt.Errorf("load bench: %w%s", unsafeIf(res.Damaged()), strings.Join(res.Failures, "; "))
	}
	return nil
}

// mainFloor is the hidden `stockguard load floor`: one process of the
// bench's HTTP floor, which bench starts as many times as it starts
// instances. It prints the line floor.Start waits for, then serves until
// interrupted.
func mainFloor(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("floor", stdout, stderr)
	var addr string
	fs.StringVar(&addr, "addr", "127.0.0.1:0", "listen address (port 0: a free one, printed)")
	if err := fs.Parse(args, getenv); err != nil {
		return cliflag.Done(err)
	}
	// The floor runs with the instances' collector settings: it is their
	// HTTP edge without the service, measured under the same conditions.
	defer gctune.Apply(getenv)()
	return floor.Serve(ctx, addr, stdout)
}
