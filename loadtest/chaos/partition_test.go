package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/stack/netns"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
	"github.com/stockguard/stockguard/loadtest/progress"
)

// The TestChaosPartition* tests run the partition scenarios with the real
// binary in a network of namespaces they build and remove (root, iproute2
// and nftables, which netns.EnsureTools installs); they use no server of
// the shared stack, only the Debian packages it installs. Together they
// take about a minute and a quarter: five runs, the CLI's phases shortened.

// partitionTest runs scenario once with backend and fencing and returns the
// run, failing the test if the run could not be made or left a namespace
// behind.
func partitionTest(t *testing.T, scenario, backend, fencing string) Run {
	t.Helper()
	if testing.Short() {
		t.Skip("chaos integration test; -short")
	}
	if os.Getenv(stacktest.EnvSkipIntegration) == "1" {
		t.Skipf("chaos integration test; %s=1", stacktest.EnvSkipIntegration)
	}
	requirePartitionTools(t, backend)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cc := DefaultConfig()
	cc.Scenarios, cc.Backends, cc.Fencing = []string{scenario}, []string{backend}, []string{fencing}
	cc.Bin = chaosStockguard(t)
	cc.Duration, cc.Warmup, cc.Recovery = 0, 800*time.Millisecond, 1500*time.Millisecond
	cc.Concurrency = 9
	cc.Seed = 20260101
	cc.LogDir = t.TempDir()
	cc.Progress = progress.Auto
	var out bytes.Buffer
	start := time.Now()
	res, err := Execute(ctx, cc, &syncWriter{w: &out})
	t.Logf("%s %s fencing %s took %v:\n%s", scenario, backend, fencing, time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if left := ownNamespaces(t); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	if len(res.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(res.Runs))
	}
	r := res.Runs[0]
	if r.Error != "" {
		chaosExplain(t, r)
		t.Fatalf("run failed: %s", r.Error)
	}
	return r
}

// requirePartitionTools fails, naming the command that installs it, when
// something the scenario starts is missing.
func requirePartitionTools(t *testing.T, backend string) {
	t.Helper()
	if err := netns.EnsureTools(t.Context()); err != nil {
		if errors.Is(err, netns.ErrNotRoot) {
			t.Fatalf("%v: network namespaces need root", err)
		}
		t.Fatalf("ip and nft: %v (apt-get install -y iproute2 nftables)", err)
	}
	need := []string{"setpriv", filepath.Join(pgBinDir, "initdb"), filepath.Join(pgBinDir, "postgres")}
	switch backend {
	case "zookeeper":
		need = append(need, "java", "/usr/share/java/zookeeper.jar")
	case "etcd":
		need = append(need, "etcd")
	default:
		need = append(need, "redis-server")
	}
	for _, n := range need {
		_, err := exec.LookPath(n)
		if filepath.IsAbs(n) {
			_, err = os.Stat(n) // a jar is a file, not a command
		}
		if err != nil {
			t.Fatalf("%s missing (%v): run bash scripts/stack.sh up, which installs the servers", n, err)
		}
	}
}

// ownNamespaces lists the namespaces this process's runs still own.
func ownNamespaces(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatalf("list namespaces: %v", err)
	}
	// Names carry the owner's PID right after the prefix (netns.WithPrefix).
	mine := fmt.Sprintf("%s%d.", netPrefix, os.Getpid())
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), mine) {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestChaosPartitionHolderFencingOn(t *testing.T) {
	r := partitionTest(t, "partition-holder", "redis", "on")
	requirePass(t, r)
	if r.StaleWritesRejected < 1 || r.Metrics[metricVictimLeasesLost] < 1 {
		t.Fatalf("stale writes rejected %d, leases the victim saw lost %v; want both >= 1",
			r.StaleWritesRejected, r.Metrics[metricVictimLeasesLost])
	}
}

// TestChaosPartitionHolderEtcd cuts an etcd holder off: its client's
// keepalives go unanswered, the session's lease expires on the cluster,
// another instance takes the lock, and the late write is refused. Fenced
// only, to keep the test short; the unfenced damage is the redis test's.
func TestChaosPartitionHolderEtcd(t *testing.T) {
	r := partitionTest(t, "partition-holder", "etcd", "on")
	requirePass(t, r)
	if r.StaleWritesRejected < 1 || r.Metrics[metricVictimLeasesLost] < 1 {
		t.Fatalf("stale writes rejected %d, leases the victim saw lost %v; want both >= 1",
			r.StaleWritesRejected, r.Metrics[metricVictimLeasesLost])
	}
}

func TestChaosPartitionHolderFencingOff(t *testing.T) {
	r := partitionTest(t, "partition-holder", "redis", "off")
	requirePass(t, r)
	if r.Units.Oversold+r.Units.Lost == 0 {
		t.Fatal("fencing off: no unit oversold or lost")
	}
}

func TestChaosPartitionLockMinority(t *testing.T) {
	r := partitionTest(t, "partition-lock-minority", "redlock", "on")
	requirePass(t, r)
	if r.Units.Oversold != 0 || r.Fault.ReservedDuring == 0 {
		t.Fatalf("%d oversold, %d orders reserved while 2 of 5 masters were cut off", r.Units.Oversold, r.Fault.ReservedDuring)
	}
}

func TestChaosPartitionZKLeader(t *testing.T) {
	r := partitionTest(t, "partition-zk-leader", "zookeeper", "on")
	requirePass(t, r)
	if r.Units.Oversold != 0 || r.Units.Lost != 0 || r.Fault.ReservedDuring == 0 || r.RecoveryMs == nil {
		t.Fatalf("%d oversold, %d lost, %d reserved while the leader was cut off, recovery %v",
			r.Units.Oversold, r.Units.Lost, r.Fault.ReservedDuring, r.RecoveryMs)
	}
}
