package redislock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/redislock"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// sharedAddr is the shared stack's first Redis master.
func sharedAddr(tb testing.TB) string {
	tb.Helper()
	return stacktest.RequireRedis(tb)[0]
}

// testNodeTimeout replaces the 200 ms default in tests (a test's own option
// still wins): with -race, on two cores, next to other packages' tests, a
// healthy server's reply can take longer than that.
const testNodeTimeout = time.Second

// newLocker returns a Locker closed when the test ends.
func newLocker(tb testing.TB, addr string, opts ...redislock.Option) *redislock.Locker {
	tb.Helper()
	l, err := redislock.New(addr, append([]redislock.Option{redislock.WithNodeTimeout(testNodeTimeout)}, opts...)...)
	if err != nil {
		tb.Fatalf("redislock.New: %v", err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// rawClient talks to a server directly, to check or tamper with the keys.
func rawClient(tb testing.TB, addr string) *goredis.Client {
	tb.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func TestConformance(t *testing.T) {
	addr := sharedAddr(t)
	raw := rawClient(t, addr)
	locktest.Run(t, locktest.Config{
		// A short TTL keeps the loss test quick: the watchdog notices the
		// deleted key at its next extension, TTL/3 later.
		New:         func(tb testing.TB) lock.Locker { return newLocker(tb, addr, redislock.WithTTL(1500*time.Millisecond)) },
		Exclusive:   true,
		Distributed: true,
		Expiring:    true,
		Lose: func(t *testing.T, _ lock.Locker, lease *lock.Lease) {
			if err := raw.Del(t.Context(), redisnode.LockKey(lease.Key())).Err(); err != nil {
				t.Fatalf("delete lock key: %v", err)
			}
		},
	})
}

// TestMutualExclusion has 32 goroutines over 4 Lockers (4 service
// instances) take turns on one key; a plain counter and an atomic holder
// count catch any overlap, the race detector too.
func TestMutualExclusion(t *testing.T) {
	addr := sharedAddr(t)
	lockers := make([]*redislock.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(t, addr, redislock.WithRetryDelay(2*time.Millisecond))
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

// TestTokensIncrease10k checks 10,000 acquisitions: four keys side by side,
// each taken 1,000 times in a row by one goroutine, then 1,500 times by four
// goroutines over two Lockers racing for it; each token is checked against
// the key's last one inside the critical section.
func TestTokensIncrease10k(t *testing.T) {
	addr := sharedAddr(t)
	const keys, sequential, concurrent = 4, 1000, 1500
	var total atomic.Int64
	var wg sync.WaitGroup
	for range keys {
		wg.Go(func() {
			key := locktest.Key(t)
			var last lock.Token // only touched under the lock
			n := checkTokensIncrease(t, key, &last, []lock.Locker{newLocker(t, addr)}, 1, sequential)
			lockers := []lock.Locker{
				newLocker(t, addr, redislock.WithRetryDelay(time.Millisecond)),
				newLocker(t, addr, redislock.WithRetryDelay(time.Millisecond)),
			}
			n += checkTokensIncrease(t, key, &last, lockers, 4, concurrent)
			total.Add(n)
		})
	}
	wg.Wait()
	if n := total.Load(); n != keys*(sequential+concurrent) {
		t.Fatalf("%d acquisitions checked, want %d", n, keys*(sequential+concurrent))
	}
}

// checkTokensIncrease makes total acquisitions of key from goroutines spread
// over lockers and returns how many it checked.
func checkTokensIncrease(t *testing.T, key string, last *lock.Token, lockers []lock.Locker, goroutines, total int) int64 {
	t.Helper()
	var left, checked atomic.Int64
	left.Store(int64(total))
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				lease := locktest.MustAcquire(t, lockers[g%len(lockers)], key)
				if lease.Token() <= *last {
					t.Errorf("token %d after %d", lease.Token(), *last)
				}
				*last = lease.Token()
				checked.Add(1)
				locktest.MustRelease(t, lease)
			}
		})
	}
	wg.Wait()
	return checked.Load()
}

// TestReleaseKeepsNextHoldersKey: a lease expires, another Locker takes the
// key, and the old holder's late Release must not delete the new lock.
func TestReleaseKeepsNextHoldersKey(t *testing.T) {
	addr := sharedAddr(t)
	a, b := newLocker(t, addr), newLocker(t, addr)
	raw := rawClient(t, addr)
	key := locktest.Key(t)
	old := locktest.MustAcquire(t, a, key, lock.WithTTL(100*time.Millisecond), lock.WithoutWatchdog())
	<-old.Done()
	next := locktest.MustAcquire(t, b, key)
	locktest.MustRelease(t, old)
	got, err := raw.Get(t.Context(), redisnode.LockKey(key)).Result()
	if err != nil || got != next.ID().String() {
		t.Fatalf("lock key after the old holder's release = %q, %v; want the new holder's id %s", got, err, next.ID())
	}
	if next.Token() <= old.Token() {
		t.Fatalf("token %d after %d", next.Token(), old.Token())
	}
	locktest.MustRelease(t, next)
	if n, _ := raw.Exists(t.Context(), redisnode.LockKey(key)).Result(); n != 0 {
		t.Fatal("lock key still there after the holder released it")
	}
}

// TestCancelledAcquireLeavesNoKey: waiters whose context ends leave the
// holder's key alone and write nothing of their own.
func TestCancelledAcquireLeavesNoKey(t *testing.T) {
	addr := sharedAddr(t)
	a, b := newLocker(t, addr), newLocker(t, addr)
	raw := rawClient(t, addr)
	key := locktest.Key(t)
	held := locktest.MustAcquire(t, a, key)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(30*time.Millisecond, cancel)
	if _, err := b.Acquire(ctx, key); !errors.Is(err, context.Canceled) || !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("cancelled Acquire = %v, want context.Canceled after ErrNotAcquired attempts", err)
	}
	if got, _ := raw.Get(t.Context(), redisnode.LockKey(key)).Result(); got != held.ID().String() {
		t.Fatalf("lock key = %q, want the holder's %s", got, held.ID())
	}
	locktest.MustRelease(t, held)
	if n, _ := raw.Exists(t.Context(), redisnode.LockKey(key)).Result(); n != 0 {
		t.Fatal("a key was left behind")
	}
}

// TestUnavailable kills a test-owned server: Acquire and Ping fail quickly
// with lock.ErrUnavailable, a held lease is lost, and all recovers once the
// server is back.
func TestUnavailable(t *testing.T) {
	srv, err := stack.StartRedis(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	l := newLocker(t, srv.Addr(), redislock.WithTTL(600*time.Millisecond))
	key := locktest.Key(t)
	lease := locktest.MustAcquire(t, l, key)
	if err := l.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = l.Acquire(t.Context(), key+"-other")
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("Acquire with the server down = %v, want ErrUnavailable", err)
	}
	var ne *lock.NodeError
	if !errors.As(err, &ne) || ne.Node != srv.Addr() {
		t.Errorf("error %v does not name the node", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Acquire took %v to report the server down", d)
	}
	if err := l.Ping(t.Context()); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Ping with the server down = %v, want ErrUnavailable", err)
	}
	select {
	case <-lease.Done():
		if !errors.Is(lease.Err(), lock.ErrLeaseLost) {
			t.Errorf("lease Err = %v, want ErrLeaseLost", lease.Err())
		}
	case <-time.After(3 * time.Second):
		t.Fatal("lease not lost 3 s after its server died")
	}

	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
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
			t.Fatalf("no recovery 5 s after restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMetrics: two Lockers on one registry count into one series.
func TestMetrics(t *testing.T) {
	addr := sharedAddr(t)
	reg := prometheus.NewPedanticRegistry()
	a := newLocker(t, addr, redislock.WithRegisterer(reg))
	b := newLocker(t, addr, redislock.WithRegisterer(reg))
	key := locktest.Key(t)
	lease := locktest.MustAcquire(t, a, key)
	if _, err := b.Acquire(t.Context(), key, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryOnce = %v", err)
	}
	if _, err := b.Acquire(t.Context(), ""); !errors.Is(err, lock.ErrInvalidKey) {
		t.Fatalf("empty key = %v", err)
	}
	locktest.MustRelease(t, lease)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, lp := range m.GetLabel() {
				name += "," + lp.GetValue()
			}
			got[name] = m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	for series, want := range map[string]float64{
		"stockguard_lock_acquire_failures_total,redis,not_acquired": 1,
		"stockguard_lock_acquire_failures_total,redis,invalid_key":  1,
		"stockguard_lock_acquire_attempts_total,redis":              2,
		"stockguard_lock_acquire_seconds,redis":                     1,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v (all: %v)", series, got[series], want, got)
		}
	}
}

// TestAcquireAtOnceAfterLoss: a lost lease hands this Locker's turn on as
// a release that woke nobody (the key ran out, or went to someone else),
// once, however often it is released afterwards; so the next local
// Acquire of the key attempts at once, not after awaiting a wake-up that
// no release sent (80–240 ms with the default retry delay). Best of three,
// so a scheduler hiccup cannot fail it.
func TestAcquireAtOnceAfterLoss(t *testing.T) {
	addr := sharedAddr(t)
	raw := rawClient(t, addr)
	l := newLocker(t, addr, redislock.WithTTL(600*time.Millisecond))
	best := time.Hour
	for range 3 {
		key := locktest.Key(t)
		lease := locktest.MustAcquire(t, l, key)
		if err := raw.Del(t.Context(), redisnode.LockKey(key)).Err(); err != nil {
			t.Fatalf("delete lock key: %v", err)
		}
		select {
		case <-lease.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("lease not lost 5 s after its key was deleted")
		}
		start := time.Now()
		next := locktest.MustAcquire(t, l, key)
		best = min(best, time.Since(start))
		_ = lease.Release(context.Background())
		_ = lease.Release(context.Background())
		locktest.MustRelease(t, next)
	}
	if best > 40*time.Millisecond {
		t.Errorf("the Acquire after a lost lease took at best %v: it awaited a wake-up before its first attempt", best)
	}
}
