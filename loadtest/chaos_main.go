package loadtest

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/cliflag"
	"github.com/stockguard/stockguard/loadtest/chaos"
	"github.com/stockguard/stockguard/loadtest/report"
)

// mainChaos is `stockguard load chaos`.
func mainChaos(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("chaos", stdout, stderr)
	cc := chaos.DefaultConfig()
	var scenario, backends, fencing, reportPath, jsonPath, mdPath string
	fs.StringVar(&scenario, "scenario", "", "scenario to run, or all: "+strings.Join(chaos.Scenarios, ", "))
	fs.StringVar(&backends, "backend", "", "comma-separated backends to run; default: every backend each scenario supports (pause-holder: redis, redlock, zookeeper, etcd, postgres; the others have one each)")
	fs.StringVar(&fencing, "fencing", "both", "fencing of the instances: on, off, or both (one run each)")
	fs.IntVar(&cc.Instances, "instances", cc.Instances, "service instances per run (at least 3)")
	fs.DurationVar(&cc.Duration, "duration", cc.Duration, "least time the order load runs in each run; it runs longer when the faults and --recovery need it (nemesis: how long it injects faults, default 60s)")
	fs.DurationVar(&cc.Warmup, "warmup", cc.Warmup, "order load before the first fault")
	fs.DurationVar(&cc.Recovery, "recovery", cc.Recovery, "order load after the last fault event (at least --lock-wait + --lock-ttl)")
	fs.DurationVar(&cc.LockTTL, "lock-ttl", cc.LockTTL, "--lock-ttl of the instances (redis-failover uses at least 2s, see CHAOS.md)")
	fs.DurationVar(&cc.LockWait, "lock-wait", cc.LockWait, "--lock-wait of the instances")
	fs.IntVar(&cc.Concurrency, "concurrency", cc.Concurrency, "closed-loop clients, spread over the instances")
	fs.IntVar(&cc.SKUs, "skus", cc.SKUs, "hot SKUs every order draws from")
	fs.IntVar(&cc.Stock, "stock", cc.Stock, "units of stock per SKU")
	fs.BoolVar(&cc.SellOut, "sell-out", cc.SellOut, "after the load, order what the counters still show as available, so lost updates become oversold units")
	fs.StringVar(&cc.Bin, "bin", "", "stockguard binary to start instances from (default: this executable)")
	fs.StringVar(&cc.DatabaseURL, "database-url", "", "--database-url for the instances (none: the service's default)")
	fs.StringVar(&cc.LogDir, "logs", "", "keep instance and server logs here, a directory per run (default: a temporary one, kept only on failure)")
	fs.StringVar(&reportPath, "report", "out/chaos.html", "write the self-contained HTML report here (empty: none)")
	fs.StringVar(&jsonPath, "json", "out/chaos.json", "write the runs as JSON here (empty: none)")
	fs.StringVar(&mdPath, "markdown", "", "also write the table of runs as GitHub Markdown here")
	fs.Uint64Var(&cc.Seed, "seed", 0, "seed of the order load; 0 picks one at random")
	fs.DurationVar(&cc.RequestTimeout, "request-timeout", cc.RequestTimeout, "bound on each HTTP request (must outlast a paused instance)")
	fs.DurationVar(&cc.StartupTimeout, "startup-timeout", cc.StartupTimeout, "how long instances get to answer /healthz")
	fs.StringVar(&cc.Label, "label", "", "free text shown in the report")
	fs.Var(&cc.Progress, "progress", "progress on stderr: auto (a bar on a terminal, else a line per event), on, off")
	fs.Synopsis("--scenario=NAME|all [--backend=B,...] [--fencing=on|off|both] [--json=FILE] [--report=FILE] [--duration=D] [flags]")
	var scenarios strings.Builder
	chaos.PrintScenarios(&scenarios)
	fs.About(fmt.Sprintf("Each run starts its own lock servers (Redis, ZooKeeper or etcd; postgres locks in the database) and %d+\n"+
		"instances with --chaos, runs a steady order load, injects the scenario's fault and verifies the stock. Scenarios:\n%s",
		cc.Instances, scenarios.String()))
	fs.Example("stockguard load chaos --scenario=pause-holder --backend=redlock --fencing=both")
	fs.Example("STOCKGUARD_LOAD_FENCING=on stockguard load chaos --scenario=all --json=out/chaos.json")
	if err := fs.Parse(args, getenv); err != nil {
		return cliflag.Done(err)
	}
	// The nemesis runs its faults for --duration when given (60s if not).
	if fs.IsSet("duration") {
		cc.NemesisDuration = cc.Duration
	}
	switch scenario {
	case "":
		return fs.Fail("--scenario is required")
	case "all":
		cc.Scenarios = chaos.Scenarios
	default:
		cc.Scenarios = cliflag.SplitList(scenario)
	}
	cc.Backends = cliflag.SplitList(backends)
	switch fencing {
	case "both":
		cc.Fencing = []string{"on", "off"}
	default:
		cc.Fencing = cliflag.SplitList(fencing)
	}
	if cc.Seed == 0 {
		cc.Seed = rand.Uint64N(1<<53-1) + 1
	}
	if err := orSelf(&cc.Bin); err != nil {
		return fmt.Errorf("load chaos: %w", err)
	}
	if err := cc.Validate(); err != nil {
		return fs.Fail("%v", err)
	}
	start := time.Now()
	res, err := chaos.Execute(ctx, cc, stderr)
	if res == nil {
		return fmt.Errorf("load chaos: %w", err)
	}
	chaos.PrintTable(stdout, res)
	fmt.Fprintf(stdout, "%d runs in %s\n", len(res.Runs), time.Since(start).Round(time.Second))
	if reportPath != "" {
		res.ReportPath = reportPath
		if werr := report.WriteFile(reportPath, chaos.Report(res)); werr != nil {
			return fmt.Errorf("load chaos: %w", werr)
		}
		fmt.Fprintf(stdout, "report: %s\n", reportPath)
	}
	if jsonPath != "" {
		if werr := report.WriteJSON(jsonPath, res); werr != nil {
			return fmt.Errorf("load chaos: %w", werr)
		}
		fmt.Fprintf(stdout, "json: %s\n", jsonPath)
	}
	if mdPath != "" {
		if werr := os.WriteFile(mdPath, []byte(chaos.MarkdownTable(res)), 0o644); werr != nil {
			return fmt.Errorf("load chaos: %w", werr)
		}
		fmt.Fprintf(stdout, "markdown: %s\n", mdPath)
	}
	if err != nil && ctx.Err() != nil {
		// Ctrl-C: the runs done so far were printed and written above.
		return fmt.Errorf("load chaos: %w: %w", ErrInterrupted, err)
	}
	if err != nil {
		return fmt.Errorf("load chaos: %w", err)
	}
	if !res.Pass {
		damaged := false
		for _, r := range res.Runs {
			damaged = damaged || r.Expect == chaos.ExpectSafe && r.Units.Oversold+r.Units.Lost > 0
		}
		return fmt.Errorf("load chaos: %w%s", unsafeIf(damaged), strings.Join(res.Failures, "; "))
	}
	return nil
}
