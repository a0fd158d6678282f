package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/internal/stack/netns"
)

// The TestChaosPartition* tests run the partition scenarios with the real
// binary in a network of namespaces they build and remove (root, iproute2
// and nftables, which netns.EnsureTools installs); they use no server of
// the shared stack, only the Debian packages it installs.

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
	pgBin, err := stack.PGBinDir()
	if err != nil {
		t.Fatal(err)
	}
	need := []string{"setpriv", filepath.Join(pgBin, "initdb"), filepath.Join(pgBin, "postgres")}
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
func ownNamespaces() ([]string, error) {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	// Names carry the owner's PID right after the prefix (netns.WithPrefix).
	mine := fmt.Sprintf("%s%d.", netPrefix, os.Getpid())
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), mine) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// TestChaosPartitionHolderFencingOn cuts a Redis holder off mid-stall: its
// watchdog goes on renewing in vain (the stall alone would not end the
// lease: X-Chaos-Stall keeps the watchdog, and without the cut it renews),
// the key expires, another instance takes the lock, and the late write is
// refused.
func TestChaosPartitionHolderFencingOn(t *testing.T) {
	r := chaosTest(t, "partition-holder", "redis", "on")
	requirePartitionBit(t, r)
}

func TestChaosPartitionHolderFencingOff(t *testing.T) {
	r := chaosTest(t, "partition-holder", "redis", "off")
	requirePass(t, r)
	if r.Units.Oversold+r.Units.Lost == 0 {
		t.Fatal("fencing off: no unit oversold or lost")
	}
}

// TestChaosPartitionHolderEtcd: the same cut ends an etcd holder's session
// (its keepalives go unanswered and its lease expires on the cluster).
func TestChaosPartitionHolderEtcd(t *testing.T) {
	requirePartitionBit(t, chaosTest(t, "partition-holder", "etcd", "on"))
}

// requirePartitionBit: a fenced partition-holder run passed, refused the
// late write, and its victim saw its lease lost.
func requirePartitionBit(t *testing.T, r Run) {
	t.Helper()
	requirePass(t, r)
	if r.StaleWritesRejected < 1 || r.Metrics[metricVictimLeasesLost] < 1 {
		t.Fatalf("stale writes rejected %d, leases the victim saw lost %v; want both >= 1",
			r.StaleWritesRejected, r.Metrics[metricVictimLeasesLost])
	}
}

func TestChaosPartitionLockMinority(t *testing.T) {
	r := chaosTest(t, "partition-lock-minority", "redlock", "on")
	requirePass(t, r)
	if r.Units.Oversold != 0 || r.Fault.ReservedDuring == 0 {
		t.Fatalf("%d oversold, %d orders reserved while 2 of 5 masters were cut off", r.Units.Oversold, r.Fault.ReservedDuring)
	}
}

func TestChaosPartitionZKLeader(t *testing.T) {
	r := chaosTest(t, "partition-zk-leader", "zookeeper", "on")
	requirePass(t, r)
	if r.Units.Oversold != 0 || r.Units.Lost != 0 || r.Fault.ReservedDuring == 0 || r.RecoveryMs == nil {
		t.Fatalf("%d oversold, %d lost, %d reserved while the leader was cut off, recovery %v",
			r.Units.Oversold, r.Units.Lost, r.Fault.ReservedDuring, r.RecoveryMs)
	}
}
