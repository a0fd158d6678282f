package zklock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// silent is a dialer whose connections, once cut, behave as a flow that
// drops packets (no RST, no FIN): nothing written reaches the server,
// nothing the server sends arrives, writes fill the socket's send buffer
// (budget bytes, never ACKed) and then block until their write deadline,
// reads block until their read deadline. With the dials cut too (a
// partition), new dials time out; without (a flow black-holed by a
// middlebox, its NAT or conntrack entry gone), new connections work.
type silent struct {
	budget   int64
	dialsCut atomic.Bool
	mu       sync.Mutex
	conns    []*silentConn
}

// cut silences every connection dialled so far, and new dials too if dials.
func (s *silent) cut(dials bool) {
	s.dialsCut.Store(dials)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.cut.Store(true)
	}
}

// heal lets new dials through. A connection cut stays silent: the bytes
// it dropped would garble its stream.
func (s *silent) heal() { s.dialsCut.Store(false) }

func (s *silent) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	if s.dialsCut.Load() {
		time.Sleep(timeout)
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.ErrDeadlineExceeded}
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	sc := &silentConn{Conn: c, closed: make(chan struct{})}
	sc.budget.Store(s.budget)
	s.mu.Lock()
	s.conns = append(s.conns, sc)
	s.mu.Unlock()
	return sc, nil
}

type silentConn struct {
	net.Conn
	cut      atomic.Bool
	budget   atomic.Int64
	rdl, wdl atomic.Int64
	once     sync.Once
	closed   chan struct{}
}

func (c *silentConn) SetDeadline(t time.Time) error {
	c.rdl.Store(t.UnixNano())
	c.wdl.Store(t.UnixNano())
	return c.Conn.SetDeadline(t)
}

func (c *silentConn) SetReadDeadline(t time.Time) error {
	c.rdl.Store(t.UnixNano())
	return c.Conn.SetReadDeadline(t)
}

func (c *silentConn) SetWriteDeadline(t time.Time) error {
	c.wdl.Store(t.UnixNano())
	return c.Conn.SetWriteDeadline(t)
}

func (c *silentConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func (c *silentConn) untilDeadline(dl *atomic.Int64, op string) error {
	for {
		if d := dl.Load(); d > 0 && time.Now().UnixNano() >= d {
			return &net.OpError{Op: op, Net: "tcp", Err: os.ErrDeadlineExceeded}
		}
		select {
		case <-c.closed:
			return &net.OpError{Op: op, Net: "tcp", Err: net.ErrClosed}
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (c *silentConn) Write(p []byte) (int, error) {
	if !c.cut.Load() {
		return c.Conn.Write(p)
	}
	if c.budget.Add(-int64(len(p))) >= 0 {
		return len(p), nil // into the send buffer, never to arrive
	}
	return 0, c.untilDeadline(&c.wdl, "write")
}

func (c *silentConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if !c.cut.Load() {
			return n, err
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return 0, err
		}
		if err != nil { // the server closed: its FIN is dropped too
			return 0, c.untilDeadline(&c.rdl, "read")
		}
		// bytes the server sent are dropped
	}
}

// lastReadOf is when l's current session last read from a server.
func lastReadOf(l *Locker) time.Time {
	l.mu.Lock()
	s := l.cur
	l.mu.Unlock()
	return s.at(s.lastRead.Load())
}

// TestSilentPartitionBlockedWrite: a holder cut off by a silent partition
// while its connection has a write blocked on a full send buffer loses
// its lease two thirds of the timeout after its last read, before the
// servers expire its session and another Locker takes the key. (go-zookeeper
// reports the disconnect only once both its loops end, the send loop at
// the blocked write's own deadline, up to two thirds of the timeout later:
// the lease outlived the session, two holders.)
func TestSilentPartitionBlockedWrite(t *testing.T) {
	servers := sharedZK(t)
	const timeout = 6 * time.Second
	sd := &silent{budget: 16 << 10} // Linux's initial tcp_wmem
	h := mustLocker(t, servers, WithDialer(sd.dial), WithSessionTimeout(timeout))
	o := mustLocker(t, servers)
	k := key(t)
	lease := mustAcquire(t, h, k)
	waitFor(t, 5*time.Second, "h connected", func() bool { return h.Ping(context.Background()) == nil })

	sd.cut(true)
	last := lastReadOf(h)

	type got struct {
		at        time.Time
		holderErr error
		lease     *lock.Lease
		err       error
	}
	taken := make(chan got, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		l, err := o.Acquire(ctx, k)
		taken <- got{time.Now(), lease.Err(), l, err}
	}()

	// A batch of new SKUs arrives shortly before the read deadline
	// (last read + 2/3 timeout): its writes fill the send buffer.
	time.Sleep(time.Until(last.Add(timeout*2/3 - 400*time.Millisecond)))
	base := key(t)
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%03d", base, i)
	}
	batched := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b, err := h.AcquireBatch(ctx, keys)
		if err == nil {
			err = b.Leases.Release(context.Background())
		}
		batched <- err
	}()

	var lostAt time.Time
	select {
	case <-lease.Done():
		lostAt = time.Now()
	case <-time.After(15 * time.Second):
		t.Fatal("lease never lost")
	}
	g := <-taken
	if g.err != nil {
		t.Fatalf("other acquire: %v", g.err)
	}
	t.Logf("since the last read: lease lost at %v, key taken by another Locker at %v (holder's lease then: %v)",
		lostAt.Sub(last).Round(time.Millisecond), g.at.Sub(last).Round(time.Millisecond), g.holderErr)
	if g.holderErr == nil || g.at.Before(lostAt) {
		t.Errorf("another Locker held %s for %v while the cut-off holder's lease was still open (Err nil): two holders",
			k, lostAt.Sub(g.at).Round(time.Millisecond))
	}
	if late := lostAt.Sub(last) - timeout*2/3; late > 500*time.Millisecond {
		t.Errorf("lease lost %v after two thirds of the timeout since the last read", late.Round(time.Millisecond))
	}
	mustRelease(t, g.lease)
	sd.heal()
	// The Locker goes on, in a new session: the cut outlasted the old one.
	// (The batch is let finish there: closing a go-zookeeper Conn with
	// requests in flight races inside the library, conn.go:915.)
	if err := <-batched; err != nil {
		t.Errorf("the batch, after the heal: %v", err)
	}
	if err := h.Ping(context.Background()); err != nil {
		t.Errorf("Ping after the heal: %v", err)
	}
}

// TestHungServerFailsOver: the first server a new session tries accepts
// TCP but never answers; the session is made on the next within its
// share of the timeout. (go-zookeeper waits 10 × 2/3 of the session
// timeout for the connect response before it tries the next server.)
func TestHungServerFailsOver(t *testing.T) {
	servers := sharedZK(t)
	hung := stacktest.Silent(t)
	var first atomic.Bool
	dial := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		if first.CompareAndSwap(false, true) {
			addr = hung // the server picked first is hung
		}
		return net.DialTimeout(network, addr, timeout)
	}
	const timeout = 1500 * time.Millisecond
	start := time.Now()
	l := mustLocker(t, servers, WithDialer(dial), WithSessionTimeout(timeout))
	waitFor(t, 30*time.Second, "a session", func() bool { return l.Ping(context.Background()) == nil })
	took := time.Since(start)
	t.Logf("first session after %v with a %v session timeout (%d servers)", took.Round(time.Millisecond), timeout, len(servers))
	if budget := timeout / time.Duration(len(servers)); took > budget+500*time.Millisecond {
		t.Errorf("no session for %v: one hung server held it past its %v share of the timeout", took.Round(time.Millisecond), budget)
	}
	mustRelease(t, mustAcquire(t, l, key(t)))
}
