package zklock

import (
	"context"
	"encoding/binary"
	"net"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock"
)

// opGetChildren2 is the protocol's opcode of go-zookeeper's Children.
const opGetChildren2 = 12

// listingCounter is a dialer whose connections count the children
// listings their session sends.
type listingCounter struct{ n atomic.Int32 }

func (d *listingCounter) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, d: d}, nil
}

type countingConn struct {
	net.Conn
	d *listingCounter
}

func (c *countingConn) Write(p []byte) (int, error) {
	if len(p) >= 12 && int32(binary.BigEndian.Uint32(p[8:12])) == opGetChildren2 {
		c.d.n.Add(1)
	}
	return c.Conn.Write(p)
}

// waitingAcquire starts l.Acquire(k) and returns its outcome's channel once
// the attempt watches its predecessor.
func waitingAcquire(t *testing.T, l *Locker, reg *prometheus.Registry, k string) <-chan *lock.Lease {
	t.Helper()
	got := make(chan *lock.Lease, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		lease, err := l.Acquire(ctx, k)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- lease
	}()
	waitFor(t, 10*time.Second, "the waiter watching", func() bool {
		return counter(t, reg, "stockguard_zk_waiters") == 1
	})
	return got
}

// TestHandoffWithoutListing checks that a waiter whose predecessor was the
// only node ahead takes the key on that node's deletion without listing
// the children again: the hand-off is the release and one notification.
func TestHandoffWithoutListing(t *testing.T) {
	servers := sharedZK(t)
	k := key(t)
	holder := mustAcquire(t, mustLocker(t, servers), k)
	reg := prometheus.NewRegistry()
	d := &listingCounter{}
	got := waitingAcquire(t, mustLocker(t, servers, WithDialer(d.dial), WithRegisterer(reg)), reg, k)

	before := d.n.Load()
	mustRelease(t, holder)
	lease := <-got
	if lease == nil {
		t.FailNow()
	}
	if n := d.n.Load() - before; n != 0 {
		t.Fatalf("%d listings after the only node ahead was deleted, want 0", n)
	}
	if lease.Token() <= holder.Token() {
		t.Fatalf("token %d after the holder's %d", lease.Token(), holder.Token())
	}
	mustRelease(t, lease)
}

// TestPredecessorChangeIsNoGrant fires the waiter's watch without deleting
// the node it watches (an outside client sets its data): the waiter must
// look again and keep waiting, and take the key only on the release.
func TestPredecessorChangeIsNoGrant(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	k := key(t)
	holder := mustAcquire(t, mustLocker(t, servers), k)
	reg := prometheus.NewRegistry()
	got := waitingAcquire(t, mustLocker(t, servers, WithRegisterer(reg)), reg, k)

	names := children(t, insp, k)
	sort.Slice(names, func(i, j int) bool { // by sequence: the holder's first
		a, _ := parseSeq(names[i])
		b, _ := parseSeq(names[j])
		return a < b
	})
	if len(names) != 2 {
		t.Fatalf("children = %v, want the holder's node and the waiter's", names)
	}
	if _, err := insp.Set(testRoot+"/"+k+"/"+names[0], []byte("poke"), -1); err != nil {
		t.Fatalf("set data on the holder's node: %v", err)
	}
	// The watch fires; the waiter must set a new one and go on waiting.
	waitFor(t, 10*time.Second, "the waiter woken and watching again", func() bool {
		if len(got) > 0 {
			t.Fatal("the waiter took the key while its holder holds it")
		}
		return counter(t, reg, "stockguard_zk_watch_wakeups_total") == 1 &&
			counter(t, reg, "stockguard_zk_waiters") == 1
	})
	mustRelease(t, holder)
	lease := <-got
	if lease == nil {
		t.FailNow()
	}
	mustRelease(t, lease)
}
