//go:build linux

package netns_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/stack/netns"
)

// Bounds of the tests' own waits.
const (
	readyTimeout = 10 * time.Second
	// cutTimeout is how long a dial across a partition gets before the test
	// calls it timed out; a reachable member answers in well under a
	// millisecond here.
	cutTimeout   = 300 * time.Millisecond
	pollInterval = 50 * time.Millisecond
	echoPort     = 7007
)

// testPrefix keeps this package's namespaces, and its Sweep, apart from
// every real run's.
const testPrefix = "sgnettest-"

// envEcho turns the test binary into a TCP echo server listening on the
// address it holds: the process the tests run inside a member.
const envEcho = "NETNS_TEST_ECHO_ADDR"

func TestMain(m *testing.M) {
	if addr := os.Getenv(envEcho); addr != "" {
		if err := echo(addr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if os.Geteuid() == 0 {
		// What an interrupted run left (a timeout's panic or a kill runs no
		// cleanup): namespaces whose owner is gone, their bridges and
		// nftables tables with them.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if removed, err := netns.Sweep(ctx, testPrefix); err != nil {
			fmt.Fprintln(os.Stderr, "netns: sweep:", err)
		} else if len(removed) > 0 {
			fmt.Fprintln(os.Stderr, "netns: swept what an interrupted run left:", removed)
		}
		cancel()
	}
	os.Exit(m.Run())
}

func echo(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

func newTopology(t *testing.T, names ...string) *netns.Topology {
	t.Helper()
	topo, err := netns.New(t.Context(), names, netns.WithPrefix(testPrefix))
	if err != nil {
		t.Fatalf("netns.New: %v", err)
	}
	t.Cleanup(func() {
		if err := topo.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return topo
}

// startEcho runs the echo server in member name and waits until member
// from reaches it.
func startEcho(t *testing.T, topo *netns.Topology, name, from string) (*netns.Process, string) {
	t.Helper()
	addr := fmt.Sprintf("%s:%d", topo.Member(name).Addr(), echoPort)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envEcho+"="+addr)
	cmd.Stderr = os.Stderr
	p, err := topo.Start(name, cmd)
	if err != nil {
		t.Fatalf("Start echo: %v", err)
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		err := roundTrip(t.Context(), topo.Member(from), addr)
		if err == nil {
			return p, addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("echo in %s not reachable from %s within %v: %v", name, from, readyTimeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// roundTrip dials addr from member m and checks one echoed line.
func roundTrip(ctx context.Context, m *netns.Member, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, cutTimeout)
	defer cancel()
	c, err := m.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return fmt.Errorf("echo answered %q", line)
	}
	return nil
}

func mustTimeOut(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: reached across the partition", what)
	}
	var ne net.Error
	if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("%s: want a timeout (dropped packets), got %v", what, err)
	}
}

func TestPartitionAndHeal(t *testing.T) {
	topo := newTopology(t, "a", "b", "c")
	a, b, c := topo.Member("a"), topo.Member("b"), topo.Member("c")
	echoProc, addr := startEcho(t, topo, "a", "b")

	// The process runs inside a's namespace: same namespace inode.
	if got, want := nsInode(t, fmt.Sprintf("/proc/%d/ns/net", echoProc.PID())), nsInode(t, "/run/netns/"+a.Namespace()); got != want {
		t.Fatalf("echo (pid %d) in namespace %d, want a's %d", echoProc.PID(), got, want)
	}

	ctx := t.Context()
	if err := topo.Partition(ctx, []string{"a"}, []string{"b"}); err != nil {
		t.Fatalf("Partition: %v", err)
	}
	mustTimeOut(t, roundTrip(ctx, b, addr), "b→a while partitioned")
	if err := roundTrip(ctx, c, addr); err != nil {
		t.Fatalf("c→a, outside the partition: %v", err)
	}
	if err := topo.Heal(ctx); err != nil {
		t.Fatalf("Heal: %v", err)
	}
	if err := roundTrip(ctx, b, addr); err != nil {
		t.Fatalf("b→a after heal: %v", err)
	}

	if err := topo.Isolate(ctx, "a"); err != nil {
		t.Fatalf("Isolate: %v", err)
	}
	mustTimeOut(t, roundTrip(ctx, c, addr), "c→a while a is isolated")
	if err := topo.Heal(ctx); err != nil {
		t.Fatalf("Heal: %v", err)
	}

	if err := echoProc.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	select {
	case <-echoProc.Done():
	default:
		t.Fatal("Done not closed after Kill")
	}
	if err := roundTrip(ctx, b, addr); err == nil {
		t.Fatal("echo still answers after Kill")
	}
}

func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

// hostState is what a topology must never change on the host.
func hostState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, args := range [][]string{
		{"nft", "list", "ruleset"},
		{"ip", "route", "show", "table", "all"},
		{"ip", "-o", "link", "show"},
		{"ip", "-o", "addr", "show"},
	} {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		fmt.Fprintf(&b, "$ %s\n%s", strings.Join(args, " "), out)
	}
	return b.String()
}

func TestHostUntouched(t *testing.T) {
	if err := netns.EnsureTools(t.Context()); err != nil {
		t.Fatal(err)
	}
	before := hostState(t)
	ctx := t.Context()
	topo, err := netns.New(ctx, []string{"a", "b"}, netns.WithPrefix(testPrefix))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = topo.Close() })
	if err := topo.Partition(ctx, []string{"a"}, []string{"b"}); err != nil {
		t.Fatalf("Partition: %v", err)
	}
	if during := hostState(t); during != before {
		t.Fatalf("host changed while partitioned:\nbefore:\n%s\nduring:\n%s", before, during)
	}
	names := topo.Namespaces()
	dir, err := topo.TempDir("scratch")
	if err != nil {
		t.Fatalf("TempDir: %v", err)
	}
	if err := topo.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp dir %s still there after Close (stat: %v)", dir, err)
	}
	if err := topo.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if after := hostState(t); after != before {
		t.Fatalf("host changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	for _, n := range names {
		if _, err := os.Stat("/run/netns/" + n); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s still there after Close (stat: %v)", n, err)
		}
	}
	if err := topo.Heal(ctx); err == nil {
		t.Error("Heal after Close succeeded")
	}
}

func TestSweepRemovesOnlyDeadRuns(t *testing.T) {
	live := newTopology(t, "a")
	liveDir, err := live.TempDir("pg")
	if err != nil {
		t.Fatalf("TempDir: %v", err)
	}
	// Our own PID with a start time that is not ours: an owner that is no
	// longer running, like a crashed earlier run whose PID was reused.
	dead := fmt.Sprintf("%s%d.0.deadbeef-a", testPrefix, os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", dead).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", dead).Run() })
	// The dead run's scratch directory, with a file in a subdirectory, as
	// a server's data directory would leave it.
	deadDir := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d.0.deadbeef-pg", testPrefix, os.Getpid()))
	if err := os.MkdirAll(filepath.Join(deadDir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(deadDir) })
	if err := os.WriteFile(filepath.Join(deadDir, "data", "PG_VERSION"), []byte("15\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A leftover process inside the dead run's namespace goes too.
	sleeper := exec.Command("ip", "netns", "exec", dead, "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatalf("start sleeper: %v", err)
	}
	sleeperDone := make(chan error, 1)
	go func() { sleeperDone <- sleeper.Wait() }()
	// Sweep kills what `ip netns pids` lists: wait until the sleeper has
	// entered the namespace, or a sweep that ran first (a loaded machine)
	// would find it empty and leave the sleeper to enter it afterwards.
	deadline := time.Now().Add(readyTimeout)
	for {
		out, _ := exec.Command("ip", "netns", "pids", dead).Output()
		if strings.TrimSpace(string(out)) != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sleeper never entered the dead run's namespace")
		}
		time.Sleep(10 * time.Millisecond)
	}

	removed, err := netns.Sweep(t.Context(), testPrefix)
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	// An earlier run of this package that was killed (SIGKILL, a -timeout
	// panic: no Cleanup ran) left namespaces a sweep rightly removes too:
	// what matters is that both of the dead run's go and none of the live
	// run's.
	if !slices.Contains(removed, dead) || !slices.Contains(removed, deadDir) {
		t.Fatalf("Sweep removed %v, want %s and %s among them", removed, dead, deadDir)
	}
	for _, r := range removed {
		if r == liveDir || slices.Contains(live.Namespaces(), r) {
			t.Fatalf("Sweep removed the live run's %s", r)
		}
	}
	if _, err := os.Stat(deadDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead run's scratch directory is still there (stat: %v)", err)
	}
	if _, err := os.Stat(liveDir); err != nil {
		t.Errorf("Sweep touched the live run's scratch directory: %v", err)
	}
	select {
	case <-sleeperDone:
	case <-time.After(readyTimeout):
		t.Fatal("process in the swept namespace still running")
	}
	for _, n := range live.Namespaces() {
		if _, err := os.Stat("/run/netns/" + n); err != nil {
			t.Errorf("Sweep touched the live run's %s: %v", n, err)
		}
	}
}

func TestNewRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names []string
	}{
		{"no members", nil},
		{"duplicate", []string{"a", "a"}},
		{"reserved", []string{"bridge"}},
		{"bad characters", []string{"a/b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if topo, err := netns.New(t.Context(), tc.names, netns.WithPrefix(testPrefix)); err == nil {
				_ = topo.Close()
				t.Fatalf("New(%q) succeeded", tc.names)
			}
		})
	}
}
