package zklock

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/stockguard/stockguard/internal/lock"
)

// replyHolder is a dialer whose connections, once armed, hold back every
// reply from the moment the next multi request is written until the test
// lets them go: the server applies the multi, and the client hears of it
// only then. One use per holder.
type replyHolder struct {
	armed atomic.Bool
	sent  chan struct{} // closed once the armed multi is on the wire
	let   chan struct{} // closed by the test: replies flow again
}

func newReplyHolder() *replyHolder {
	return &replyHolder{sent: make(chan struct{}), let: make(chan struct{})}
}

func (d *replyHolder) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &holdingConn{Conn: c, d: d}, nil
}

type holdingConn struct {
	net.Conn
	d       *replyHolder
	holding atomic.Bool
}

func (c *holdingConn) Write(p []byte) (int, error) {
	// go-zookeeper writes each request whole: length, xid, opcode, body.
	multi := len(p) >= 12 && int32(binary.BigEndian.Uint32(p[8:12])) == opMulti && c.d.armed.CompareAndSwap(true, false)
	if multi {
		c.holding.Store(true) // before the write: its reply cannot come first
	}
	n, err := c.Conn.Write(p)
	if multi {
		close(c.d.sent)
	}
	return n, err
}

func (c *holdingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.holding.Load() {
		// Within go-zookeeper's read deadline (2/3 of the session
		// timeout), or the connection dies of it.
		<-c.d.let
	}
	return n, err
}

// cancelMidMulti arms d, and once the armed multi has been applied (its
// nodes under want[0] appear to insp) cancels, then lets the replies go
// after hold. The cancellation thus lands while the multi is in flight,
// with its outcome, nodes made, still on the way back.
func cancelMidMulti(t *testing.T, d *replyHolder, insp *zk.Conn, want []string, cancel context.CancelFunc, hold time.Duration) {
	d.armed.Store(true)
	go func() {
		defer close(d.let)
		select {
		case <-d.sent:
		case <-time.After(5 * time.Second):
			t.Error("no multi was sent")
			cancel()
			return
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			names, _, err := insp.Children(testRoot + "/" + want[0])
			if err == nil && len(names) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("the multi's node of %s never appeared", want[0])
				break
			}
			time.Sleep(time.Millisecond)
		}
		cancel()
		time.Sleep(hold)
	}()
}

// mustBeEmpty fails unless no key of keys has a node left, nor can be
// refused to other at once.
func mustBeEmpty(t *testing.T, insp *zk.Conn, other *Locker, when string, keys []string) {
	t.Helper()
	for _, k := range keys {
		if names := children(t, insp, k); len(names) > 0 {
			t.Errorf("%s: %s still has %v", when, k, names)
			continue
		}
		lease, err := other.Acquire(context.Background(), k, lock.TryOnce())
		if err != nil {
			t.Errorf("%s: %s not free for another Locker: %v", when, k, err)
			continue
		}
		mustRelease(t, lease)
	}
}

// TestCancelledMidMulti cancels a batch and a handover while their create
// multi is in flight, applied on the servers but unanswered: each waits
// for the answer, deletes the nodes the multi made, and only then returns
// its error, so no key is held after it; the handover's earlier batch,
// deleted by that same multi, is reported released. A reply held back past
// cleanupGrace is the server out of reach: the call returns within the
// grace of its cancellation and says the clean-up goes on in the
// background, which then finishes it.
func TestCancelledMidMulti(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	other := mustLocker(t, servers)
	const hold = cleanupGrace / 4 // the answer, and the deletes, within the grace

	t.Run("Batch", func(t *testing.T) {
		d := newReplyHolder()
		l := mustLocker(t, servers, WithDialer(d.dial))
		base := key(t)
		mustRelease(t, mustAcquire(t, l, base+"-warm")) // connected, root exists
		keys := []string{base + "-a", base + "-b", base + "-c"}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cancelMidMulti(t, d, insp, keys, cancel, hold)
		b, err := l.AcquireBatch(ctx, keys)
		if !errors.Is(err, context.Canceled) || len(b.Leases) != 0 {
			t.Fatalf("batch cancelled mid-multi = %v, %d leases; want context.Canceled and none", err, len(b.Leases))
		}
		mustBeEmpty(t, insp, other, "after the batch's error", keys)
	})

	t.Run("Handover", func(t *testing.T) {
		d := newReplyHolder()
		l := mustLocker(t, servers, WithDialer(d.dial))
		base := key(t)
		prevKeys, keys := []string{base + "-a", base + "-b"}, []string{base + "-c", base + "-d"}
		prev, err := l.AcquireBatch(context.Background(), prevKeys)
		if err != nil || len(prev.Leases) != len(prevKeys) {
			t.Fatalf("earlier batch = %d leases, %v", len(prev.Leases), err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cancelMidMulti(t, d, insp, keys, cancel, hold)
		b, released, err := lock.HandoverBatch(ctx, l, prev.Leases, keys)
		if !errors.Is(err, context.Canceled) || len(b.Leases) != 0 || released != nil {
			t.Fatalf("handover cancelled mid-multi = %v, %d leases, released: %v; want context.Canceled, none, and the release done",
				err, len(b.Leases), released)
		}
		mustBeEmpty(t, insp, other, "the earlier batch, after the handover's error", prevKeys)
		mustBeEmpty(t, insp, other, "after the handover's error", keys)
	})

	t.Run("OutOfReach", func(t *testing.T) {
		d := newReplyHolder()
		// A read deadline (2/3 of the session timeout) well past the hold.
		l := mustLocker(t, servers, WithDialer(d.dial), WithSessionTimeout(10*time.Second))
		base := key(t)
		prevKeys, keys := []string{base + "-a", base + "-b"}, []string{base + "-c", base + "-d"}
		prev, err := l.AcquireBatch(context.Background(), prevKeys)
		if err != nil || len(prev.Leases) != len(prevKeys) {
			t.Fatalf("earlier batch = %d leases, %v", len(prev.Leases), err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cancelMidMulti(t, d, insp, keys, cancel, cleanupTimeout+time.Second)
		start := time.Now()
		b, released, err := lock.HandoverBatch(ctx, l, prev.Leases, keys)
		// Cancelled once the multi is applied, a few ms in.
		if took := time.Since(start); took > cleanupGrace+500*time.Millisecond {
			t.Errorf("handover took %v with its reply held back: over the %v grace after its cancellation", took, cleanupGrace)
		}
		if !errors.Is(err, context.Canceled) || len(b.Leases) != 0 || !errors.Is(err, lock.ErrCleanupPending) {
			t.Fatalf("handover with its reply held = %v, %d leases; want context.Canceled, none, and the clean-up said to go on", err, len(b.Leases))
		}
		if !errors.Is(released, lock.ErrCleanupPending) {
			t.Fatalf("released = %v, want the release said to go on in the background", released)
		}
		for _, k := range append(prevKeys, keys...) {
			waitFor(t, 5*time.Second, k+" emptied in the background", func() bool { return len(children(t, insp, k)) == 0 })
		}
	})
}
