package chaos

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
	"github.com/stockguard/stockguard/loadtest/procs"
	"github.com/stockguard/stockguard/loadtest/progress"
)

// The TestChaos* integration tests run one scenario each with the real
// binary, their own lock servers (internal/stack) and a fresh database on
// the shared Postgres. Each is bounded to well under 30 s; the phases are
// shortened from the CLI's defaults, not the faults themselves.

// chaosBin is ./cmd/stockguard, built once for all chaos tests of this test
// binary and removed by TestMain (main_test.go).
var chaosBin struct {
	once      sync.Once
	dir, path string
	err       error
}

func chaosStockguard(t *testing.T) string {
	t.Helper()
	chaosBin.once.Do(func() {
		chaosBin.dir, chaosBin.err = os.MkdirTemp("", "stockguard-chaos-bin-")
		if chaosBin.err != nil {
			return
		}
		chaosBin.path = filepath.Join(chaosBin.dir, "stockguard")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", chaosBin.path, "./cmd/stockguard")
		cmd.Dir = "../.." // the module root
		if out, err := cmd.CombinedOutput(); err != nil {
			chaosBin.err = &buildError{err: err, out: out}
		}
	})
	if chaosBin.err != nil {
		t.Fatalf("go build ./cmd/stockguard: %v", chaosBin.err)
	}
	return chaosBin.path
}

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + string(e.out) }

// chaosTest runs one scenario with one backend and fencing mode, the
// config changed by mods, and returns its run; it runs in parallel with the
// other chaos tests (each run has servers, ports, namespaces and a database
// of its own). It fails the test if the run could not be made or, for a
// scenario that builds its own network, left a namespace behind (which
// TestMain checks once all have run: they run in parallel); whether the
// run passed is for the caller to check, with chaosExplain on failure.
func chaosTest(t *testing.T, scenario, backend, fencing string, mods ...func(*Config)) Run {
	t.Helper()
	if testing.Short() {
		t.Skip("chaos integration test; -short")
	}
	sc := scenarioByName(scenario)
	if sc == nil {
		t.Fatalf("no scenario %q", scenario)
	}
	if sc.net && os.Getenv(stacktest.EnvSkipIntegration) == "1" {
		t.Skipf("chaos integration test; %s=1", stacktest.EnvSkipIntegration)
	}
	t.Parallel()
	cc := DefaultConfig()
	cc.Scenarios, cc.Backends, cc.Fencing = []string{scenario}, []string{backend}, []string{fencing}
	cc.Bin = chaosStockguard(t)
	switch {
	case sc.net:
		// Its own servers inside its own network: only the Debian packages
		// the stack installs are needed.
		requirePartitionTools(t, backend)
	case backend == "redis" || backend == "redlock":
		stacktest.RequireRedis(t) // redis-server installed and the stack up, or skip/fail as the stack says
	case backend == "zookeeper":
		stacktest.RequireZK(t)
	case backend == "etcd":
		stacktest.RequireEtcd(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if !sc.net {
		cc.DatabaseURL = stacktest.NewDatabase(t, ctx)
	}
	cc.Duration, cc.Warmup, cc.Recovery = 0, 800*time.Millisecond, 1500*time.Millisecond
	cc.Concurrency = 9
	cc.Seed = 20260101
	cc.LogDir = t.TempDir()
	cc.Progress = progress.Auto // not a terminal: a line per event, for the test log
	for _, m := range mods {
		m(&cc)
	}
	var progress bytes.Buffer
	start := time.Now()
	res, err := Execute(ctx, cc, &syncWriter{w: &progress})
	t.Logf("%s %s fencing %s took %v:\n%s", scenario, backend, fencing, time.Since(start).Round(time.Millisecond), progress.String())
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if len(res.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(res.Runs))
	}
	r := res.Runs[0]
	var table bytes.Buffer
	PrintTable(&table, res)
	t.Logf("\n%s", table.String())
	if r.Error != "" {
		chaosExplain(t, r)
		t.Fatalf("run failed: %s", r.Error)
	}
	return r
}

// chaosExplain logs what a failed run saw: its events and the tails of the
// instance logs.
func chaosExplain(t *testing.T, r Run) {
	t.Helper()
	for _, ev := range r.Events {
		t.Logf("  +%.2fs %s: %s", ev.AtMs/1000, ev.Kind, ev.What)
	}
	t.Logf("figures: orders %+v units %+v fault %+v metrics %v", r.Orders, r.Units, r.Fault, r.Metrics)
	for i, d := range r.Verification.Disagreements {
		if i == 5 {
			break
		}
		t.Logf("  disagreement %s %s: %s", d.SKU, d.Kind, d.Detail)
	}
	logs, _ := filepath.Glob(filepath.Join(r.Logs, "*.log"))
	for _, l := range logs {
		t.Logf("%s:\n%s", filepath.Base(l), procs.Tail(l, 15))
	}
}

// syncWriter serializes writes from the progress goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func requirePass(t *testing.T, r Run) {
	t.Helper()
	if !r.Pass {
		chaosExplain(t, r)
		t.Fatalf("run did not show what it must: %v", r.Failures)
	}
}

func TestChaosPauseHolderFencingOn(t *testing.T) {
	r := chaosTest(t, "pause-holder", "redis", "on")
	requirePass(t, r)
	if r.Units.Oversold != 0 || r.Units.Lost != 0 {
		t.Fatalf("fencing on: %d oversold, %d lost", r.Units.Oversold, r.Units.Lost)
	}
	if r.StaleWritesRejected < 1 {
		t.Fatalf("stockguard_stale_fence_total = %d, want >= 1 (409 answers: %d)", r.StaleWritesRejected, r.Orders.StaleFence)
	}
}

func TestChaosPauseHolderFencingOff(t *testing.T) {
	r := chaosTest(t, "pause-holder", "redis", "off")
	requirePass(t, r)
	if r.Units.Oversold+r.Units.Lost == 0 {
		t.Fatal("fencing off: no unit oversold or lost")
	}
}

func TestChaosKillRedisMinority(t *testing.T) {
	r := chaosTest(t, "kill-redis-minority", "redlock", "on")
	requirePass(t, r)
	if r.Units.Oversold != 0 || r.Fault.ReservedDuring == 0 {
		t.Fatalf("%d oversold, %d orders reserved while 2 of 5 masters were down", r.Units.Oversold, r.Fault.ReservedDuring)
	}
}

func TestChaosKillRedisMajority(t *testing.T) {
	r := chaosTest(t, "kill-redis-majority", "redlock", "on")
	requirePass(t, r)
	if r.Units.Oversold != 0 || r.Fault.LockUnavailableDuring == 0 || r.RecoveryMs == nil {
		t.Fatalf("%d oversold, %d 503s while 3 of 5 masters were down, recovery %v",
			r.Units.Oversold, r.Fault.LockUnavailableDuring, r.RecoveryMs)
	}
	t.Logf("recovered %.0f ms after the restart", *r.RecoveryMs)
}

func TestChaosKillZKNode(t *testing.T) {
	r := chaosTest(t, "kill-zk-node", "zookeeper", "on")
	requirePass(t, r)
	if r.Units.Oversold != 0 || r.Units.Lost != 0 || r.RecoveryMs == nil {
		t.Fatalf("%d oversold, %d lost, recovery %v", r.Units.Oversold, r.Units.Lost, r.RecoveryMs)
	}
}

func TestChaosZKSessionExpiry(t *testing.T) {
	r := chaosTest(t, "zk-session-expiry", "zookeeper", "on")
	requirePass(t, r)
	if r.Units.Oversold != 0 || r.Units.Lost != 0 || r.Metrics[metricZKSessLost] < 1 {
		t.Fatalf("%d oversold, %d lost, sessions lost %v", r.Units.Oversold, r.Units.Lost, r.Metrics[metricZKSessLost])
	}
}

func TestChaosZKSessionExpiryFencingOff(t *testing.T) {
	r := chaosTest(t, "zk-session-expiry", "zookeeper", "off")
	requirePass(t, r)
	if r.Units.Oversold+r.Units.Lost == 0 {
		t.Fatal("fencing off: no unit oversold or lost after the session expired")
	}
}

// TestChaosRedisFailoverFencingOn is the replica race: the promoted replica
// issues tokens at or below the stalled holder's, and the store refuses the
// writes made under them.
func TestChaosRedisFailoverFencingOn(t *testing.T) {
	r := chaosTest(t, "redis-failover", "redis", "on")
	requirePass(t, r)
	if r.Units.Oversold != 0 || r.Units.Lost != 0 || r.StaleWritesRejected < 1 {
		t.Fatalf("%d oversold, %d lost, %d stale writes rejected", r.Units.Oversold, r.Units.Lost, r.StaleWritesRejected)
	}
}

func TestChaosRedisFailoverFencingOff(t *testing.T) {
	r := chaosTest(t, "redis-failover", "redis", "off")
	requirePass(t, r)
	if r.Units.Oversold+r.Units.Lost == 0 {
		t.Fatal("fencing off: no unit oversold or lost after the failover")
	}
}
