package zklock

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fuzeDialer: once armed, the next multi is written (and applied by the
// server), its reply is lost, and at the same moment the ensemble goes out
// of reach (dials refused) until heal: go-zookeeper then cycles through
// its servers, flushing queued requests with ErrNoServer every round.
type fuzeDialer struct {
	armed, down atomic.Bool
	dropped     atomic.Int32
}

func (d *fuzeDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	if d.down.Load() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &fuzeConn{Conn: c, d: d}, nil
}

type fuzeConn struct {
	net.Conn
	d         *fuzeDialer
	blackhole atomic.Bool
}

func (c *fuzeConn) Write(p []byte) (int, error) {
	if c.blackhole.Load() {
		return 0, errors.New("conn cut by the test")
	}
	if len(p) >= 12 && int32(binary.BigEndian.Uint32(p[8:12])) == opMulti && c.d.armed.CompareAndSwap(true, false) {
		c.blackhole.Store(true)
		c.d.dropped.Add(1)
		n, err := c.Conn.Write(p)
		return n, err
	}
	return c.Conn.Write(p)
}

func (c *fuzeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.blackhole.Load() {
		time.Sleep(100 * time.Millisecond) // the server applies the multi
		c.d.down.Store(true)               // and the ensemble goes away
		_ = c.Conn.Close()
		return 0, errors.New("reply dropped by the test")
	}
	return n, err
}

// TestAppliedCreateThenOutage: an applied create whose reply is lost,
// followed by an outage of several go-zookeeper server rounds (ErrNoServer
// flushes) shorter than the session timeout. The caller gives up at 300 ms.
// Once the ensemble is back, the node must be gone and the key free for
// another instance, within the same session.
func TestAppliedCreateThenOutage(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	d := &fuzeDialer{}
	l := mustLocker(t, servers, WithDialer(d.dial), WithSessionTimeout(10*time.Second))
	other := mustLocker(t, servers)
	k := key(t)
	mustRelease(t, mustAcquire(t, l, k)) // parent known present
	l.mu.Lock()
	sid := l.cur.sid
	l.mu.Unlock()

	d.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	start := time.Now()
	lease, err := l.Acquire(ctx, k)
	took := time.Since(start)
	cancel()
	if err == nil {
		_ = lease.Release(context.Background())
		t.Fatal("acquired through a lost reply and outage")
	}
	t.Logf("Acquire: %v after %v", err, took.Round(time.Millisecond))
	if d.dropped.Load() != 1 {
		t.Fatalf("dropped %d replies", d.dropped.Load())
	}
	if names := children(t, insp, k); len(names) != 1 {
		t.Fatalf("during the outage, line = %v, want the applied create's node", names)
	}
	time.Sleep(3 * time.Second) // ~3 rounds of ErrNoServer
	d.down.Store(false)
	waitFor(t, 10*time.Second, "l reconnected", func() bool { return l.Ping(context.Background()) == nil })
	l.mu.Lock()
	same := l.cur.sid == sid
	l.mu.Unlock()
	if !same {
		t.Fatalf("session changed: test assumption (outage < timeout) broken")
	}
	actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer acancel()
	got, err := other.Acquire(actx, k)
	if err != nil {
		t.Fatalf("after the outage, another instance cannot acquire %s: %v; line = %v", k, err, children(t, insp, k))
	}
	mustRelease(t, got)
}

// TestRecoverGivesUpTheSessionItGivesUpOn: recoverCreate stops looking for
// a possibly applied create once the servers may have expired the session
// (mayHaveExpired), and returns errSessionGone, which the callers take for
// a session gone, its nodes with it. So it gives the session up itself: had
// it not, and the session resumed (its give-up timer running late, a
// handshake answered first), an applied create's node would stand first in
// the key's line, nobody's, for the session's life. White-box: the give-up
// timer is stopped and lastAnswered moved back to make mayHaveExpired()
// true while disconnected.
func TestRecoverGivesUpTheSessionItGivesUpOn(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	d := &fuzeDialer{}
	const timeout = 10 * time.Second
	l := mustLocker(t, servers, WithDialer(d.dial), WithSessionTimeout(timeout))
	other := mustLocker(t, servers)
	k := key(t)
	mustRelease(t, mustAcquire(t, l, k))
	l.mu.Lock()
	s := l.cur
	l.mu.Unlock()

	d.armed.Store(true)
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		lease, err := l.Acquire(ctx, k)
		if err == nil {
			_ = lease.Release(context.Background())
		}
		res <- err
	}()
	waitFor(t, 5*time.Second, "disconnected after the applied multi", func() bool {
		return d.dropped.Load() == 1 && !s.isConnected()
	})
	l.mu.Lock()
	if s.timer != nil {
		s.timer.Stop() // the give-up check runs late
	}
	s.lastAnswered.Store(s.now() - int64(timeout))
	l.mu.Unlock()
	waitFor(t, 5*time.Second, "mayHaveExpired", s.mayHaveExpired)
	time.Sleep(2500 * time.Millisecond) // recoverCreate's next Sync flush sees it
	d.down.Store(false)
	waitFor(t, 10*time.Second, "resumed", func() bool { return l.Ping(context.Background()) == nil })
	if !s.isGone() {
		t.Errorf("recoverCreate gave up on session %#x, which lives on", s.sid)
	}
	t.Logf("line after resume: %v", children(t, insp, k))
	err := <-res
	t.Logf("Acquire: %v", err)
	actx, acancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer acancel()
	got, err := other.Acquire(actx, k)
	if err != nil {
		t.Fatalf("session %#x alive and connected, but %s is blocked for every instance: %v; line = %v",
			s.sid, k, err, children(t, insp, k))
	}
	mustRelease(t, got)
}
