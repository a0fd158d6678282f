// Package chaos is `stockguard load chaos`: fault scenarios under a steady
// order load, each run with fencing on and off. Unlike the other commands it
// drives servers directly: every run starts lock servers of its own (Redis
// masters, a replica, a three-node ZooKeeper ensemble) through
// internal/stack and kills, pauses and restarts them by PID; it SIGSTOPs
// and SIGCONTs service instances (started through procs), holds and
// redirects TCP through a forwarder of its own, promotes a Redis replica
// with go-redis, and expires a ZooKeeper session over the wire protocol.
// Each run is then verified as run does, and judged against what its
// scenario must show.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/stockguard/stockguard/loadtest/procs"
	"github.com/stockguard/stockguard/loadtest/progress"
)

// Config is one `load chaos`: scenarios × fencing modes, each run on
// instances and servers of its own.
type Config struct {
	// Scenarios to run, in order; names from Scenarios.
	Scenarios []string
	// Backends keeps only the runs on these backends; empty means every
	// backend each scenario supports (pause-holder runs on four, the other
	// scenarios on the one their fault is about).
	Backends []string
	// Fencing modes to run each scenario with: "on", "off" or both.
	Fencing   []string
	Instances int
	Bin       string
	// DatabaseURL is the shared Postgres; each run creates fresh SKUs.
	DatabaseURL string
	// LockTTL is --lock-ttl of the instances; short, so that a paused
	// holder's lease runs out within the run.
	LockTTL time.Duration
	// LockWait is --lock-wait of the instances.
	LockWait time.Duration
	// Duration is the least time the order load runs in each run; it runs
	// longer when the scenario's faults and Recovery need it.
	Duration time.Duration
	// NemesisDuration is how long the nemesis scenario injects faults
	// (--duration when given, else defaultNemesis).
	NemesisDuration time.Duration
	// Warmup is the load before the first fault; Recovery the load after
	// the fault heals, in which the time to recover is measured (at least
	// LockWait + LockTTL: see run).
	Warmup, Recovery time.Duration
	// Concurrency is the number of closed-loop clients, spread evenly over
	// the instances.
	Concurrency int
	// SKUs is the number of hot SKUs every order draws from: by default
	// one, so that every instance contends for the same lock all the time
	// and a stalled holder's stale write always meets newer writes.
	SKUs  int
	Stock int
	// SellOut orders whatever the counters still show as available once
	// the load has stopped: units a lost update made the counters forget
	// then turn into units sold twice, which the audit shows as oversold.
	SellOut        bool
	RequestTimeout time.Duration
	StartupTimeout time.Duration
	// LogDir keeps instance and server logs, one directory per run; empty
	// means a temporary directory, kept only when a run failed.
	LogDir   string
	Label    string
	Seed     uint64
	Progress progress.Mode
}

// Defaults of `load chaos`.
const (
	defaultLockTTL     = time.Second
	defaultLockWait    = 3 * time.Second
	defaultDuration    = 6 * time.Second
	defaultNemesis     = 60 * time.Second
	defaultWarmup      = time.Second
	defaultRecovery    = 2 * time.Second
	defaultConcurrency = 12
	defaultSKUs        = 1
	defaultStock       = 100_000
)

// DefaultConfig returns the defaults; callers set Scenarios, Bin and
// DatabaseURL.
func DefaultConfig() Config {
	return Config{
		Fencing:         []string{"on", "off"},
		Instances:       3,
		LockTTL:         defaultLockTTL,
		LockWait:        defaultLockWait,
		Duration:        defaultDuration,
		NemesisDuration: defaultNemesis,
		Warmup:          defaultWarmup,
		Recovery:        defaultRecovery,
		Concurrency:     defaultConcurrency,
		SKUs:            defaultSKUs,
		Stock:           defaultStock,
		SellOut:         true,
		RequestTimeout:  20 * time.Second,
		StartupTimeout:  30 * time.Second,
		Progress:        progress.Auto,
	}
}

// Validate reports the first invalid field.
func (cc Config) Validate() error {
	if len(cc.Scenarios) == 0 {
		return errors.New("no scenario: set --scenario")
	}
	for _, s := range cc.Scenarios {
		if scenarioByName(s) == nil {
			return fmt.Errorf("scenario %q: want one of %s, or all", s, strings.Join(Scenarios, ", "))
		}
	}
	for _, b := range cc.Backends {
		ok := false
		for _, s := range cc.Scenarios {
			ok = ok || slices.Contains(scenarioByName(s).Backends, b)
		}
		if !ok {
			return fmt.Errorf("backend %q: none of the scenarios runs it (%s)", b, cc.backendHelp())
		}
	}
	if len(cc.Fencing) == 0 {
		return errors.New("no fencing mode")
	}
	for _, f := range cc.Fencing {
		if f != "on" && f != "off" {
			return fmt.Errorf("fencing %q: want on, off or both", f)
		}
	}
	switch {
	case cc.Instances < 3 || cc.Instances > 16:
		return fmt.Errorf("instances %d: want 3..16 (a scenario pauses one and needs others to take over)", cc.Instances)
	case cc.Bin == "":
		return errors.New("no stockguard binary: set --bin")
	case cc.LockTTL < 100*time.Millisecond || cc.LockTTL > time.Minute:
		return fmt.Errorf("lock-ttl %v: want 100ms..1m", cc.LockTTL)
	case cc.LockWait <= 0 || cc.LockWait > time.Minute:
		return fmt.Errorf("lock-wait %v: want > 0, at most 1m", cc.LockWait)
	case cc.Duration < 0 || cc.Duration > 30*time.Minute:
		return fmt.Errorf("duration %v: want 0..30m", cc.Duration)
	case cc.NemesisDuration < time.Second || cc.NemesisDuration > 30*time.Minute:
		return fmt.Errorf("nemesis duration %v: want 1s..30m", cc.NemesisDuration)
	case cc.Warmup < 0 || cc.Recovery < 0 || cc.Warmup > 10*time.Minute || cc.Recovery > 10*time.Minute:
		return errors.New("warmup and recovery: want 0..10m")
	case cc.Concurrency < cc.Instances || cc.Concurrency > 1000:
		return fmt.Errorf("concurrency %d: want %d (one client per instance)..1000", cc.Concurrency, cc.Instances)
	case cc.SKUs < 1 || cc.SKUs > 100:
		return fmt.Errorf("skus %d: want 1..100", cc.SKUs)
	case cc.Stock < 1 || cc.Stock > 1_000_000:
		return fmt.Errorf("stock %d: want 1..1000000", cc.Stock)
	case cc.RequestTimeout <= 0 || cc.StartupTimeout <= 0:
		return errors.New("request-timeout and startup-timeout: want > 0")
	}
	if fi, err := os.Stat(cc.Bin); err != nil || fi.IsDir() {
		return fmt.Errorf("bin %q: not an executable file", cc.Bin)
	}
	return nil
}

func (cc Config) backendHelp() string {
	var parts []string
	for _, s := range cc.Scenarios {
		parts = append(parts, s+": "+strings.Join(scenarioByName(s).Backends, ","))
	}
	return strings.Join(parts, "; ")
}

// chaosPlan is one run to make: a scenario on a backend with a fencing mode.
type chaosPlan struct {
	sc               *scenario
	backend, fencing string
}

// plan lists the runs in order: scenario, then backend, then fencing.
func (cc Config) plan() []chaosPlan {
	var out []chaosPlan
	for _, name := range cc.Scenarios {
		sc := scenarioByName(name)
		for _, b := range sc.Backends {
			if len(cc.Backends) > 0 && !slices.Contains(cc.Backends, b) {
				continue
			}
			for _, f := range cc.Fencing {
				out = append(out, chaosPlan{sc: sc, backend: b, fencing: f})
			}
		}
	}
	return out
}

// Result is the JSON written by `load chaos --json`.
type Result struct {
	Label       string    `json:"label,omitempty"`
	GeneratedAt time.Time `json:"generated_at"`
	Seed        uint64    `json:"seed"`
	Instances   int       `json:"instances"`
	LockTTL     string    `json:"lock_ttl"`
	Runs        []Run     `json:"runs"`
	Pass        bool      `json:"pass"`
	Failures    []string  `json:"failures"`
	ReportPath  string    `json:"report,omitempty"`
}

// Execute makes every planned run in turn and judges each against what its
// scenario must show. Progress goes to stderr. An error means the runs
// could not be made at all (bad config, interrupted); a run that failed is
// recorded in the result, which then does not pass.
func Execute(ctx context.Context, cc Config, stderr io.Writer) (*Result, error) {
	if err := cc.Validate(); err != nil {
		return nil, err
	}
	root, cleanup, err := procs.LogRoot(cc.LogDir, "stockguard-chaos-", stderr)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	plans := cc.plan()
	if len(plans) == 0 {
		cleanup(false)
		return nil, errors.New("chaos: no run matches --scenario and --backend")
	}
	out := &Result{Label: cc.Label, GeneratedAt: time.Now().UTC(), Seed: cc.Seed, Instances: cc.Instances,
		LockTTL: cc.LockTTL.String(), Failures: []string{}}
	prog := progress.Start(ctx, stderr, cc.Progress, int64(len(plans)), progress.Options{Unit: "runs", Width: 20, Lines: true})
	for i, p := range plans {
		if ctx.Err() != nil {
			break
		}
		name := p.name()
		// On a terminal the bar's text follows the run; in a log, a line per
		// run and per fault event is more use than a bar.
		prog.Describe(name + ": starting")
		prog.Printf("== [%d/%d] %s\n", i+1, len(plans), name)
		run := cc.runOne(ctx, p, root, prog)
		prog.Add(1)
		prog.Printf("== %s: %s\n", name, run.Verdict)
		out.Runs = append(out.Runs, run)
		for _, f := range run.Failures {
			out.Failures = append(out.Failures, name+": "+f)
		}
	}
	prog.Stop()
	out.Pass = len(out.Failures) == 0 && len(out.Runs) == len(plans)
	if kept := cleanup(!out.Pass); cc.LogDir == "" && !kept {
		for i := range out.Runs {
			out.Runs[i].Logs = "" // removed with the temporary directory
		}
	}
	if err := ctx.Err(); err != nil {
		return out, fmt.Errorf("chaos interrupted: %w", err)
	}
	return out, nil
}

func (p chaosPlan) name() string {
	return fmt.Sprintf("%s/%s/fencing-%s", p.sc.Name, p.backend, p.fencing)
}
