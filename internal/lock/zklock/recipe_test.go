package zklock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock"
)

// TestExclusionManyLockers has goroutines of several Lockers (separate
// sessions, as separate service instances) take turns on one key, and
// checks that holders never overlap and that tokens, in the order the lock
// was held, strictly increase.
func TestExclusionManyLockers(t *testing.T) {
	servers := sharedZK(t)
	const lockers, perLocker, rounds = 4, 6, 6
	k := key(t)
	var (
		holders  atomic.Int32
		overlaps atomic.Int32
		mu       sync.Mutex
		tokens   []lock.Token
		counter  int // plain: the race detector sees any overlap too
		wg       sync.WaitGroup
	)
	for range lockers {
		l := mustLocker(t, servers)
		for range perLocker {
			wg.Go(func() {
				for range rounds {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					lease, err := l.Acquire(ctx, k)
					cancel()
					if err != nil {
						t.Errorf("acquire: %v", err)
						return
					}
					if holders.Add(1) > 1 {
						overlaps.Add(1)
					}
					counter++
					mu.Lock()
					tokens = append(tokens, lease.Token())
					mu.Unlock()
					holders.Add(-1)
					if err := lease.Release(context.Background()); err != nil {
						t.Errorf("release: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("%d acquisitions overlapped another holder", n)
	}
	if want := lockers * perLocker * rounds; counter != want {
		t.Fatalf("counter = %d, want %d", counter, want)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d = %d after %d", i, tokens[i], tokens[i-1])
		}
	}
	if names := children(t, inspector(t, servers), k); len(names) > 0 {
		t.Fatalf("nodes left after the last release: %v", names)
	}
}

// TestFIFO queues waiters in a known order, across Lockers, and checks they
// get the lock in that order.
func TestFIFO(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	lockers := []*Locker{mustLocker(t, servers), mustLocker(t, servers), mustLocker(t, servers)}
	k := key(t)
	holder := mustAcquire(t, lockers[0], k)

	const waiters = 12
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			l := lockers[i%len(lockers)]
			lease := mustAcquire(t, l, k)
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			mustRelease(t, lease)
		})
		// The next waiter starts once this one's node is in the queue.
		waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(children(t, insp, k)) == i+2 })
	}
	mustRelease(t, holder)
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("acquisition order %v, want 0..%d", order, waiters-1)
		}
	}
}

// TestNoHerd queues 50 waiters behind one holder and checks that the whole
// chain of releases wakes each waiter exactly once: every waiter watches
// only its predecessor, so a release notifies one waiter, not all.
func TestNoHerd(t *testing.T) {
	servers := sharedZK(t)
	reg := prometheus.NewRegistry()
	const nLockers, perLocker = 5, 10
	var lockers []*Locker
	for range nLockers {
		lockers = append(lockers, mustLocker(t, servers, WithRegisterer(reg)))
	}
	k := key(t)
	holder := mustAcquire(t, lockers[0], k)
	var wg sync.WaitGroup
	for i := range nLockers * perLocker {
		wg.Go(func() { mustRelease(t, mustAcquire(t, lockers[i%nLockers], k)) })
	}
	// All 50 have a watch set (the collectors are shared through reg).
	waitFor(t, 10*time.Second, "50 waiters watching", func() bool {
		return counter(t, reg, "stockguard_zk_waiters") == nLockers*perLocker
	})
	before := counter(t, reg, "stockguard_zk_watch_wakeups_total")
	mustRelease(t, holder)
	wg.Wait()
	wakeups := counter(t, reg, "stockguard_zk_watch_wakeups_total") - before
	if wakeups != nLockers*perLocker {
		t.Fatalf("%v wake-ups for %d releases, want exactly one each", wakeups, nLockers*perLocker)
	}
	for _, name := range []string{"stockguard_zk_queue_depth", "stockguard_lock_acquire_seconds"} {
		if n := counter(t, reg, name); n != 1+nLockers*perLocker {
			t.Errorf("%s observed %v times, want %d", name, n, 1+nLockers*perLocker)
		}
	}
	if n := counter(t, reg, "stockguard_zk_waiters"); n != 0 {
		t.Errorf("stockguard_zk_waiters = %v after the queue drained", n)
	}
}

// TestTokenIsCzxid checks the token against the holder node's czxid as a
// separate client sees it, and that tokens keep increasing when the key's
// parent is removed and created again between acquisitions.
func TestTokenIsCzxid(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	l := mustLocker(t, servers)
	k := key(t)
	var last lock.Token
	for range 3 {
		lease := mustAcquire(t, l, k)
		names := children(t, insp, k)
		if len(names) != 1 {
			t.Fatalf("children = %v, want the holder's node only", names)
		}
		_, st := exists(t, insp, testRoot+"/"+k+"/"+names[0])
		if lease.Token() != lock.Token(st.Czxid) {
			t.Fatalf("token %d, czxid %d", lease.Token(), st.Czxid)
		}
		if lease.Token() <= last {
			t.Fatalf("token %d after %d", lease.Token(), last)
		}
		last = lease.Token()
		mustRelease(t, lease)
		if names := children(t, insp, k); len(names) > 0 {
			t.Fatalf("nodes left after the only holder released: %v", names)
		}
	}
}

// TestNothingLeftBehind checks, with a separate client, that no node stays
// after a release, a cancelled wait, a failed TryOnce and Close.
func TestNothingLeftBehind(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	a, b := mustLocker(t, servers), mustLocker(t, servers)
	k := key(t)

	held := mustAcquire(t, a, k)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := b.Acquire(ctx, k)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire past its deadline = %v", err)
	}
	if _, err := b.Acquire(context.Background(), k, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryOnce on a held key = %v", err)
	}
	if names := children(t, insp, k); len(names) != 1 {
		t.Fatalf("after a cancelled wait and a failed TryOnce: %v, want the holder only", names)
	}
	mustRelease(t, held)
	if names := children(t, insp, k); len(names) > 0 {
		t.Fatalf("nodes of %s left after release: %v", k, names)
	}

	// Close: held leases and a blocked waiter, all gone with the session.
	c := mustLocker(t, servers)
	keys := []string{k + "-1", k + "-2"}
	var leases []*lock.Lease
	for _, kk := range keys {
		leases = append(leases, mustAcquire(t, c, kk))
	}
	other := mustAcquire(t, a, k+"-3")
	waitErr := make(chan error, 1)
	go func() {
		_, err := c.Acquire(context.Background(), k+"-3")
		waitErr <- err
	}()
	waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(children(t, insp, k+"-3")) == 2 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, lease := range leases {
		if !errors.Is(lease.Err(), lock.ErrLeaseLost) {
			t.Errorf("lease after Close: Err = %v, want ErrLeaseLost", lease.Err())
		}
	}
	if err := <-waitErr; !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Acquire blocked across Close = %v, want ErrUnavailable", err)
	}
	for _, kk := range keys {
		waitFor(t, 2*time.Second, "nodes of a closed Locker gone", func() bool { return len(children(t, insp, kk)) == 0 })
	}
	if names := children(t, insp, k+"-3"); len(names) != 1 {
		t.Fatalf("after Close: %v, want the other Locker's holder only", names)
	}
	mustRelease(t, other)
}

// TestTryOnceAfterReleaseElsewhere releases a key through one server and
// at once tries it once through each other server of the ensemble: a
// follower that has not applied the release yet must not make a free key
// look held (the verdict comes after our own create, never from a read).
func TestTryOnceAfterReleaseElsewhere(t *testing.T) {
	servers := sharedZK(t)
	if len(servers) < 2 {
		t.Fatalf("need an ensemble, got %v", servers)
	}
	lockers := make([]*Locker, len(servers))
	for i, s := range servers {
		lockers[i] = mustLocker(t, []string{s})
	}
	base := key(t)
	const rounds = 150
	for r := range rounds {
		holder := lockers[r%len(lockers)]
		for j, other := range lockers {
			if other == holder {
				continue
			}
			k := fmt.Sprintf("%s-%d-%d", base, r, j)
			mustRelease(t, mustAcquire(t, holder, k))
			lease, err := other.Acquire(context.Background(), k, lock.TryOnce())
			if err != nil {
				t.Fatalf("round %d: %q released via %s, try once via %s: %v", r, k, servers[r%len(lockers)], servers[j], err)
			}
			mustRelease(t, lease)
		}
	}
}
