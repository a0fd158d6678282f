package zklock

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
)

// outage is a dialer for one Locker only: while down, its dials are
// refused and the connections it made are closed, as if the whole
// ensemble went away for this client (no server is touched).
type outage struct {
	down  atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func (d *outage) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	if d.down.Load() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.conns = append(d.conns, c)
	d.mu.Unlock()
	return c, nil
}

func (d *outage) cut() {
	d.down.Store(true)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		_ = c.Close()
	}
	d.conns = nil
}

func (d *outage) heal() { d.down.Store(false) }

// outageSlack is how late past its deadline an acquisition may return with
// the ensemble out of reach: cleanupGrace, and scheduling.
const outageSlack = 500 * time.Millisecond

// checkOutageErr checks a failed acquisition's error: the caller's deadline,
// and the clean-up left to the background (a request of it waits in the
// client for a server).
func checkOutageErr(t *testing.T, err error, took, wait time.Duration) {
	t.Helper()
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrCleanupPending) {
		t.Errorf("err = %v, want DeadlineExceeded with lock.ErrCleanupPending", err)
	}
	if took > wait+outageSlack {
		t.Errorf("returned %v after its %v deadline (%v)", (took - wait).Round(time.Millisecond), wait, err)
	}
}

// TestOutageAcquireReturnsAtDeadline: with the ensemble out of reach, the
// create is not even sent; Acquire returns about when its context ends,
// not cleanupTimeout later, and leaves the create's fate to the background.
func TestOutageAcquireReturnsAtDeadline(t *testing.T) {
	servers := sharedZK(t)
	var d outage
	l := mustLocker(t, servers, WithDialer(d.dial), WithSessionTimeout(10*time.Second))
	k := key(t)
	mustRelease(t, mustAcquire(t, l, k)) // the key's parent is known present
	d.cut()
	defer d.heal()
	waitFor(t, 5*time.Second, "session suspended", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.cur != nil && !l.cur.connected
	})

	const wait = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	lease, err := l.Acquire(ctx, k)
	took := time.Since(start)
	if err == nil {
		_ = lease.Release(context.Background())
		t.Fatal("Acquire succeeded with the ensemble out of reach")
	}
	checkOutageErr(t, err, took, wait)
}

// TestOutageWaiterReturnsAtDeadline: a waiter whose connection is lost
// while it waits for a held key returns about at its deadline, not
// cleanupTimeout later: the delete of its node cannot be sent.
func TestOutageWaiterReturnsAtDeadline(t *testing.T) {
	servers := sharedZK(t)
	var d outage
	holder := mustLocker(t, servers)
	w := mustLocker(t, servers, WithDialer(d.dial), WithSessionTimeout(10*time.Second))
	k := key(t)
	held := mustAcquire(t, holder, k)
	defer mustRelease(t, held)
	waitFor(t, 5*time.Second, "w connected", func() bool { return w.Ping(context.Background()) == nil })

	// Not healed: a reconnection with the waiter's watch pending races
	// inside go-zookeeper (see disconnect_test.go); Close ends the session.
	const wait = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	time.AfterFunc(300*time.Millisecond, d.cut)
	start := time.Now()
	lease, err := w.Acquire(ctx, k)
	took := time.Since(start)
	if err == nil {
		_ = lease.Release(context.Background())
		t.Fatal("Acquire of a held key succeeded")
	}
	checkOutageErr(t, err, took, wait)
}

// TestOutageAbandonedAcquiresLeaveNothing: while the ensemble is out of
// reach for longer than the session timeout, the Locker sits on a new
// session that never connected. Acquisitions failed at their deadline must
// not linger (their multi, flushed unsent with ErrNoServer, is no lost
// reply to recover) nor, once the ensemble is back, replay their creates
// for callers long gone.
func TestOutageAbandonedAcquiresLeaveNothing(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	var d outage
	const timeout = 2 * time.Second
	l := mustLocker(t, servers, WithDialer(d.dial), WithSessionTimeout(timeout))
	k := key(t)
	mustRelease(t, mustAcquire(t, l, k)) // the key's parent is known present
	parent := testRoot + "/" + k
	_, before := exists(t, insp, parent)

	d.cut()
	// The suspended session is given up at its expiry; the next one never connects.
	waitFor(t, 3*timeout, "a new, never connected session", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.cur != nil && l.cur.sid == 0
	})

	const n = 10
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			lease, err := l.Acquire(ctx, k)
			if err == nil {
				_ = lease.Release(context.Background())
				return
			}
			failed.Add(1)
		})
	}
	wg.Wait()
	if failed.Load() != n {
		t.Fatalf("%d of %d Acquires failed with the ensemble out of reach", failed.Load(), n)
	}
	// The client flushes its unsent requests each time it has tried every
	// server (about every second): the creates are over by then.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		running := strings.Count(stacks, "zklock.(*session).createNodes(")
		if running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d creates of the %d failed Acquires still running 5 s after (%d recovering a reply they take for lost)",
				running, n, strings.Count(stacks, "zklock.(*session).recoverCreate("))
			break
		}
	}

	// The ensemble comes back: nobody acquires k any more.
	d.heal()
	waitFor(t, 15*time.Second, "a session", func() bool { return l.Ping(context.Background()) == nil })
	time.Sleep(3 * time.Second)
	ok, after := exists(t, insp, parent)
	switch {
	case !ok:
	case before == nil || after.Czxid != before.Czxid:
		t.Errorf("%s made again after the outage, for nodes nobody asked for any more", parent)
	case after.Cversion > before.Cversion:
		t.Errorf("after the outage, acquisitions that had failed long before created (and deleted) %d nodes in %s's line",
			(after.Cversion-before.Cversion)/2, k)
	}
}
