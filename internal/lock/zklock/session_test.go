package zklock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/stack"
)

// TestExpiryLosesLease expires a holder's session from outside and checks
// that the lease says so at once, that the key is free, and that the
// Locker's next acquisition, in a new session, gets a larger token.
func TestExpiryLosesLease(t *testing.T) {
	servers := sharedZK(t)
	reg := prometheus.NewRegistry()
	l := mustLocker(t, servers, WithRegisterer(reg))
	other := mustLocker(t, servers)
	k := key(t)
	lease := mustAcquire(t, l, k)

	expireLocker(t, servers, l)
	select {
	case <-lease.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed 5 s after the session was expired")
	}
	if !errors.Is(lease.Err(), lock.ErrLeaseLost) {
		t.Fatalf("Err() = %v, want ErrLeaseLost", lease.Err())
	}
	// The lease goes at the disconnect; the session when the reconnection
	// learns it expired.
	waitFor(t, 5*time.Second, "session given up", func() bool {
		return counter(t, reg, "stockguard_zk_sessions_lost_total") == 1
	})
	if got := counter(t, reg, "stockguard_lock_leases_lost_total"); got != 1 {
		t.Errorf("leases lost = %v, want 1", got)
	}
	// The servers deleted the node with the session: the key is free. (A
	// blocking acquire: TryOnce on another server could still see the node
	// for the moment that server lags the leader.)
	taken := mustAcquire(t, other, k)
	if taken.Token() <= lease.Token() {
		t.Fatalf("token after expiry %d <= expired holder's %d", taken.Token(), lease.Token())
	}
	mustRelease(t, taken)
	mustRelease(t, lease) // nothing to delete, must not fail

	again := mustAcquire(t, l, k)
	if again.Token() <= taken.Token() {
		t.Fatalf("token in the new session %d <= %d", again.Token(), taken.Token())
	}
	if err := l.Ping(context.Background()); err != nil {
		t.Fatalf("Ping in the new session: %v", err)
	}
	mustRelease(t, again)
}

// partition is a dialer that can cut every connection it made and refuse
// new ones, as a network partition between one client and the ensemble.
type partition struct {
	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

func (p *partition) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return nil, fmt.Errorf("dial %s: partitioned", addr)
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err == nil {
		p.conns = append(p.conns, c)
	}
	return c, err
}

func (p *partition) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *partition) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// TestPartitionLosesLease cuts a holder off the ensemble for good: Ping
// fails and the lease is lost at once (suspended), long before another
// client can take the key, which happens only once the servers expire the
// session.
func TestPartitionLosesLease(t *testing.T) {
	servers := sharedZK(t)
	const timeout = 1500 * time.Millisecond
	p := &partition{}
	l := mustLocker(t, servers, WithDialer(p.dial), WithSessionTimeout(timeout))
	other := mustLocker(t, servers)
	k := key(t)
	lease := mustAcquire(t, l, k)
	if err := l.Ping(context.Background()); err != nil {
		t.Fatalf("Ping before the cut: %v", err)
	}

	p.cut()
	cutAt := time.Now()
	waitFor(t, time.Second, "Ping failing while cut off", func() bool {
		return errors.Is(l.Ping(context.Background()), lock.ErrUnavailable)
	})
	// Meanwhile the servers still honour the session: the key stays held.
	if _, err := other.Acquire(context.Background(), k, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("key taken while its holder's session lives: %v", err)
	}
	select {
	case <-lease.Done():
	case <-time.After(500 * time.Millisecond):
		t.Fatal("lease not lost at the cut")
	}
	lostAfter := time.Since(cutAt)
	if !errors.Is(lease.Err(), lock.ErrLeaseLost) {
		t.Fatalf("Err() = %v, want ErrLeaseLost", lease.Err())
	}
	// The other client gets the key only once the servers expire the
	// session, after the holder already knew.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	next, err := other.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	takenAfter := time.Since(cutAt)
	t.Logf("lease lost %v after the cut, key taken by another client after %v", lostAfter, takenAfter)
	if takenAfter < lostAfter {
		t.Fatalf("key taken (%v) before the holder knew it lost it (%v)", takenAfter, lostAfter)
	}

	p.heal()
	mustRelease(t, next)
	again := mustAcquire(t, l, k)
	if again.Token() <= next.Token() {
		t.Fatalf("token after the partition %d <= %d", again.Token(), next.Token())
	}
	mustRelease(t, again)
}

// sessionID is the id of l's current session.
func sessionID(l *Locker) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur.conn.SessionID()
}

// TestPingUnavailable points a Locker at a port where nothing listens.
func TestPingUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	l := mustLocker(t, []string{addr})
	if err := l.Ping(context.Background()); !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("Ping with no server = %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = l.Acquire(ctx, "sku-1")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("Acquire with no server = %v, want DeadlineExceeded and ErrUnavailable", err)
	}
}

// holderEnv tells the test binary, run again as a child by
// TestProcessDeath, to take a lock, say so, and wait to be killed.
const holderEnv = "STOCKGUARD_ZK_TEST_HOLDER"

func TestMain(m *testing.M) {
	if k := os.Getenv(holderEnv); k != "" {
		os.Exit(holdUntilKilled(k))
	}
	os.Exit(m.Run())
}

func holdUntilKilled(k string) int {
	l, err := New(stack.ZKServers(), WithRoot(testRoot), WithSessionTimeout(time.Second))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx, k)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Printf("held %d\n", lease.Token())
	time.Sleep(time.Minute)
	return 1
}

// TestProcessDeath kills a process holding a lock: its node goes with its
// session, and another client takes the key with a larger token.
func TestProcessDeath(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	k := key(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), holderEnv+"="+k)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "held ") {
		t.Fatalf("child: %q, %v", line, err)
	}
	var childToken lock.Token
	if _, err := fmt.Sscanf(line, "held %d", &childToken); err != nil {
		t.Fatalf("child said %q: %v", line, err)
	}
	if names := children(t, insp, k); len(names) != 1 {
		t.Fatalf("children while the child holds: %v", names)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitFor(t, 5*time.Second, "dead holder's node gone", func() bool { return len(children(t, insp, k)) == 0 })
	l := mustLocker(t, servers)
	lease := mustAcquire(t, l, k)
	if lease.Token() <= childToken {
		t.Fatalf("token %d after the dead holder's %d", lease.Token(), childToken)
	}
	mustRelease(t, lease)
}

// breakingDialer's connections fail their next write once armed, closing
// the socket as a dropped connection does: go-zookeeper then hands that
// write's own error (a *net.OpError) to the request, not
// ErrConnectionClosed.
type breakingDialer struct{ armed atomic.Bool }

func (d *breakingDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &breakingConn{Conn: c, d: d}, nil
}

type breakingConn struct {
	net.Conn
	d *breakingDialer
}

func (c *breakingConn) Write(b []byte) (int, error) {
	if c.d.armed.CompareAndSwap(true, false) {
		_ = c.Conn.Close()
	}
	return c.Conn.Write(b)
}

// TestFailedWriteIsALostResponse: a request whose write fails as the
// connection drops gets the socket's error from go-zookeeper, and that is a
// lost response (retried once the session reconnects, a create recovered
// by its uuid), not the backend being unavailable; end to end, a TryOnce
// across such a write obtains its key. (TestDisconnectLosesLease's waiter
// once met this in CI as "backend unavailable: write tcp …: use of closed
// network connection".)
func TestFailedWriteIsALostResponse(t *testing.T) {
	servers := sharedZK(t)
	d := &breakingDialer{}
	l := mustLocker(t, servers, WithDialer(d.dial))
	waitFor(t, 5*time.Second, "a session", func() bool { return l.Ping(context.Background()) == nil })
	s, err := l.session()
	if err != nil {
		t.Fatal(err)
	}
	d.armed.Store(true)
	_, _, err = s.conn.Exists("/")
	var op *net.OpError
	if !errors.As(err, &op) || !lostResponse(err) {
		t.Fatalf("a read whose write failed with the connection = %v (%T), lost response: %v; want a *net.OpError, lost",
			err, err, lostResponse(err))
	}
	waitFor(t, 5*time.Second, "the session back", func() bool { return l.Ping(context.Background()) == nil })
	d.armed.Store(true)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx, key(t), lock.TryOnce())
	if err != nil {
		t.Fatalf("Acquire across a write that failed with the connection: %v", err)
	}
	mustRelease(t, lease)
}

// TestGrantCutOffSaysWhatItLeft: an attempt whose node is lowest but whose
// connection drops before the lease is handed out cannot delete the node
// while cut off; the caller that then gives up must hear that the node may
// still hold the key (lock.ErrCleanupPending), not a bare ctx error. The
// window between the verdict and the hand-out is microseconds wide, so the
// test plays the attempt's steps itself.
func TestGrantCutOffSaysWhatItLeft(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	p := &partition{}
	l := mustLocker(t, servers, WithDialer(p.dial), WithSessionTimeout(12*time.Second))
	k := key(t)
	mustRelease(t, mustAcquire(t, l, k+"-warm")) // connected, root made
	s, err := l.session()
	if err != nil {
		t.Fatal(err)
	}
	nodes, _, err := s.createAll(context.Background(), []string{k}, nil)
	if err != nil || !nodes[0].first {
		t.Fatalf("createAll = %v, first %v; want the key's only node", err, nodes != nil && nodes[0].first)
	}
	p.cut()
	waitFor(t, 2*time.Second, "the session suspended", func() bool { return !s.isConnected() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	tries := 0
	err = l.inSession(ctx, func(s2 *session) error {
		if tries++; tries > 1 {
			return ctx.Err() // what a second try cut off meets
		}
		_, err := s2.grant(ctx, nodes)
		return err
	})
	p.heal()
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrCleanupPending) {
		t.Fatalf("gave up after a grant cut off = %v; want the deadline with lock.ErrCleanupPending", err)
	}
	// Reconnected, the delete lands.
	waitFor(t, 15*time.Second, "the node deleted after the reconnection", func() bool {
		ok, _ := exists(t, insp, nodes[0].path())
		return !ok
	})
}
