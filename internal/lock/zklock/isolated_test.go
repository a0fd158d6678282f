package zklock

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/stack"
)

// gateProxy forwards TCP to target; while frozen it forwards nothing (a
// silent partition: connections stay open, no byte passes).
type gateProxy struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
}

func newGateProxy(t *testing.T, target string) *gateProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &gateProxy{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *gateProxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *gateProxy) serve(c net.Conn) {
	defer c.Close()
	for p.frozen.Load() {
		time.Sleep(5 * time.Millisecond)
	}
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer u.Close()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			for p.frozen.Load() {
				time.Sleep(2 * time.Millisecond)
			}
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_ = dst.Close()
		_ = src.Close()
	}
	wg.Add(2)
	go pipe(u, c)
	go pipe(c, u)
	wg.Wait()
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestIsolatedFollowerLosesLease: a private three-node ensemble where node
// 1 reaches the others only through proxies. A holder connected to node 1
// must lose its lease once node 1 is cut off from the quorum, before the
// leader, hearing nothing of the session, expires it (timeout 400 ms) and
// grants the key to a waiter on node 2: node 1 goes on answering pings and
// reads for syncLimit × tickTime (1 s in the stack's zoo.cfg), so only
// replies that went through the leader may keep the lease.
func TestIsolatedFollowerLosesLease(t *testing.T) {
	isolatedFollower(t, 0, 400*time.Millisecond)
}

// TestIsolatedFollowerLosesLeaseDefaultTimeout: the same with the Locker's
// default 4 s session timeout (the service's) and syncLimit × tickTime =
// 6 s (ZooKeeper's sample zoo.cfg has 5 × 2 s = 10 s).
func TestIsolatedFollowerLosesLeaseDefaultTimeout(t *testing.T) {
	isolatedFollower(t, 30, DefaultSessionTimeout)
}

// isolatable is a private three-node ensemble whose node 1 reaches the
// others only through proxies that can be frozen: a follower cut off from
// the quorum, its clients still connected.
type isolatable struct {
	real    []stack.ZKPeer
	proxies []*gateProxy
}

func (e *isolatable) addr(i int) string { return fmt.Sprintf("127.0.0.1:%d", e.real[i].ClientPort) }

// cut freezes (or thaws) node 1's links to the others.
func (e *isolatable) cut(on bool) {
	for _, p := range e.proxies {
		p.frozen.Store(on)
	}
}

// serving waits until every node serves; it skips the test when node 1
// leads, which the test needs a follower.
func (e *isolatable) serving(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 3 {
		for {
			m, err := stack.ZKMode(ctx, e.addr(i))
			if err == nil && (m == "leader" || m == "follower") {
				if i == 0 && m == "leader" {
					t.Skip("node 1 became the leader; this run needs it a follower")
				}
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("node %d not serving: %v", i+1, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// pinned is a Locker option that dials a alone.
func pinned(a string) Option {
	return WithDialer(func(network, _ string, timeout time.Duration) (net.Conn, error) {
		return net.DialTimeout(network, a, timeout)
	})
}

// startIsolatable starts the ensemble, with syncLimit ticks (ZooKeeper's
// 5 when 0), and waits until it serves.
func startIsolatable(t *testing.T, syncLimit int) *isolatable {
	real := make([]stack.ZKPeer, 3)
	for i := range real {
		real[i] = stack.ZKPeer{Host: "127.0.0.1", ClientPort: freePort(t), QuorumPort: freePort(t), ElectionPort: freePort(t)}
	}
	var proxies []*gateProxy
	proxied := func(p stack.ZKPeer) stack.ZKPeer {
		q := newGateProxy(t, fmt.Sprintf("127.0.0.1:%d", p.QuorumPort))
		e := newGateProxy(t, fmt.Sprintf("127.0.0.1:%d", p.ElectionPort))
		proxies = append(proxies, q, e)
		return stack.ZKPeer{Host: p.Host, ClientPort: p.ClientPort, QuorumPort: q.port(), ElectionPort: e.port()}
	}
	// Node 1 sees 2 and 3 through proxies; 2 and 3 see 1 through proxies.
	views := [][]stack.ZKPeer{
		{real[0], proxied(real[1]), proxied(real[2])},
		{proxied(real[0]), real[1], real[2]},
		{proxied(real[0]), real[1], real[2]},
	}
	dir := t.TempDir()
	for i := range 3 {
		d := filepath.Join(dir, fmt.Sprintf("zk%d", i+1))
		if err := stack.WriteZKConfig(d, i+1, views[i]); err != nil {
			t.Fatal(err)
		}
		if syncLimit > 0 {
			cfg := filepath.Join(d, "zoo.cfg")
			b, err := os.ReadFile(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b = []byte(strings.Replace(string(b), "syncLimit=5", fmt.Sprintf("syncLimit=%d", syncLimit), 1))
			if err := os.WriteFile(cfg, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd, err := stack.ZKCommand(d)
		if err != nil {
			t.Fatal(err)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL); _ = cmd.Wait() })
	}
	e := &isolatable{real: real, proxies: proxies}
	e.serving(t)
	return e
}

func isolatedFollower(t *testing.T, syncLimit int, timeout time.Duration) {
	e := startIsolatable(t, syncLimit)
	addr, pin := e.addr, pinned
	holder := mustLocker(t, []string{addr(0)}, pin(addr(0)), WithSessionTimeout(timeout))
	waiter := mustLocker(t, []string{addr(1)}, pin(addr(1)), WithSessionTimeout(timeout))
	k := key(t)
	lease := mustAcquire(t, holder, k)
	got := make(chan *lock.Lease, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		l, err := waiter.Acquire(ctx, k)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	time.Sleep(time.Second) // the waiter queued, sessions steady
	start := time.Now()
	e.cut(true)
	defer func() {
		e.cut(false)
	}()
	var granted *lock.Lease
	select {
	case granted = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("waiter not granted 15 s into the partition")
	}
	at := time.Since(start)
	select {
	case <-lease.Done():
		t.Logf("waiter granted %v into the partition, holder's lease already lost (%v)", at, lease.Err())
	default:
		t.Errorf("waiter on node 2 granted %v into the partition (token %d) while the holder on the isolated node 1 still holds its lease (token %d): two holders",
			at.Round(time.Millisecond), granted.Token(), lease.Token())
		select {
		case <-lease.Done():
			t.Logf("holder's lease lost %v into the partition", time.Since(start).Round(time.Millisecond))
		case <-time.After(10 * time.Second):
			t.Log("holder's lease still held 10 s later")
		}
	}
	if granted != nil {
		_ = granted.Release(context.Background())
	}
}
