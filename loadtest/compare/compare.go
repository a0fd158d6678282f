// Package compare is `stockguard load compare`: for each lock backend it
// starts instances of the service (package procs), each backend in a
// scratch database of its own that it creates and drops on the Postgres
// server directly, runs the same seeded workload against them (package
// run), stops them, and returns the side-by-side comparison, its table and
// its HTML report. bench runs its suite through it.
package compare

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/cliflag"
	"github.com/stockguard/stockguard/internal/lock/backends"
	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/loadtest/compare/seedtable"
	"github.com/stockguard/stockguard/loadtest/procs"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/run"
)

// AllBackends are the lock backends compare runs by default, in report order.
func AllBackends() []string { return backends.Names() }

// ExpectedUnsafe reports whether a backend cannot keep several instances
// from overselling (none has no lock; local locks within one process only),
// so damage from it is the demonstration, not a failure.
func ExpectedUnsafe(backend string) bool { return !backends.Fenced(backend) }

// FencingFor is the --fencing compare passes: unfenced backends run off,
// every lock with a token source runs on.
func FencingFor(backend string) string {
	if ExpectedUnsafe(backend) {
		return "off"
	}
	return "on"
}

// Config is one `load compare`.
type Config struct {
	Backends       []string
	Instances      int
	Bin            string
	ReportPath     string
	JSONPath       string
	RequireUnsafe  []string // expected-unsafe backends that must show damage
	StartupTimeout time.Duration
	LockTTL        string
	RedisAddrs     string
	ZKServers      string
	EtcdEndpoints  string
	DatabaseURL    string
	// FreshDB gives each backend a scratch database of its own, dropped after
	// its run: tokens of different backends are not comparable, and an
	// expired hold fenced by another backend's token could never be reaped.
	FreshDB bool
	LogDir  string // empty: a temporary directory, removed unless a backend failed
	Label   string
	Run     run.Config // the workload; URLs, Backend, Fencing and AdminToken are set per backend

	// ServeFlags are further serve flags for every instance, such as
	// --coalesce=off; see ValidateServeFlags for those compare owns.
	ServeFlags []string

	// Seed, if set, measures the source article's table for every backend
	// (package seedtable) after its run.
	Seed *seedtable.Settings

	// AfterRun, if set, is called once the workload has run and verified,
	// before the instances stop, with the run's configuration (URLs, admin
	// token) and the instances: bench sends its outside generator there.
	AfterRun func(ctx context.Context, cfg run.Config, ins []*procs.Instance)
}

// Entry is one backend's outcome in a comparison.
type Entry struct {
	Backend        string      `json:"backend"`
	Fencing        string      `json:"fencing"`
	Instances      int         `json:"instances"`
	ExpectedUnsafe bool        `json:"expected_unsafe"`
	Verdict        string      `json:"verdict"`
	Error          string      `json:"error,omitempty"`
	StopError      string      `json:"stop_error,omitempty"`
	Logs           []string    `json:"logs,omitempty"`
	Result         *run.Result `json:"result,omitempty"`
	// Setup is how the instances were started: flags and the whole
	// environment they were given, secrets redacted.
	Setup *report.InstanceSetup `json:"setup,omitempty"`
	err   error

	// PeakRSSMB is the largest peak RSS (VmHWM, MiB) of the backend's
	// instances, read as each was stopped; InstanceRSSMB is each one's.
	PeakRSSMB     float64   `json:"peak_rss_mb"`
	InstanceRSSMB []float64 `json:"instance_peak_rss_mb,omitempty"`

	// SeedTable is the backend's column of the article's table.
	SeedTable *seedtable.Table `json:"seed_table,omitempty"`
}

// Result is the JSON written by `load compare --json`.
type Result struct {
	Label       string           `json:"label,omitempty"`
	GeneratedAt time.Time        `json:"generated_at"`
	Seed        uint64           `json:"seed"`
	Instances   int              `json:"instances"`
	Workload    run.WorkloadInfo `json:"workload"`
	Backends    []Entry          `json:"backends"`
	Pass        bool             `json:"pass"`
	Failures    []string         `json:"failures"`
	ReportPath  string           `json:"report,omitempty"`
	ServeFlags  []string         `json:"serve_flags,omitempty"`
	// SeedSettings is how the seed tables were measured; nil when they
	// were not.
	SeedSettings *seedtable.Settings `json:"seed_settings,omitempty"`
}

// Execute starts Instances serve processes per backend, runs the same
// seeded workload against each, stops them, and returns the comparison.
// Progress and instance trouble go to stderr.
// Failures lists what makes the comparison fail: a safe backend with damage,
// a backend that did not run, or a --require-unsafe backend without damage.
func Execute(ctx context.Context, cc Config, stderr io.Writer) (*Result, error) {
	if err := cc.Validate(); err != nil {
		return nil, err
	}
	logDir, cleanup, err := procs.LogRoot(cc.LogDir, "stockguard-compare-", stderr)
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	token := strings.ReplaceAll(uuid.NewString(), "-", "")
	out := &Result{Label: cc.Label, GeneratedAt: time.Now().UTC(), Seed: cc.Run.Workload.Seed, Instances: cc.Instances,
		ServeFlags: redactAll(cc.ServeFlags), SeedSettings: cc.Seed}
	for _, b := range cc.Backends {
		if ctx.Err() != nil {
			break
		}
		out.Backends = append(out.Backends, cc.runBackend(ctx, b, token, logDir, stderr))
	}
	for _, e := range out.Backends {
		if e.Result != nil {
			out.Workload = e.Result.Workload
			break
		}
	}
	out.Failures = cc.failures(out.Backends)
	out.Pass = len(out.Failures) == 0
	cleanup(!out.Pass)
	if err := ctx.Err(); err != nil {
		return out, fmt.Errorf("compare interrupted: %w", err)
	}
	return out, nil
}

// Validate reports the first invalid field; it checks that the binary
// exists but starts nothing.
func (cc Config) Validate() error {
	if len(cc.Backends) == 0 {
		return errors.New("no backends")
	}
	for _, b := range cc.Backends {
		if !slices.Contains(AllBackends(), b) {
			return fmt.Errorf("backend %q: want one of %s", b, strings.Join(AllBackends(), ","))
		}
	}
	for _, b := range cc.RequireUnsafe {
		if !ExpectedUnsafe(b) {
			return fmt.Errorf("require-unsafe %q: only none and local are expected to be unsafe", b)
		}
		if !slices.Contains(cc.Backends, b) {
			return fmt.Errorf("require-unsafe %q is not among --backends", b)
		}
	}
	switch {
	case cc.Instances < 1 || cc.Instances > 32:
		return fmt.Errorf("instances %d: want 1..32", cc.Instances)
	case cc.Bin == "":
		return errors.New("no stockguard binary: set --bin")
	case cc.StartupTimeout <= 0:
		return fmt.Errorf("startup-timeout %v: want > 0", cc.StartupTimeout)
	}
	if err := ValidateServeFlags(cc.ServeFlags); err != nil {
		return err
	}
	if s := cc.Seed; s != nil {
		for _, b := range s.Fencing {
			if !backends.Fenced(b) {
				return fmt.Errorf("seed-fencing %q: want backends with a fencing token (%s)", b, strings.Join(fencedBackends(), ","))
			}
		}
		switch {
		case s.Throughput.Orders < 1 || s.Throughput.Concurrency < 1 || s.Throughput.ManySKUs < 1:
			return errors.New("seed table: orders, concurrency and SKUs must be at least 1")
		case s.LockTTL < 100*time.Millisecond || s.LockWait <= 0 || s.Window <= 0 || s.Fairness <= 0 || s.Throughput.Timeout <= 0:
			return errors.New("seed table: lock TTL at least 100ms, every other duration > 0")
		}
	}
	if fi, err := os.Stat(cc.Bin); err != nil || fi.IsDir() {
		return fmt.Errorf("bin %q: not an executable file", cc.Bin)
	}
	probe := cc.Run
	probe.URLs = []string{"http://127.0.0.1:1"}
	return probe.Validate()
}

func fencedBackends() []string {
	var out []string
	for _, b := range backends.Names() {
		if backends.Fenced(b) {
			out = append(out, b)
		}
	}
	return out
}

// runBackend starts the instances of one backend, runs the workload and
// stops them; every failure is recorded in the entry, not returned.
func (cc Config) runBackend(ctx context.Context, backend, token, logDir string, stderr io.Writer) Entry {
	e := Entry{Backend: backend, Fencing: FencingFor(backend), Instances: cc.Instances, ExpectedUnsafe: ExpectedUnsafe(backend)}
	fmt.Fprintf(stderr, "== %s: starting %d instances (fencing %s)\n", backend, cc.Instances, e.Fencing)
	dbURL := cc.DatabaseURL
	if cc.FreshDB {
		u, drop, err := ScratchDatabase(ctx, cmp.Or(cc.DatabaseURL, DefaultDatabaseURL))
		if err != nil {
			e.err = err
			e.Error, e.Verdict = err.Error(), "ERROR: no scratch database"
			fmt.Fprintf(stderr, "== %s: %v\n", backend, err)
			return e
		}
		defer drop()
		dbURL = u
	}
	opts := procs.ServeOptions{
		Bin: cc.Bin, Lock: backend, Fencing: e.Fencing, LockTTL: cc.LockTTL, AdminToken: token,
		RedisAddrs: cc.RedisAddrs, ZKServers: cc.ZKServers, EtcdEndpoints: cc.EtcdEndpoints, DatabaseURL: dbURL, LogDir: logDir,
		Extra: cc.ServeFlags,
	}
	setup := opts.Setup()
	e.Setup = &setup
	ins, err := procs.Start(ctx, opts, cc.Instances, cc.StartupTimeout)
	if err != nil {
		e.err = err
		e.Error, e.Verdict = err.Error(), "ERROR: instances did not start"
		fmt.Fprintf(stderr, "== %s: %v\n", backend, err)
		return e
	}
	cfg := cc.Run
	cfg.URLs = nil
	for _, in := range ins {
		cfg.URLs = append(cfg.URLs, in.URL)
		e.Logs = append(e.Logs, in.LogPath)
	}
	cfg.Backend, cfg.Fencing, cfg.AdminToken, cfg.ExpectedUnsafe = backend, e.Fencing, token, e.ExpectedUnsafe
	cfg.Label = cc.Label
	res, err := run.Execute(ctx, cfg, stderr)
	if cc.AfterRun != nil && err == nil {
		cc.AfterRun(ctx, cfg, ins)
	}
	var seed *seedtable.Table
	if cc.Seed != nil && err == nil {
		fmt.Fprintf(stderr, "== %s: seed table: throughput, one hot SKU and %d SKUs\n", backend, cc.Seed.Throughput.ManySKUs)
		seed = &seedtable.Table{}
		seed.HotSKU, seed.ManySKUs = seedtable.MeasureThroughput(ctx, cfg, cc.Seed.Throughput, stderr)
	}
	if stopErr := procs.StopAll(ins); stopErr != nil {
		e.StopError = stopErr.Error()
		fmt.Fprintf(stderr, "== %s: stopping: %v\n", backend, stopErr)
	}
	for _, in := range ins {
		e.InstanceRSSMB = append(e.InstanceRSSMB, in.PeakRSSMB)
		e.PeakRSSMB = max(e.PeakRSSMB, in.PeakRSSMB)
	}
	if err != nil {
		e.err, e.Result = err, res // an interrupted run's partial result, else nil
		e.Error, e.Verdict = err.Error(), "ERROR: the run did not complete"
		fmt.Fprintf(stderr, "== %s: %v\n", backend, err)
		return e
	}
	e.Result, e.Verdict = res, res.Verdict
	fmt.Fprintf(stderr, "== %s: %s (sent in %.1fs)\n", backend, res.Verdict, res.DurationS)
	if seed != nil {
		t := seedtable.MeasureFaults(ctx, cc.faultConfig(backend, token, dbURL, logDir), stderr)
		t.HotSKU, t.ManySKUs = seed.HotSKU, seed.ManySKUs
		e.SeedTable = &t
	}
	return e
}

// faultConfig is the seed table's fault cells for one backend: servers of
// their own, the backend's database, the shared stack's servers for the
// fairness Lockers.
func (cc Config) faultConfig(backend, token, dbURL, logDir string) seedtable.FaultConfig {
	s := cc.Seed
	return seedtable.FaultConfig{
		Backend: backend, Bin: cc.Bin, AdminToken: token, DatabaseURL: cmp.Or(dbURL, DefaultDatabaseURL),
		Dir: filepath.Join(logDir, backend+"-seed"), LockTTL: s.LockTTL, LockWait: s.LockWait, Window: s.Window,
		Fairness: s.Fairness, RequestTimeout: 10 * time.Second, StartupTimeout: cc.StartupTimeout,
		Fencing: slices.Contains(s.Fencing, backend),
		Shared: backends.Params{
			RedisAddrs:    orList(cc.RedisAddrs, stack.RedisAddrs()),
			ZKServers:     orList(cc.ZKServers, stack.ZKServers()),
			EtcdEndpoints: orList(cc.EtcdEndpoints, stack.EtcdEndpoints()),
			DatabaseURL:   cmp.Or(dbURL, DefaultDatabaseURL),
			TTL:           5 * time.Second,
		},
	}
}

// orList splits a comma-separated list, or returns def for an empty one.
func orList(s string, def []string) []string {
	if l := cliflag.SplitList(s); len(l) > 0 {
		return l
	}
	return def
}

// failures lists what fails the comparison.
func (cc Config) failures(entries []Entry) []string {
	var fs []string
	for _, e := range entries {
		switch {
		case e.Result == nil || e.err != nil: // an interrupted run has a partial Result
			fs = append(fs, fmt.Sprintf("%s: did not run: %s", e.Backend, e.Error))
		case !e.ExpectedUnsafe && !e.Result.Safe: // damaged, or inconclusive
			fs = append(fs, fmt.Sprintf("%s: %s", e.Backend, e.Result.Verdict))
		case slices.Contains(cc.RequireUnsafe, e.Backend) && e.Result.Units.Oversold+e.Result.Units.Lost == 0:
			fs = append(fs, fmt.Sprintf("%s: expected damage (--require-unsafe) but saw 0 oversold, 0 lost", e.Backend))
		}
		if t := e.SeedTable; t != nil && !e.ExpectedUnsafe {
			fs = append(fs, t.Failures()...)
		}
		// An instance that exited before the stop, or did not stop cleanly,
		// failed whatever its figures say, unsafe backend or not.
		if e.StopError != "" {
			fs = append(fs, fmt.Sprintf("%s: %s", e.Backend, e.StopError))
		}
	}
	return fs
}

// PrintTable writes the side-by-side table.
func PrintTable(w io.Writer, cr *Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "backend\tfencing\torders/s\tp50 ms\tp99 ms\treserved\toversold\tlost\tstale fences\tlock failures\terrors\tpeak RSS MB\t verdict")
	for _, e := range cr.Backends {
		r := e.Result
		if r == nil {
			fmt.Fprintf(tw, "%s\t%s\t–\t–\t–\t–\t–\t–\t–\t–\t–\t–\t %s\n", e.Backend, e.Fencing, e.Verdict)
			continue
		}
		v := r.Verdict
		if e.ExpectedUnsafe && r.Damaged() {
			v += " (expected)"
		}
		if r.TimedOut {
			v += fmt.Sprintf(" [timed out: %d orders unsent]", r.Orders.Unsent)
		}
		oversold, lost := fmt.Sprint(r.Units.Oversold), fmt.Sprint(r.Units.Lost)
		if r.Units.Unverified {
			// Interrupted before its verification: nothing was read back.
			oversold, lost = "not verified", "not verified"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.2f\t%.2f\t%d\t%s\t%s\t%d\t%d\t%d\t%.1f\t %s\n", e.Backend, e.Fencing,
			r.ThroughputPerS, r.LatencyMs.P50, r.LatencyMs.P99, r.Units.Reserved, oversold, lost,
			r.Orders.StaleFence, r.Orders.LockUnavailable, r.Orders.Errors, e.PeakRSSMB, v)
	}
	_ = tw.Flush()
	if setups := cr.setups(); len(setups) > 0 {
		fmt.Fprintln(w, "instances started with exactly this environment (secrets redacted):")
		for _, e := range cr.Backends {
			if e.Setup != nil {
				e.Setup.Print(w, e.Backend)
			}
		}
	}
}

// setups maps each backend to how its instances were started.
func (cr *Result) setups() map[string]report.InstanceSetup {
	out := map[string]report.InstanceSetup{}
	for _, e := range cr.Backends {
		if e.Setup != nil {
			out[e.Backend] = *e.Setup
		}
	}
	return out
}

// Report builds the HTML report's data from a comparison.
func Report(cr *Result) report.Report {
	r := report.Report{Title: "Stockguard: lock backends compared", Generated: cr.GeneratedAt}
	if cr.Label != "" {
		r.Title += " — " + cr.Label
	}
	safe, unsafe, unverified := 0, 0, 0
	for _, e := range cr.Backends {
		r.Runs = append(r.Runs, SummarizeRun(e.Backend, e.Fencing, e.Instances, e.ExpectedUnsafe, e.Result, e.err))
		switch {
		case e.Result == nil:
		case e.Result.Damaged():
			unsafe++
		case e.Result.Safe && e.err == nil:
			safe++
		default: // interrupted before its verification, or inconclusive
			unverified++
		}
	}
	r.Summary = fmt.Sprintf("The same seeded workload (seed %d) ran against %d instances of the service for each lock backend. "+
		"%d backend(s) came out safe, %d showed oversold or lost units. Backends none and local are expected to fail with several instances: "+
		"they show what the distributed locks and fencing tokens prevent.", cr.Seed, cr.Instances, safe, unsafe)
	if unverified > 0 {
		r.Summary += fmt.Sprintf(" %d backend(s) could not be verified (interrupted, or orders whose outcome stayed unknown).", unverified)
	}
	if !cr.Pass {
		r.Summary += " This comparison FAILED: " + strings.Join(cr.Failures, "; ") + "."
	}
	w := cr.Workload
	load := fmt.Sprintf("closed loop, %d clients, %d orders", w.Concurrency, w.Orders)
	if w.Mode == "open" {
		load = fmt.Sprintf("open loop, %.0f orders/s for %s (%d orders, at most %d in flight)", w.RatePerS, w.Duration, w.Orders, w.Concurrency)
	}
	r.Workload = []report.Fact{
		{Label: "load", Value: load},
		{Label: "instances per backend", Value: fmt.Sprint(cr.Instances)},
		{Label: "SKUs × stock", Value: fmt.Sprintf("%d × %d units", w.SKUs, w.Stock)},
		{Label: "lines per order", Value: w.Lines.String()},
		{Label: "units per line", Value: w.Qty.String()},
		{Label: "hot-SKU skew (zipf)", Value: fmt.Sprint(w.Zipf)},
		{Label: "same-key retries", Value: fmt.Sprintf("%.1f%%", 100*w.RetryShare)},
		{Label: "seed", Value: fmt.Sprint(cr.Seed)},
	}
	if len(cr.ServeFlags) > 0 {
		r.Workload = append(r.Workload, report.Fact{Label: "serve flags", Value: strings.Join(cr.ServeFlags, " ")})
	}
	if tables := cr.SeedTables(); len(tables) > 0 && cr.SeedSettings != nil {
		r.Sections = append(r.Sections, SeedSection(tables, *cr.SeedSettings))
	}
	if setups := cr.setups(); len(setups) > 0 {
		r.Sections = append(r.Sections, report.SetupSection(setups))
	}
	return r
}

// SeedTables are the backends' seed tables, in report order.
func (cr *Result) SeedTables() []seedtable.Table {
	var out []seedtable.Table
	for _, e := range cr.Backends {
		if e.SeedTable != nil {
			out = append(out, *e.SeedTable)
		}
	}
	return out
}

// SeedSection is the report's section of the article's table: measures
// as rows, backends as columns, the methods and sources as notes.
func SeedSection(tables []seedtable.Table, s seedtable.Settings) report.Section {
	grid := seedtable.Grid(tables, true)
	t := &report.Table{Columns: grid[0]}
	for _, line := range grid[1:] {
		t.Rows = append(t.Rows, report.TableRow{Cells: line, Status: report.StatusNeutral})
	}
	notes := seedtable.Footnotes(s)
	for _, src := range seedtable.Sources(tables) {
		notes = append(notes, "Source, "+src)
	}
	return report.Section{
		ID: "seed-table", Title: "The article's table, measured",
		Intro: "The source article ends with a table comparing Redlock and ZooKeeper. Here every backend's column is measured on this machine " +
			"(the numbered notes say how); n/a says why a cell does not apply. The last two rows are documented facts with their sources.",
		Table: t, Notes: notes,
	}
}
