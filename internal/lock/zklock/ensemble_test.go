package zklock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// onlyTo is a dialer that reaches a single server while pinned and any
// server after release: it puts a client on the node a test will kill.
type onlyTo struct{ addr atomic.Pointer[string] }

func (o *onlyTo) pin(addr string) { o.addr.Store(&addr) }
func (o *onlyTo) release()        { o.addr.Store(nil) }

func (o *onlyTo) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	if pinned := o.addr.Load(); pinned != nil && *pinned != addr {
		return nil, fmt.Errorf("dial %s: pinned to %s", addr, *pinned)
	}
	return net.DialTimeout(network, addr, timeout)
}

// TestNodeFailures runs a private three-node ensemble, which reaps emptied
// container parents within a second (Reaped), and kills, first, the
// follower a holder is connected to (its lease is lost at the disconnect,
// its session survives), then the leader. Locks keep working after the
// reconnection, exclusion holds throughout, and tokens keep growing (across
// the new epoch, too).
func TestNodeFailures(t *testing.T) {
	if os.Getenv(stacktest.EnvSkipIntegration) == "1" {
		t.Skipf("%s=1: no ZooKeeper ensemble of our own", stacktest.EnvSkipIntegration)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, err := stack.StartZKEnsemble(ctx, t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	servers := e.Servers()

	t.Run("Reaped", func(t *testing.T) {
		// Parents are containers: the servers delete each once emptied,
		// and a Locker whose hint still says "present" creates it again.
		l := mustLocker(t, servers)
		insp := inspector(t, servers)
		k := key(t)
		mustRelease(t, mustAcquire(t, l, k))
		reapWithin := 10 * stack.ZKContainerCheckMillis * time.Millisecond
		waitFor(t, reapWithin, "the emptied parent reaped by the servers", func() bool {
			ok, _ := exists(t, insp, testRoot+"/"+k)
			return !ok
		})
		mustRelease(t, mustAcquire(t, l, k))
	})

	t.Run("Follower", func(t *testing.T) {
		leader, err := e.WaitLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		follower := (leader + 1) % 3
		var d onlyTo
		d.pin(servers[follower])
		a := mustLocker(t, servers, WithDialer(d.dial)) // the holder
		w := mustLocker(t, servers, WithDialer(d.dial)) // a waiter
		b := mustLocker(t, servers)
		insp := inspector(t, servers)
		k := key(t)
		held := mustAcquire(t, a, k)
		waited := make(chan *lock.Lease, 1)
		go func() {
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			defer wcancel()
			lease, err := w.Acquire(wctx, k)
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			waited <- lease
		}()
		waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(children(t, insp, k)) == 2 })

		if err := e.Node(follower).Kill(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := e.Node(follower).Restart(ctx); err != nil {
				t.Fatal(err)
			}
		}()
		// The disconnect loses the lease at once: the holder cannot know it
		// still holds.
		select {
		case <-held.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("lease not lost when its follower died")
		}
		if !errors.Is(held.Err(), lock.ErrLeaseLost) {
			t.Fatalf("lease Err = %v, want ErrLeaseLost", held.Err())
		}
		d.release()
		waitFor(t, 5*time.Second, "holder reconnected", func() bool { return a.Ping(ctx) == nil })
		// The session moved to a live node within its timeout: it deletes
		// the lost lease's node, and the waiter, which kept its place in
		// the queue across its own reconnection, gets the key.
		next := <-waited
		if next == nil {
			t.FailNow()
		}
		if next.Token() <= held.Token() {
			t.Fatalf("token %d after %d", next.Token(), held.Token())
		}
		if _, err := b.Acquire(ctx, k, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("key taken while held: %v", err)
		}
		mustRelease(t, held)
		mustRelease(t, next)
		mustRelease(t, mustAcquire(t, b, k))
		mustRelease(t, mustAcquire(t, a, k+"-new"))
	})

	t.Run("Leader", func(t *testing.T) {
		leader, err := e.WaitLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// A longer session rides out the election: followers drop their
		// clients until a new leader is up.
		a := mustLocker(t, servers, WithSessionTimeout(8*time.Second))
		b := mustLocker(t, servers, WithSessionTimeout(8*time.Second))
		k := key(t)
		held := mustAcquire(t, a, k)

		killed := time.Now()
		if err := e.Node(leader).Kill(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := e.Node(leader).Restart(ctx); err != nil {
				t.Fatal(err)
			}
		}()
		// New acquisitions work once a new leader is elected.
		actx, acancel := context.WithTimeout(ctx, 20*time.Second)
		defer acancel()
		fresh, err := b.Acquire(actx, k+"-new")
		if err != nil {
			t.Fatalf("acquire after the leader died: %v", err)
		}
		t.Logf("acquired %v after the leader was killed", time.Since(killed).Round(time.Millisecond))
		if fresh.Token()>>32 <= held.Token()>>32 {
			t.Errorf("token %#x not in a later epoch than %#x", fresh.Token(), held.Token())
		}
		mustRelease(t, fresh)

		// The holder's session either survived (then the key is still
		// held) or was given up (then the lease says so): never both free
		// and held.
		waitFor(t, 10*time.Second, "holder reconnected", func() bool { return a.Ping(ctx) == nil })
		if err := held.Err(); err == nil {
			if _, err := b.Acquire(ctx, k, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
				t.Fatalf("key taken while its lease is held: %v", err)
			}
			t.Log("the holder's session survived the election")
		} else if !errors.Is(err, lock.ErrLeaseLost) {
			t.Fatalf("lease Err = %v", err)
		}
		mustRelease(t, held)
		next := mustAcquire(t, b, k)
		if next.Token() <= held.Token() {
			t.Fatalf("token %d after %d", next.Token(), held.Token())
		}
		mustRelease(t, next)
	})
}
