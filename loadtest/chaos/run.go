package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stockguard/stockguard/loadtest/progress"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/run"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// What a run must show, by scenario and fencing mode.
const (
	ExpectSafe   = "safe"   // fencing on: 0 oversold, 0 lost, the sources agree
	ExpectDamage = "damage" // fencing off, a race scenario: oversold or lost > 0
	ExpectReport = "report" // fencing off, a fault the lock alone survives: damage possible, not required
)

// Run is one scenario run with one backend and fencing mode.
type Run struct {
	Scenario  string `json:"scenario"`
	Backend   string `json:"backend"`
	Fencing   string `json:"fencing"`
	Instances int    `json:"instances"`
	// LockTTL is the instances' --lock-ttl; a zookeeper lease lasts as long
	// as its session instead (4s).
	LockTTL string `json:"lock_ttl"`
	// Setup is how the instances were started: flags and the whole
	// environment they were given, secrets redacted.
	Setup     *report.InstanceSetup `json:"setup,omitempty"`
	Expect    string                `json:"expect"`
	StartedAt time.Time             `json:"started_at"`
	// DurationS is how long the order load ran.
	DurationS float64           `json:"duration_s"`
	Orders    tally.OrderCounts `json:"orders"`
	Units     tally.UnitCounts  `json:"units"`
	// StaleWritesRejected is stockguard_stale_fence_total summed over the
	// instances: writes the store refused because a newer lease had claimed
	// the row. Orders.StaleFence counts the 409 answers clients got.
	StaleWritesRejected int64        `json:"stale_writes_rejected"`
	Fault               FaultFigures `json:"fault"`
	// RecoveryMs is the time from the fault's healing to the first 201 from
	// an affected instance; null if none came.
	RecoveryMs *float64 `json:"recovery_ms"`
	// LongestGapMs is the longest stretch of the load without a single 201.
	LongestGapMs float64              `json:"longest_success_gap_ms"`
	LatencyMs    tally.LatencySummary `json:"latency_ms"`
	Metrics      map[string]float64   `json:"metrics"`
	Events       []Event              `json:"events"`
	BucketMs     int                  `json:"bucket_ms"`
	Timeline     []Bucket             `json:"timeline"`
	// SellOutUnits were ordered after the load to empty the shelf (see
	// Config.SellOut).
	SellOutUnits int64            `json:"sell_out_units"`
	Verification run.Verification `json:"verification"`
	Verdict      string           `json:"verdict"`
	Pass         bool             `json:"pass"`
	// Status is the run's outcome in a word, as the table's verdict and
	// the report's colour give it: safe, expected-unsafe, unsafe (failed
	// with damage where none was allowed), failed (failed without such
	// damage: the fault or race not shown, outcomes unknown, 500s) or
	// error (did not complete).
	Status   string   `json:"status"`
	Failures []string `json:"failures,omitempty"`
	Error    string   `json:"error,omitempty"`
	Notes    []string `json:"notes,omitempty"`
	Logs     string   `json:"logs,omitempty"`
	// History is the history checker's verdict, for the scenarios whose
	// clients record every request and answer.
	History *HistoryCheck `json:"history,omitempty"`
}

// FaultFigures are the answers to orders sent while a fault was in force
// and answered before it healed (orders already under way when it began do
// not count).
type FaultFigures struct {
	FaultAtMs *float64 `json:"fault_at_ms"`
	HealAtMs  *float64 `json:"heal_at_ms"`
	// WindowsMs are the spans [from, to] in which a fault was in force
	// (partition-zk-leader: from the majority's election to the heal).
	WindowsMs             [][2]float64 `json:"windows_ms"`
	ReservedDuring        int          `json:"reserved_during"`
	LockUnavailableDuring int          `json:"lock_unavailable_during"`
	StaleFenceDuring      int          `json:"stale_fence_during"`
}

// Bucket counts the answers received in one slice of the timeline.
type Bucket struct {
	AtMs            int `json:"at_ms"`
	Reserved        int `json:"reserved"`
	StaleFence      int `json:"stale_fence"`
	LockUnavailable int `json:"lock_unavailable"`
	Insufficient    int `json:"insufficient"`
	Other           int `json:"other"`
}

func (p chaosPlan) expect() string {
	switch {
	case p.fencing == "on":
		return ExpectSafe
	case p.sc.DamageUnfenced:
		return ExpectDamage
	}
	return ExpectReport
}

// runOne makes one run and judges it; every failure is recorded in the run.
func (cc Config) runOne(ctx context.Context, p chaosPlan, root string, prog *progress.Bar) Run {
	defer trackRun(ctx)() // until the teardown is over (see InterruptGuard)
	run := Run{Scenario: p.sc.Name, Backend: p.backend, Fencing: p.fencing, Instances: cc.Instances,
		LockTTL: p.sc.lockTTL(cc).String(), Expect: p.expect(), Metrics: map[string]float64{}, Events: []Event{}}
	if p.backend == "zookeeper" {
		run.LockTTL = "session " + zkSessionTimeout.String()
	}
	dir := filepath.Join(root, strings.ReplaceAll(p.name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		run.Error = err.Error()
		run.judge(p.sc)
		return run
	}
	run.Logs = dir
	e := newChaosEnv(cc, p, dir, prog)
	err := e.execute(ctx, &run)
	setup := e.opts.Setup() // after execute: it points the options at the run's own servers
	run.Setup = &setup
	// The final state is read once no instance can write any more, while
	// the servers still run.
	run.Notes = append(run.Notes, e.stopInstances()...)
	if p.sc.finish != nil {
		p.sc.finish(ctx, e, &run)
	}
	run.Notes = append(run.Notes, e.teardown()...)
	if err != nil {
		run.Error = err.Error()
	}
	run.Verdict = chaosVerdict(&run)
	run.judge(p.sc)
	return run
}

// execute sets the run up, runs the load with the fault in it, and
// measures: on loopback with the scenario's servers, or, for a scenario
// that partitions, inside a network of its own (netenv.go), which
// teardown removes with every process in it.
func (e *chaosEnv) execute(ctx context.Context, out *Run) error {
	runID := run.NewRunID()
	if err := e.start(ctx, runID); err != nil {
		return err
	}
	// Counters from before the load (creating the SKUs) are not the run's.
	baseline, err := e.scrape(ctx)
	if err != nil {
		out.Notes = append(out.Notes, "metrics before the load: "+err.Error())
	}
	victimBase, victimBaseRead := baseline[e.victim()][metricLockLeasesL]
	e.victimLost = victimBase
	out.StartedAt = time.Now().UTC()
	e.load.run(ctx, e.cc.Concurrency, e.cc.Seed)
	run.Sleep(ctx, e.cc.Warmup)
	faultErr := e.plan.sc.fault(ctx, e)
	if faultErr != nil {
		e.event(EventNote, "fault injection failed: %v", faultErr)
		e.thawAll()
		if e.net != nil {
			if herr := e.net.topo.Heal(context.WithoutCancel(ctx)); herr != nil {
				e.event(EventNote, "heal after the failed fault: %v", herr)
			}
		}
	}
	// The load runs for Duration at least, and after the last event for
	// Recovery and for a lock wait and a lock TTL at least, so that the
	// time to recover can be seen: the orders queued during the fault hold
	// every client for up to a lock wait after it, and the leases of
	// sessions the fault ended (an etcd election takes them all) may stand
	// a TTL more before the cluster expires them.
	after := max(e.cc.Recovery, e.cc.LockWait+e.cc.LockTTL)
	run.Sleep(ctx, max(e.cc.Duration, e.lastEventAt()+after)-e.load.since())
	e.bg.Wait() // bounded: each background step gives up on its own
	run.Sleep(ctx, e.lastEventAt()+300*time.Millisecond-e.load.since())
	e.load.stop()
	loadFor := e.load.since()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted: %w", err)
	}
	out.Orders.Reconciled, out.Orders.Unresolved = e.load.reconcile(ctx)
	if e.cc.SellOut {
		units, err := e.load.sellOut(ctx)
		out.SellOutUnits = units
		if err != nil {
			out.Notes = append(out.Notes, err.Error())
		}
	}
	v, err := e.load.verify(ctx, e.cc.Stock, e.plan.fencing == "on")
	if err != nil {
		return err
	}
	v.Unresolved = out.Orders.Unresolved // units of those may be what the receipts lack
	each, err := e.scrape(ctx)
	if err != nil {
		out.Notes = append(out.Notes, "metrics: "+err.Error())
	}
	total := map[string]float64{}
	for i := range each {
		var before map[string]float64 // none for an instance the fault added
		if i < len(baseline) {
			before = baseline[i]
		}
		for k, x := range each[i] {
			total[k] += x - before[k]
		}
	}
	e.fill(out, v, total, loadFor)
	if e.net != nil {
		// A failed scrape (either one) leaves the count unknown, not
		// negative: without it the run never shows its fault.
		if lost, read := each[e.victim()][metricLockLeasesL]; read && victimBaseRead {
			out.Metrics[metricVictimLeasesLost] = lost - e.victimLost
		}
	}
	if faultErr != nil {
		return fmt.Errorf("fault: %w", faultErr)
	}
	return nil
}

// start brings up the run's servers and instances and creates its SKUs.
func (e *chaosEnv) start(ctx context.Context, runID string) error {
	if e.plan.sc.net {
		rig, err := startNet(ctx, e, runID)
		e.net = rig // teardown closes even a partial rig
		if err != nil {
			return fmt.Errorf("start the network: %w", err)
		}
		return nil
	}
	setup := e.plan.sc.setup
	if setup == nil {
		setup = func(ctx context.Context, e *chaosEnv) error { return e.startServers(ctx) }
	}
	if err := setup(ctx, e); err != nil {
		return fmt.Errorf("start lock servers: %w", err)
	}
	if err := e.startInstances(ctx, runID); err != nil {
		return fmt.Errorf("start instances: %w", err)
	}
	return nil
}

// lastEventAt is when the last timeline event happened.
func (e *chaosEnv) lastEventAt() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.events) == 0 {
		return 0
	}
	return time.Duration(e.events[len(e.events)-1].AtMs * float64(time.Millisecond))
}

// chaosVerdict is the run's outcome in one line.
func chaosVerdict(r *Run) string {
	if r.Error != "" && r.Orders.Sent == 0 {
		return "ERROR: " + firstLine(r.Error)
	}
	stale := fmt.Sprintf("%d stale writes rejected", r.StaleWritesRejected)
	var s string
	switch {
	case r.Verification.Safe():
		s = "safe: 0 oversold, 0 lost; " + stale
	case !r.Verification.Damaged():
		s = run.VerdictText(r.Verification) + "; " + stale
	case r.Units.Oversold == 0 && r.Units.Lost == 0:
		s = fmt.Sprintf("UNSAFE: 0 oversold, 0 lost, but %d disagreements between sources", r.Verification.DisagreementCount)
	default:
		s = fmt.Sprintf("UNSAFE: %d units oversold, %d lost", r.Units.Oversold, r.Units.Lost)
	}
	if r.History.violated() {
		s = fmt.Sprintf("UNSAFE: the history checker found %d violations; ", len(r.History.Violations)) + s
	}
	if r.Error != "" {
		s += " (" + firstLine(r.Error) + ")"
	}
	return s
}

// Run.Status values.
const (
	StatusSafe           = "safe"            // passed, nothing oversold or lost
	StatusExpectedUnsafe = "expected-unsafe" // passed with the damage fencing off may or must show
	StatusUnsafe         = "unsafe"          // failed, with damage where none was allowed
	StatusFailed         = "failed"          // failed without such damage: not exercised, unknown outcomes, 500s
	StatusError          = "error"           // did not complete
)

// judge lists what the run failed to show, given what it had to: in every
// mode that its fault happened (sc.exercised) and that the promises the
// fence plays no part in held (sc.always, the history's fence-free rules),
// fenced that it was safe (sc.check and the verification), unfenced in a
// race scenario the damage.
func (r *Run) judge(sc *scenario) {
	var f []string
	if r.Error != "" {
		f = append(f, "did not complete: "+firstLine(r.Error))
	}
	if r.Error == "" && sc.exercised != nil {
		f = append(f, sc.exercised(r)...)
	}
	if r.Error == "" && sc.always != nil {
		f = append(f, sc.always(r)...)
	}
	damage := r.Units.Oversold + r.Units.Lost
	switch r.Expect {
	case ExpectSafe:
		switch {
		case damage > 0:
			f = append(f, fmt.Sprintf("fencing on, yet %d units oversold and %d lost", r.Units.Oversold, r.Units.Lost))
		case r.Verification.DisagreementCount > 0:
			f = append(f, fmt.Sprintf("fencing on, yet %d disagreements between ledger, audit and counters", r.Verification.DisagreementCount))
		}
		if r.Orders.Unresolved > 0 {
			f = append(f, fmt.Sprintf("%d orders whose outcome stayed unknown", r.Orders.Unresolved))
		}
		if r.Error == "" && sc.check != nil {
			f = append(f, sc.check(r)...)
		}
	case ExpectDamage:
		if r.Error == "" && damage == 0 && !r.History.violated() {
			f = append(f, "fencing off, yet 0 oversold and 0 lost: the scenario did not exercise the race")
		}
	}
	f = append(f, r.History.failures(r.Expect)...)
	r.Failures = f
	r.Pass = len(f) == 0
	r.Status = runStatus(r)
}

// runStatus is r's Status, once judged.
func runStatus(r *Run) string {
	switch {
	case !r.Pass && r.unsafe():
		return StatusUnsafe
	case r.Error != "":
		return StatusError
	case !r.Pass:
		return StatusFailed
	case r.Units.Oversold+r.Units.Lost > 0 || r.History.violated():
		return StatusExpectedUnsafe
	}
	return StatusSafe
}

// unsafe reports whether a run shows damage where none was allowed: in
// every mode a broken promise of the history (a key with two orders, a
// fence-free rule violated); in a run that had to be safe also units
// oversold or lost, sources that disagree, or any history violation.
func (r *Run) unsafe() bool {
	return r.History.promiseBroken() || r.Expect == ExpectSafe &&
		(r.Units.Oversold+r.Units.Lost > 0 || r.Verification.DisagreementCount > 0 || r.History.violated())
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
