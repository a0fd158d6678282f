package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/lock/redlock"
	"github.com/stockguard/stockguard/internal/lock/retry"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

func TestConformance(t *testing.T) {
	addrs := stacktest.RequireRedis(t)
	raw := rawClients(t, addrs)
	locktest.Run(t, locktest.Config{
		// A short TTL keeps the loss test quick: the watchdog notices the
		// expired keys at its next extension, TTL/3 later.
		New:         func(tb testing.TB) lock.Locker { return newLocker(tb, addrs, redlock.WithTTL(1500*time.Millisecond)) },
		Exclusive:   true,
		Distributed: true,
		Expiring:    true,
		Lose: func(t *testing.T, _ lock.Locker, lease *lock.Lease) {
			// What a clock jump on every node would do.
			for _, c := range raw {
				if err := c.PExpire(t.Context(), redisnode.LockKey(lease.Key()), time.Millisecond).Err(); err != nil {
					t.Fatalf("pexpire: %v", err)
				}
			}
		},
	})
}

// TestMutualExclusion has 32 goroutines over 4 Lockers (4 service
// instances) take turns on one key; a plain counter and an atomic holder
// count catch any overlap, the race detector too.
func TestMutualExclusion(t *testing.T) {
	t.Parallel()
	addrs := stacktest.RequireRedis(t)
	lockers := make([]*redlock.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(t, addrs, redlock.WithRetryDelay(2*time.Millisecond))
	}
	key := locktest.Key(t)
	const goroutines, rounds = 32, 10
	var holders atomic.Int32
	counter := 0
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range rounds {
				lease := locktest.MustAcquire(t, lockers[g%len(lockers)], key)
				if h := holders.Add(1); h != 1 {
					t.Errorf("%d holders at once", h)
				}
				counter++
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				holders.Add(-1)
				locktest.MustRelease(t, lease)
			}
		})
	}
	wg.Wait()
	if counter != goroutines*rounds {
		t.Fatalf("counter = %d, want %d", counter, goroutines*rounds)
	}
}

// tokenChecker checks, inside the critical section, that each token is
// larger than the one before.
type tokenChecker struct {
	last lock.Token // only touched while holding the lock
	n    atomic.Int64
}

func (c *tokenChecker) check(t *testing.T, lease *lock.Lease) {
	// Helper takes t's mutex: the race detector sees the goroutines take
	// turns (it cannot see the Redis lock) and does not flag c.last.
	t.Helper()
	if lease.Token() <= c.last {
		t.Errorf("token %d after %d", lease.Token(), c.last)
	}
	c.last = lease.Token()
	c.n.Add(1)
}

// run makes total acquisitions of key from goroutines spread over lockers.
func (c *tokenChecker) run(t *testing.T, key string, lockers []*redlock.Locker, goroutines, total int) {
	t.Helper()
	var left atomic.Int64
	left.Store(int64(total))
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				lease := locktest.MustAcquire(t, lockers[g%len(lockers)], key)
				c.check(t, lease)
				locktest.MustRelease(t, lease)
			}
		})
	}
	wg.Wait()
}

// TestTokensIncrease10k checks 10,000 acquisitions: four keys side by side
// (so that the run fits in the package's time budget under -race), each
// taken 1,000 times in a row by one goroutine, then 1,500 times by four
// goroutines over two Lockers racing for it.
func TestTokensIncrease10k(t *testing.T) {
	t.Parallel()
	addrs := stacktest.RequireRedis(t)
	const keys, sequential, concurrent = 4, 1000, 1500
	var total atomic.Int64
	var wg sync.WaitGroup
	for range keys {
		wg.Go(func() {
			key := locktest.Key(t)
			var c tokenChecker
			c.run(t, key, []*redlock.Locker{newLocker(t, addrs)}, 1, sequential)
			lockers := []*redlock.Locker{
				newLocker(t, addrs, redlock.WithRetryDelay(time.Millisecond)),
				newLocker(t, addrs, redlock.WithRetryDelay(time.Millisecond)),
			}
			c.run(t, key, lockers, 4, concurrent)
			total.Add(c.n.Load())
		})
	}
	wg.Wait()
	if n := total.Load(); n != keys*(sequential+concurrent) {
		t.Fatalf("%d acquisitions checked, want %d", n, keys*(sequential+concurrent))
	}
}

// TestReleaseKeepsNextHoldersKey: a lease expires, another Locker takes the
// key, and the old holder's late Release must not delete the new lock on any
// node.
func TestReleaseKeepsNextHoldersKey(t *testing.T) {
	t.Parallel()
	addrs := stacktest.RequireRedis(t)
	raw := rawClients(t, addrs)
	a, b := newLocker(t, addrs), newLocker(t, addrs)
	key := locktest.Key(t)
	old := locktest.MustAcquire(t, a, key, lock.WithTTL(100*time.Millisecond), lock.WithoutWatchdog())
	<-old.Done()
	next := locktest.MustAcquire(t, b, key)
	before := count(raw.lockValues(t, key), next.ID().String())
	locktest.MustRelease(t, old)
	vals := raw.lockValues(t, key)
	if got := count(vals, next.ID().String()); got < before || got < b.Quorum() {
		t.Fatalf("after the old holder's release the new holder has %d nodes (had %d): %q", got, before, vals)
	}
	if next.Token() <= old.Token() {
		t.Fatalf("token %d after %d", next.Token(), old.Token())
	}
	locktest.MustRelease(t, next)
	waitNoKey(t, raw, key)
}

// TestReleaseWakesOnOneNode: a release leaves its wake-up on the one node
// the key's waiters block on, not on every node.
func TestReleaseWakesOnOneNode(t *testing.T) {
	t.Parallel()
	addrs := stacktest.RequireRedis(t)
	raw := rawClients(t, addrs)
	l := newLocker(t, addrs)
	for i := range 4 {
		key := fmt.Sprintf("%s-%d", locktest.Key(t), i)
		locktest.MustRelease(t, locktest.MustAcquire(t, l, key))
		waitNoKey(t, raw, key)
		// No lock on any node does not mean every release has run: a node
		// whose round 1 was still on its way held nothing yet, and its
		// release (the wake-up with it) follows that reply. Wait for the
		// wake-up, well within its TTL.
		var woken []int
		for deadline := time.Now().Add(500 * time.Millisecond); len(woken) == 0 && time.Now().Before(deadline); {
			for j, c := range raw {
				if c.LLen(t.Context(), redisnode.WakeKey(key)).Val() > 0 {
					woken = append(woken, j)
				}
			}
			time.Sleep(time.Millisecond)
		}
		for _, c := range raw {
			c.Del(context.Background(), redisnode.WakeKey(key))
		}
		if len(woken) != 1 {
			t.Fatalf("key %s: wake-ups on nodes %v; want exactly one", key, woken)
		}
	}
}

// waitNoKey waits (briefly: the release returns after a majority, the
// stragglers follow) until no node holds key.
func waitNoKey(t *testing.T, raw nodes, key string) {
	t.Helper()
	waitLockValues(t, raw, key, "lock key left behind", func(vals []string) bool { return count(vals, "") == len(vals) })
}

// waitLockValues waits up to a second until the nodes' values of key's
// lock satisfy ok, or fails the test with what and the values.
func waitLockValues(t *testing.T, raw nodes, key, what string, ok func([]string) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		vals := raw.lockValues(t, key)
		if ok(vals) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q", what, vals)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCancelledWaiterLeavesNoKey: acquisitions that give up while the key is
// held write nothing that stays: every node holds the holder's id or nothing,
// right when Acquire returns.
func TestCancelledWaiterLeavesNoKey(t *testing.T) {
	t.Parallel()
	addrs := stacktest.RequireRedis(t)
	raw := rawClients(t, addrs)
	a, b := newLocker(t, addrs), newLocker(t, addrs)
	key := locktest.Key(t)
	held := locktest.MustAcquire(t, a, key)
	for i := range 5 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Duration(10+i*7)*time.Millisecond)
		_, err := b.Acquire(ctx, key)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire past its deadline = %v", err)
		}
		vals := raw.lockValues(t, key)
		if count(vals, held.ID().String())+count(vals, "") != len(vals) {
			t.Fatalf("a waiter left a key: %q (holder %s)", vals, held.ID())
		}
	}
	locktest.MustRelease(t, held)
	waitNoKey(t, raw, key)
}

// TestWithoutFencing: the comparison mode still excludes, but issues no token.
func TestWithoutFencing(t *testing.T) {
	addrs := stacktest.RequireRedis(t)
	l := newLocker(t, addrs, redlock.WithoutFencing())
	if l.Fenced() {
		t.Fatal("Fenced() = true WithoutFencing")
	}
	key := locktest.Key(t)
	lease := locktest.MustAcquire(t, l, key)
	if lease.Token() != 0 {
		t.Errorf("token %d WithoutFencing", lease.Token())
	}
	if _, err := l.Acquire(t.Context(), key, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryOnce on a held key = %v", err)
	}
	locktest.MustRelease(t, lease)
}

func TestNewRejectsBadAddrs(t *testing.T) {
	for _, addrs := range [][]string{nil, {"a:1", "b:1"}, {"a:1", "a:1", "b:1"}, {"a:1", "", "b:1"}} {
		if _, err := redlock.New(addrs); err == nil {
			t.Errorf("New(%q) accepted", addrs)
		}
	}
	five := []string{"a:1", "b:1", "c:1", "d:1", "e:1"}
	l, err := redlock.New(five)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := l.Addrs(); len(got) != 5 || l.Quorum() != 3 {
		t.Errorf("nodes %q, quorum %d; want five, 3", got, l.Quorum())
	}
}

// TestMetrics checks the collectors on a registry shared by two Lockers.
func TestMetrics(t *testing.T) {
	t.Parallel()
	addrs := stacktest.RequireRedis(t)
	reg := prometheus.NewPedanticRegistry()
	a := newLocker(t, addrs, redlock.WithRegisterer(reg), redlock.WithTTL(600*time.Millisecond))
	b := newLocker(t, addrs, redlock.WithRegisterer(reg))
	key := locktest.Key(t)
	lease := locktest.MustAcquire(t, a, key, lock.WithoutWatchdog())
	if _, err := b.Acquire(t.Context(), key, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryOnce = %v", err)
	}
	<-lease.Done() // lost: no watchdog
	lease2 := locktest.MustAcquire(t, b, key, lock.WithTTL(300*time.Millisecond))
	time.Sleep(250 * time.Millisecond) // two extensions
	locktest.MustRelease(t, lease2)

	got := gather(t, reg)
	for series, want := range map[string]float64{
		`stockguard_lock_acquire_failures_total{backend="redlock",reason="not_acquired"}`: 1,
		`stockguard_lock_leases_lost_total{backend="redlock"}`:                            1,
		`stockguard_lock_acquire_seconds{backend="redlock"}`:                              2, // sample count
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
	if v := got[`stockguard_lock_acquire_attempts_total{backend="redlock"}`]; v < 3 {
		t.Errorf("attempts = %v, want >= 3", v)
	}
	if v := got[`stockguard_lock_extends_total{backend="redlock",result="ok"}`]; v < 1 {
		t.Errorf("successful extensions = %v, want >= 1", v)
	}
}

// gather flattens reg's series to name{labels} -> value (a histogram's
// sample count).
func gather(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+`="`+lp.GetValue()+`"`)
			}
			name := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestCleanupOfAHeldKeyWakesNobody: an attempt refused by a majority (the
// key is another lease's there) deletes what it wrote elsewhere without
// pushing a wake-up: one would wake its own line's head at once, for an
// attempt that meets the same majority, a round trip after round trip for
// as long as the other lease is held.
func TestCleanupOfAHeldKeyWakesNobody(t *testing.T) {
	t.Parallel()
	raw, l, key, wakeNode := onWakeNode(t)
	// Another lease on a majority that leaves out the wake node.
	var others []int
	for i := range raw {
		if i != wakeNode && len(others) < len(raw)/2+1 {
			others = append(others, i)
			raw[i].Set(t.Context(), redisnode.LockKey(key), "another-lease", 10*time.Second)
		}
	}
	t.Cleanup(func() {
		for _, i := range others {
			raw[i].Del(context.Background(), redisnode.LockKey(key))
		}
	})
	// It was granted the nodes the other lease left out, and one lease id
	// refused it on a majority. The first time, from where it stands, that
	// may be a release still landing on those nodes (it could have woken
	// us): a split vote (retry.ErrSplit), paused a short delay. The same
	// lease again on the next attempt holds the key: no split, and its
	// release is the wake-up to await. Taken for a split every time, such
	// a key was polled every quarter of a retry delay for as long as it
	// stayed held (TestKeyHeldOnAMajorityIsAwaited).
	if _, err := l.Acquire(t.Context(), key, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, retry.ErrSplit) {
		t.Fatalf("first TryOnce against a majority held elsewhere = %v, want ErrNotAcquired and ErrSplit", err)
	}
	if _, err := l.Acquire(t.Context(), key, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) || errors.Is(err, retry.ErrSplit) {
		t.Fatalf("second TryOnce against the same lease's majority = %v, want ErrNotAcquired without ErrSplit", err)
	}
	vals := raw.lockValues(t, key)
	if count(vals, "another-lease") != len(others) || count(vals, "")+len(others) != len(vals) {
		t.Fatalf("after the refused attempt: %q; want the other lease's keys and nothing of ours", vals)
	}
	if n := raw[wakeNode].LLen(t.Context(), redisnode.WakeKey(key)).Val(); n != 0 {
		t.Fatalf("the clean-up of a refused attempt left %d wake-up(s) on node %d", n, wakeNode)
	}
	// A wait that ran out changes nothing: the same lease refuses, no split.
	if err := redlock.Await(t.Context(), l, key, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(t.Context(), key, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) || errors.Is(err, retry.ErrSplit) {
		t.Fatalf("TryOnce after a wait that ran out = %v, want ErrNotAcquired without ErrSplit", err)
	}
	// A waiter woken takes the holder's next refusal for a split again:
	// that refusal may be the release that woke it, still landing on the
	// other nodes, and awaiting a wake-up already spent would leave the
	// key free for a whole wait span.
	raw[wakeNode].LPush(t.Context(), redisnode.WakeKey(key), "1")
	if err := redlock.Await(t.Context(), l, key, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(t.Context(), key, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, retry.ErrSplit) {
		t.Fatalf("TryOnce after a wake-up = %v, want ErrNotAcquired and ErrSplit", err)
	}
}

// onWakeNode is a Locker on the stack's masters, direct clients of them,
// a fresh key, and the node that holds the key's wake-ups (the one a
// release pushes to), found by a release whose wake-up is taken off again.
func onWakeNode(t *testing.T) (raw nodes, l *redlock.Locker, key string, wakeNode int) {
	t.Helper()
	addrs := stacktest.RequireRedis(t)
	raw = rawClients(t, addrs)
	l = newLocker(t, addrs)
	key = locktest.Key(t)
	locktest.MustRelease(t, locktest.MustAcquire(t, l, key))
	waitNoKey(t, raw, key)
	wakeNode = -1
	for i, c := range raw {
		if c.LLen(t.Context(), redisnode.WakeKey(key)).Val() > 0 {
			wakeNode = i
		}
		c.Del(t.Context(), redisnode.WakeKey(key))
	}
	if wakeNode < 0 {
		t.Fatal("a release woke no node")
	}
	return raw, l, key, wakeNode
}

// TestReleaseWithoutTheWakeNodeWakes: a lease that holds a majority but
// not the key's wake node (it refused our write) still wakes a waiter
// there when it lets go: the deletes on the majority free the key, and a
// waiter left asleep would wait out its span while it stood free.
func TestReleaseWithoutTheWakeNodeWakes(t *testing.T) {
	t.Parallel()
	raw, l, key, wakeNode := onWakeNode(t)
	raw[wakeNode].Set(t.Context(), redisnode.LockKey(key), "a-straggler", 10*time.Second)
	t.Cleanup(func() { raw[wakeNode].Del(context.Background(), redisnode.LockKey(key)) })
	lease := locktest.MustAcquire(t, l, key)
	if vals := raw.lockValues(t, key); vals[wakeNode] != "a-straggler" {
		t.Fatalf("lock values %q: the wake node should have refused us", vals)
	}
	locktest.MustRelease(t, lease)
	// The release returns once a majority is clear; the wake node's call
	// may land a moment later.
	for deadline := time.Now().Add(time.Second); raw[wakeNode].LLen(t.Context(), redisnode.WakeKey(key)).Val() != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the release of a lease without the wake node left no wake-up there")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if v := raw[wakeNode].Get(t.Context(), redisnode.LockKey(key)).Val(); v != "a-straggler" {
		t.Fatalf("the wake node's lock = %q; the release deleted what was not ours", v)
	}
}

// TestRefusalByAHolderIsNoSplit: an attempt every node refuses (another
// lease holds the key everywhere) is no split vote: its waiter awaits the
// holder's release for retry.AwaitSpan delays.
func TestRefusalByAHolderIsNoSplit(t *testing.T) {
	t.Parallel()
	addrs := stacktest.RequireRedis(t)
	raw := rawClients(t, addrs)
	holder, other := newLocker(t, addrs), newLocker(t, addrs)
	key := locktest.Key(t)
	lease := locktest.MustAcquire(t, holder, key)
	defer locktest.MustRelease(t, lease)
	// Acquire returns once a majority granted: the last nodes' writes may
	// still be on their way, and a node they have not reached yet would
	// grant the other attempt too, a split from where it stands.
	waitLockValues(t, raw, key, "the holder's lock is not on every node", func(vals []string) bool { return count(vals, "") == 0 })
	_, err := other.Acquire(t.Context(), key, lock.TryOnce())
	if !errors.Is(err, lock.ErrNotAcquired) || errors.Is(err, retry.ErrSplit) {
		t.Fatalf("TryOnce against a key held on every node = %v, want ErrNotAcquired without ErrSplit", err)
	}
}

// lockedBuffer is a log destination safe to write from the Locker's node
// goroutines while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestPingWarnsOfEvictingNode: a node whose maxmemory-policy may evict the
// lock keys gets one warning naming it and its policy, at the first Ping
// it answers; the others get none.
func TestPingWarnsOfEvictingNode(t *testing.T) {
	c := startCluster(t, 3)
	raw := rawClients(t, c.addrs)
	for k, v := range map[string]string{"maxmemory": "64mb", "maxmemory-policy": "volatile-ttl"} {
		if err := raw[1].ConfigSet(t.Context(), k, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var logs lockedBuffer
	l := newLocker(t, c.addrs, redlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	for range 2 {
		if err := l.Ping(t.Context()); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	}
	// Ping returns at a quorum: the last node's check may still be running.
	for deadline := time.Now().Add(time.Second); !strings.Contains(logs.String(), "level=WARN") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // room for a wrong second warning
	got := logs.String()
	if strings.Count(got, "level=WARN") != 1 || !strings.Contains(got, c.addrs[1]) || !strings.Contains(got, "volatile-ttl") {
		t.Errorf("two Pings logged %q; want one warning, naming node %s and volatile-ttl", got, c.addrs[1])
	}
}
