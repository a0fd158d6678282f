package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/lock/redlock"
)

// TestKillMinorityThenMajority runs on five test-owned nodes: with two killed
// by PID the lock still works; with three killed Acquire and Ping fail
// quickly with lock.ErrUnavailable and leave no key on the survivors, a held
// lease is lost, and everything recovers once the nodes are restarted.
func TestKillMinorityThenMajority(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 5)
	raw := rawClients(t, c.addrs)
	l := newLocker(t, c.addrs, redlock.WithTTL(900*time.Millisecond))
	key := locktest.Key(t)
	held := locktest.MustAcquire(t, l, key+"-held")

	for _, i := range []int{0, 1} {
		if err := c.srv[i].Kill(); err != nil {
			t.Fatal(err)
		}
	}
	locktest.MustRelease(t, locktest.MustAcquire(t, l, key))
	if err := l.Ping(t.Context()); err != nil {
		t.Fatalf("Ping with 3/5 nodes up: %v", err)
	}
	time.Sleep(time.Second) // the held lease lives on through extensions on 3 nodes
	if err := held.Err(); err != nil {
		t.Fatalf("lease lost with 3/5 nodes up: %v", err)
	}

	if err := c.srv[2].Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := l.Acquire(t.Context(), key)
	took := time.Since(start)
	if !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("Acquire with 2/5 nodes up = %v, want ErrUnavailable only", err)
	}
	if took > time.Second {
		t.Errorf("Acquire took %v to report the lost quorum", took)
	}
	if !strings.Contains(err.Error(), `redlock: acquire "`+key+`": no quorum (2/5)`) {
		t.Errorf("error message %q", err)
	}
	var ne *lock.NodeError
	if !errors.As(err, &ne) {
		t.Errorf("error %v carries no *lock.NodeError", err)
	}
	for i, v := range raw.lockValues(t, key)[3:] {
		if v != "" {
			t.Errorf("survivor %d holds %q after a failed acquisition", i+3, v)
		}
	}
	if err := l.Ping(t.Context()); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Ping with 2/5 nodes up = %v, want ErrUnavailable", err)
	}
	select {
	case <-held.Done():
		if !errors.Is(held.Err(), lock.ErrLeaseLost) {
			t.Errorf("held lease Err = %v, want ErrLeaseLost", held.Err())
		}
	case <-time.After(3 * time.Second):
		t.Fatal("lease still held 3 s after the quorum was lost")
	}

	for _, i := range []int{0, 1, 2} {
		if err := c.srv[i].Restart(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for {
		lease, err := l.Acquire(ctx, key)
		if err == nil {
			locktest.MustRelease(t, lease)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no recovery 5 s after the restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := l.Ping(t.Context()); err != nil {
		t.Fatalf("Ping after the restart: %v", err)
	}
}

// TestRestartedEmptyNodeKeepsTokensIncreasing restarts nodes (empty: no
// persistence) one at a time while four goroutines on two Lockers take the
// key; every token must exceed the one before.
func TestRestartedEmptyNodeKeepsTokensIncreasing(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 5)
	lockers := []*redlock.Locker{
		newLocker(t, c.addrs, redlock.WithRetryDelay(2*time.Millisecond)),
		newLocker(t, c.addrs, redlock.WithRetryDelay(2*time.Millisecond)),
	}
	key := locktest.Key(t)
	var (
		checker tokenChecker
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	for g := range 4 {
		wg.Go(func() {
			for !stop.Load() {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				lease, err := lockers[g%2].Acquire(ctx, key)
				cancel()
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				checker.check(t, lease)
				_ = lease.Release(context.Background())
			}
		})
	}
	// Counts, not rates: the deadline only bounds a test that has stopped
	// making progress, whatever else the machine is doing.
	waitCount := func(n int64) {
		for deadline := time.Now().Add(60 * time.Second); checker.n.Load() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d acquisitions after 60 s", checker.n.Load(), n)
			}
		}
	}
	waitCount(50)
	for _, i := range []int{0, 1, 2, 3, 4} {
		if err := c.srv[i].Restart(t.Context()); err != nil {
			t.Fatal(err)
		}
		// Let round 2 bring the empty node's counter up before the next
		// restart: the guarantee needs a majority that remembers.
		waitCount(checker.n.Load() + 50)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d acquisitions, last token %d", checker.n.Load(), checker.last)
}

// TestCancelInFlightLeavesNoKey cancels an acquisition while its round 1 is
// still waiting for a paused node: Acquire must return context.Canceled
// promptly, and no running node may keep a key of it.
func TestCancelInFlightLeavesNoKey(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 5)
	raw := rawClients(t, c.addrs)
	l := newLocker(t, c.addrs, redlock.WithNodeTimeout(300*time.Millisecond))
	key := locktest.Key(t)
	// Another holder owns nodes 3 and 4; node 2 is paused. Nodes 0 and 1 grant
	// us the lock, and the attempt waits on node 2 for its majority.
	raw.holdElsewhere(t, key, 3, 4)
	if err := c.srv[2].Stop(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.srv[2].Cont() }()

	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := l.Acquire(ctx, key)
	took := time.Since(start)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v, want context.Canceled", err)
	}
	// The cancel comes at 50 ms; clean-up waits for the paused node's reply
	// (its 300 ms timeout) before deleting there.
	if took > 2*time.Second {
		t.Errorf("cancelled Acquire returned after %v", took)
	}
	want := []string{"", "", "?", "other", "other"}
	if got := raw.lockValues(t, key); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after the cancelled acquisition the nodes hold %q, want %q", got, want)
	}
}

// TestCancelledAcquireSaysWhatItLeft: when the clean-up of a cancelled
// acquisition cannot reach a majority, the keys may stay held there until
// their TTL, and the error must say so (lock.ErrCleanupPending), as the
// contract asks; a bare context.Canceled tells the caller nothing is held.
// Nodes 3 and 4 are another holder's; node 2 is paused from the start, and
// nodes 0 and 1, which granted the attempt, are paused before the cancel,
// so the deletes reach no majority.
func TestCancelledAcquireSaysWhatItLeft(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 5)
	raw := rawClients(t, c.addrs)
	l := newLocker(t, c.addrs, redlock.WithNodeTimeout(200*time.Millisecond))
	key := locktest.Key(t)
	raw.holdElsewhere(t, key, 3, 4)
	cont := func(i int) { _ = c.srv[i].Cont() }
	if err := c.srv[2].Stop(); err != nil {
		t.Fatal(err)
	}
	defer cont(2)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(30*time.Millisecond, func() {
		for _, i := range []int{0, 1} {
			if err := c.srv[i].Stop(); err != nil {
				t.Error(err)
			}
		}
		time.AfterFunc(20*time.Millisecond, cancel)
	})
	defer cont(0)
	defer cont(1)
	_, err := l.Acquire(ctx, key)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, lock.ErrCleanupPending) {
		t.Fatalf("cancelled Acquire whose clean-up reached 2 of 5 nodes = %v; want context.Canceled with lock.ErrCleanupPending", err)
	}
}

// TestReleaseWaitsForLateLockWrite pauses a node during an acquisition that
// succeeds on the others, resumes it only after the lease's Release has
// returned, and checks that the late SET did not outlive the release there:
// the release's delete on that node waits for the SET's reply.
func TestReleaseWaitsForLateLockWrite(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 5)
	raw := rawClients(t, c.addrs)
	l := newLocker(t, c.addrs, redlock.WithNodeTimeout(2*time.Second))
	key := locktest.Key(t)
	if err := c.srv[4].Stop(); err != nil {
		t.Fatal(err)
	}
	lease := locktest.MustAcquire(t, l, key) // majority on nodes 0-3
	locktest.MustRelease(t, lease)           // returns once nodes 0-3 are clear
	if err := c.srv[4].Cont(); err != nil {  // the paused SET lands now
		t.Fatal(err)
	}
	waitNoKey(t, raw, key) // and the delete queued behind it removes it
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseRetriesAfterTimeout: a node too busy to answer a release in
// time (here paused past the node timeout) gets it again, so its key does
// not stay held for the rest of the TTL.
func TestReleaseRetriesAfterTimeout(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	raw := rawClients(t, c.addrs)
	n := redisnode.New(c.addrs[0], 300*time.Millisecond)
	t.Cleanup(func() { _ = n.Close() })
	key := locktest.Key(t)
	holds := []redisnode.Hold{{Key: key, ID: "a"}}
	if tokens, err := n.AcquireIncr(t.Context(), holds, time.Minute, 0); err != nil || tokens[0] == 0 {
		t.Fatalf("AcquireIncr = %v, %v", tokens, err)
	}
	if err := c.srv[0].Stop(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		deleted, _, err := n.Release(t.Context(), holds, nil, nil, time.Minute)
		if err == nil && deleted != 1 {
			err = errors.New("nothing deleted")
		}
		done <- err
	}()
	time.Sleep(400 * time.Millisecond) // the first try has timed out by now
	if err := c.srv[0].Cont(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("release across a paused node: %v", err)
	}
	waitNoKey(t, raw, key)
}

// TestEmptyRestartAfterPartialRoundTwo is the case round two's counter on
// every answering node exists for. Another holder's lock keys sit on nodes 3
// and 4, so the first lease is granted, and its token counted, on nodes 0-2
// only. It is released; node 0 restarts empty and nodes 1 and 2 stall, so
// the next acquisition's majority is nodes 0, 3 and 4. Had round two raised
// the counter only where the lock was held, none of them would remember the
// first token and the second lease would get it again.
func TestEmptyRestartAfterPartialRoundTwo(t *testing.T) {
	t.Parallel()
	for _, form := range []string{"single", "batch"} {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			c := startCluster(t, 5)
			raw := rawClients(t, c.addrs)
			l := newLocker(t, c.addrs, redlock.WithNodeTimeout(300*time.Millisecond))
			base := locktest.Key(t)
			keys := []string{base + "-a", base + "-b"}
			if form == "single" {
				keys = keys[:1]
			}
			acquire := func() lock.Set {
				t.Helper()
				if form == "single" {
					return lock.Set{locktest.MustAcquire(t, l, keys[0], lock.TryOnce())}
				}
				b := locktest.MustBatch(t, l, keys)
				if len(b.Held) != 0 {
					t.Fatalf("batch: %q held", b.Held)
				}
				return b.Leases
			}
			for _, k := range keys {
				raw.holdElsewhere(t, k, 3, 4)
			}
			first := acquire()
			if err := first.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				for _, i := range []int{3, 4} {
					if err := raw[i].Del(t.Context(), redisnode.LockKey(k)).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := c.srv[0].Restart(t.Context()); err != nil {
				t.Fatal(err)
			}
			for _, i := range []int{1, 2} {
				if err := c.srv[i].Stop(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.srv[i].Cont() })
			}
			second := acquire()
			for j, lease := range second {
				if lease.Token() <= first[j].Token() {
					t.Errorf("%s: token %d after %d: an empty restart brought back a token", lease.Key(), lease.Token(), first[j].Token())
				}
			}
			_ = second.Release(t.Context())
		})
	}
}
