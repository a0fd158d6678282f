package lock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/memlock"
)

func mustAcquire(t *testing.T, l lock.Locker, key string, opts ...lock.Option) *lock.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		t.Fatalf("acquire %q: %v", key, err)
	}
	return lease
}

// mustBeFree fails unless every key can be taken at once.
func mustBeFree(t *testing.T, l lock.Locker, keys ...string) {
	t.Helper()
	for _, k := range keys {
		_ = mustAcquire(t, l, k, lock.TryOnce()).Release(context.Background())
	}
}

// waitHeld returns once someone holds key (the goroutine under test).
func waitHeld(t *testing.T, l lock.Locker, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		lease, err := l.Acquire(context.Background(), key, lock.TryOnce())
		if errors.Is(err, lock.ErrNotAcquired) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		_ = lease.Release(context.Background())
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%q never held", key)
}

// TestAcquireAllKeepsItsPlace is the starvation the hold-wait bound used to
// cause: a key whose line always holds more than the bound of work (30
// goroutines taking turns on b, 50 ms each) is still obtained by a
// two-key order, in about one pass of the line. An order that gave its wait up at the bound and
// queued again went to the back of the line every time and never got b.
func TestAcquireAllKeepsItsPlace(t *testing.T) {
	l := memlock.New()
	var stop atomic.Bool
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop.Store(true)
	for range 30 {
		wg.Go(func() {
			for !stop.Load() {
				lease, err := l.Acquire(context.Background(), "b")
				if err != nil {
					t.Errorf("lone acquire: %v", err)
					return
				}
				time.Sleep(50 * time.Millisecond)
				_ = lease.Release(context.Background())
			}
		})
	}
	time.Sleep(200 * time.Millisecond) // the line is full
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	start := time.Now()
	set, err := lock.AcquireAll(ctx, l, []string{"b", "a"})
	if err != nil {
		t.Fatalf("AcquireAll behind a busy line, after %v: %v", time.Since(start), err)
	}
	if got := []string{set[0].Key(), set[1].Key()}; !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("set %q, want sorted", got)
	}
	t.Logf("AcquireAll after %v (one pass of the line: 30 × 50 ms)", time.Since(start))
	if err := set.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestAcquireAllHoldWaitKeepsPlace: an order holding a while b is held
// elsewhere lets a go after the hold-wait bound, and keeps its place in b's
// line: once b is let go the order gets it before a lone waiter that
// queued for b later.
func TestAcquireAllHoldWaitKeepsPlace(t *testing.T) {
	l := memlock.New()
	holdB := mustAcquire(t, l, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	order := locktest.AcquireAllAsync(ctx, l, []string{"a", "b"}, lock.WithHoldWait(100*time.Millisecond))
	waitHeld(t, l, "a")
	lone := mustAcquire(t, l, "a") // free again once the bound has passed
	later, released := make(chan struct{}, 1), make(chan struct{})
	go func() {
		defer close(released)
		lease := mustAcquire(t, l, "b")
		later <- struct{}{}
		_ = lease.Release(context.Background())
	}()
	time.Sleep(50 * time.Millisecond) // the lone waiter is in b's line, behind the order
	_ = lone.Release(context.Background())
	_ = holdB.Release(context.Background())

	r := <-order
	if r.Err != nil {
		t.Fatalf("AcquireAll: %v", r.Err)
	}
	select {
	case <-later:
		t.Fatal("a waiter that queued for b after the order got b first: the order lost its place")
	default:
	}
	if err := r.Set.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-later
	<-released // b is free only once the lone waiter has let it go
	mustBeFree(t, l, "a", "b")
}

// TestAcquireAllWaitsOutOfOrderHoldingNothing: an order that got its later
// key b after letting a go, and then finds a held, does not wait for a while
// it holds b (that wait, out of sorted order, could close a cycle): it lets
// b go and waits for a holding nothing.
func TestAcquireAllWaitsOutOfOrderHoldingNothing(t *testing.T) {
	l := memlock.New()
	holdB := mustAcquire(t, l, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	order := locktest.AcquireAllAsync(ctx, l, []string{"a", "b"}, lock.WithHoldWait(50*time.Millisecond))
	waitHeld(t, l, "a")
	holdA := mustAcquire(t, l, "a") // once the order has let a go
	_ = holdB.Release(context.Background())

	// The order gets b, finds a held, and lets b go.
	var holdB2 *lock.Lease
	for holdB2 == nil {
		lease, err := l.Acquire(ctx, "b", lock.TryOnce())
		switch {
		case err == nil:
			holdB2 = lease
		case errors.Is(err, lock.ErrNotAcquired) && ctx.Err() == nil:
			time.Sleep(time.Millisecond)
		default:
			t.Fatalf("b never let go while the order waits for a: %v", err)
		}
	}
	_ = holdA.Release(context.Background())
	time.Sleep(100 * time.Millisecond) // the order takes a, waits for b past its bound
	_ = holdB2.Release(context.Background())
	r := <-order
	if r.Err != nil {
		t.Fatalf("AcquireAll: %v", r.Err)
	}
	if err := r.Set.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustBeFree(t, l, "a", "b")
}

// TestAcquireAllContention: workers lock random overlapping sets of keys
// with a short bound; none deadlocks or starves past the deadline, and no
// key is ever held twice at once.
func TestAcquireAllContention(t *testing.T) {
	const workers, rounds = 8, 20
	keys := []string{"k0", "k1", "k2", "k3", "k4"}
	l := memlock.New()
	var mu sync.Mutex
	inUse := map[string]bool{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 3))
			for range rounds {
				pick := slices.DeleteFunc(slices.Clone(keys), func(string) bool { return r.IntN(2) == 0 })
				r.Shuffle(len(pick), func(i, j int) { pick[i], pick[j] = pick[j], pick[i] })
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				set, err := lock.AcquireAll(ctx, l, pick, lock.WithHoldWait(5*time.Millisecond))
				cancel()
				if err != nil {
					t.Errorf("AcquireAll(%q): %v", pick, err)
					return
				}
				mu.Lock()
				for _, lease := range set {
					if inUse[lease.Key()] {
						t.Errorf("%s held twice at once", lease.Key())
					}
					inUse[lease.Key()] = true
				}
				mu.Unlock()
				time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
				mu.Lock()
				for _, lease := range set {
					inUse[lease.Key()] = false
				}
				mu.Unlock()
				if err := set.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	mustBeFree(t, l, keys...)
}

// TestAcquireAllGivesUpCleanly: a try, and a wait that runs out of context
// while holding some keys or after letting them go, fail with their error
// and leave every key free.
func TestAcquireAllGivesUpCleanly(t *testing.T) {
	for _, c := range []struct {
		name     string
		opts     []lock.Option
		deadline time.Duration
		want     error
	}{
		{"try once", []lock.Option{lock.TryOnce()}, 10 * time.Second, lock.ErrNotAcquired},
		{"deadline holding a", []lock.Option{lock.WithHoldWait(time.Hour)}, 100 * time.Millisecond, context.DeadlineExceeded},
		{"deadline after letting a go", []lock.Option{lock.WithHoldWait(20 * time.Millisecond)}, 150 * time.Millisecond, context.DeadlineExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := memlock.New()
			holdC := mustAcquire(t, l, "c")
			ctx, cancel := context.WithTimeout(context.Background(), c.deadline)
			defer cancel()
			set, err := lock.AcquireAll(ctx, l, []string{"c", "a", "b"}, c.opts...)
			if !errors.Is(err, c.want) || set != nil {
				t.Fatalf("AcquireAll = %v, %v; want %v", set, err, c.want)
			}
			mustBeFree(t, l, "a", "b")
			_ = holdC.Release(context.Background())
		})
	}
}

// slowTry is memlock with a try of key slow that takes a round trip, as on
// a networked backend: when it finds the key held, its ErrNotAcquired
// arrives just after the caller's context has ended.
type slowTry struct {
	*memlock.Locker
	slow string
}

func (s slowTry) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	lease, err := s.Locker.Acquire(ctx, key, opts...)
	if key == s.slow && errors.Is(err, lock.ErrNotAcquired) {
		<-ctx.Done()
		time.Sleep(time.Millisecond)
	}
	return lease, err
}

func (s slowTry) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	return lock.EachOnce(ctx, s, keys, opts...)
}

// TestAcquireAllCancelledDuringTry: an AcquireAll whose context ends while
// it tries a key found held, a later key or a smaller one after it let its
// keys go, fails with the context's error, as every cancelled acquisition
// does, not with the try's bare ErrNotAcquired; and leaves every key free.
func TestAcquireAllCancelledDuringTry(t *testing.T) {
	t.Run("later key", func(t *testing.T) {
		m := memlock.New()
		holdB := mustAcquire(t, m, "b")
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		set, err := lock.AcquireAll(ctx, slowTry{m, "b"}, []string{"a", "b"})
		if !errors.Is(err, context.DeadlineExceeded) || set != nil {
			t.Fatalf("AcquireAll whose deadline passed during a try = %v, %v; want context.DeadlineExceeded", set, err)
		}
		mustBeFree(t, m, "a")
		_ = holdB.Release(context.Background())
	})
	t.Run("smaller key", func(t *testing.T) {
		m := memlock.New()
		holdB := mustAcquire(t, m, "b")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		order := locktest.AcquireAllAsync(ctx, slowTry{m, "a"}, []string{"a", "b"}, lock.WithHoldWait(50*time.Millisecond))
		waitHeld(t, m, "a")
		holdA := mustAcquire(t, m, "a") // once the order has let a go
		_ = holdB.Release(context.Background())
		// The order gets b, and its try of a ends with the deadline.
		r := <-order
		if !errors.Is(r.Err, context.DeadlineExceeded) || r.Set != nil {
			t.Fatalf("AcquireAll whose deadline passed during a try = %v, %v; want context.DeadlineExceeded", r.Set, r.Err)
		}
		mustBeFree(t, m, "b")
		_ = holdA.Release(context.Background())
	})
}

// TestEachOnceCancelledDuringTry: a batch whose context ends while it tries
// a key found held fails with the context's error, as a batch whose context
// is done does, rather than report the key held (ErrNotAcquired after the
// deadline may be a try refused until then); nothing stays held.
func TestEachOnceCancelledDuringTry(t *testing.T) {
	m := memlock.New()
	holdB := mustAcquire(t, m, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	b, err := slowTry{m, "b"}.AcquireBatch(ctx, []string{"a", "b"})
	if !errors.Is(err, context.DeadlineExceeded) || b.Leases != nil || b.Held != nil {
		t.Fatalf("AcquireBatch whose deadline passed during a try = %+v, %v; want context.DeadlineExceeded", b, err)
	}
	mustBeFree(t, m, "a")
	_ = holdB.Release(context.Background())
}
