package redis_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/redis"
	"github.com/stockguard/stockguard/internal/lock/redis/node"
	"github.com/stockguard/stockguard/internal/stack"
)

// sharedAddr is the shared stack's first Redis master.
func sharedAddr(tb testing.TB) string {
	tb.Helper()
	return stack.RequireRedis(tb)[0]
}

// newLocker returns a Locker closed when the test ends.
func newLocker(tb testing.TB, addr string, opts ...redis.Option) *redis.Locker {
	tb.Helper()
	l, err := redis.New(addr, opts...)
	if err != nil {
		tb.Fatalf("redis.New: %v", err)
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
		New:         func(tb testing.TB) lock.Locker { return newLocker(tb, addr, redis.WithTTL(1500*time.Millisecond)) },
		Exclusive:   true,
		Distributed: true,
		Expiring:    true,
		Lose: func(t *testing.T, _ lock.Locker, lease *lock.Lease) {
			if err := raw.Del(t.Context(), node.LockKey(lease.Key())).Err(); err != nil {
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
	lockers := make([]*redis.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(t, addr, redis.WithRetryDelay(2*time.Millisecond))
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

// TestTokensIncrease10k checks 10,000 acquisitions of one key: half one
// after another, half by 16 goroutines over 4 Lockers racing, each token
// checked against the last one inside the critical section.
func TestTokensIncrease10k(t *testing.T) {
	addr := sharedAddr(t)
	key := locktest.Key(t)
	checkTokensIncrease(t, key, []lock.Locker{newLocker(t, addr)}, 1, 5000)
	lockers := make([]lock.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(t, addr, redis.WithRetryDelay(time.Millisecond))
	}
	checkTokensIncrease(t, key, lockers, 16, 5000)
}

var lastToken sync.Map // key -> lock.Token, only touched under the lock

func checkTokensIncrease(t *testing.T, key string, lockers []lock.Locker, goroutines, total int) {
	t.Helper()
	var left atomic.Int64
	left.Store(int64(total))
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				lease := locktest.MustAcquire(t, lockers[g%len(lockers)], key)
				prev, _ := lastToken.Load(key)
				if p, _ := prev.(lock.Token); lease.Token() <= p {
					t.Errorf("token %d after %d", lease.Token(), p)
				}
				lastToken.Store(key, lease.Token())
				locktest.MustRelease(t, lease)
			}
		})
	}
	wg.Wait()
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
	got, err := raw.Get(t.Context(), node.LockKey(key)).Result()
	if err != nil || got != next.ID().String() {
		t.Fatalf("lock key after the old holder's release = %q, %v; want the new holder's id %s", got, err, next.ID())
	}
	if next.Token() <= old.Token() {
		t.Fatalf("token %d after %d", next.Token(), old.Token())
	}
	locktest.MustRelease(t, next)
	if n, _ := raw.Exists(t.Context(), node.LockKey(key)).Result(); n != 0 {
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
	if got, _ := raw.Get(t.Context(), node.LockKey(key)).Result(); got != held.ID().String() {
		t.Fatalf("lock key = %q, want the holder's %s", got, held.ID())
	}
	locktest.MustRelease(t, held)
	if n, _ := raw.Exists(t.Context(), node.LockKey(key)).Result(); n != 0 {
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
	l := newLocker(t, srv.Addr(), redis.WithTTL(600*time.Millisecond))
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
