package pglock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

func handleOf(t *testing.T, s *session, key string) *handle {
	t.Helper()
	s.enter(context.Background())
	defer s.leave()
	for h := range s.leases {
		if h.key == key {
			return h
		}
	}
	t.Fatalf("no handle for %q", key)
	return nil
}

func backendPID(s *session) uint32 {
	s.enter(context.Background())
	defer s.leave()
	return s.conn.Conn().PgConn().PID()
}

// TestLateDropLeavesAReusedConnectionAlone: a drop that runs late (its goroutine
// scheduled after the holder released the whole set, the connection back
// in the pool and taken by a new session holding the same key) must not
// touch that connection: it finds s.conn nil and ends nothing live.
func TestLateDropLeavesAReusedConnectionAlone(t *testing.T) {
	dbURL := stacktest.NewDatabase(t, t.Context())
	l, other := newLocker(t, dbURL, WithMaxConns(1)), newLocker(t, dbURL)
	keys := manyKeys(t, 2)
	set, err := lock.AcquireAll(t.Context(), l, keys, lock.WithTTL(5*time.Second), lock.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	s := liveSession(t, l)
	hB := handleOf(t, s, keys[1])
	pid := backendPID(s)
	if err := set.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	again, err := l.Acquire(t.Context(), keys[1], lock.WithTTL(5*time.Second), lock.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	s2 := liveSession(t, l)
	if got := backendPID(s2); got != pid {
		t.Skipf("the pool gave another connection (%d, was %d)", got, pid)
	}
	s.drop(hB, fmt.Errorf("late: %w", lock.ErrLeaseLost))
	if again.Err() != nil || !heldElsewhere(t, other, keys[1]) {
		t.Fatalf("a late drop of the old session hit the new one: Err %v, key held %v", again.Err(), heldElsewhere(t, other, keys[1]))
	}
	if err := again.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestDropOfALapsedLeaseRacesRelease: a lease of a set lapses while its sibling
// is extended; the holder releases (the lapsed lease, the set, the kept
// one, Close) at the very moment, while drop runs. Nothing errs, nothing
// stays held, the connection goes back, no goroutine is left.
func TestDropOfALapsedLeaseRacesRelease(t *testing.T) {
	dbURL := stacktest.NewDatabase(t, t.Context())
	probe := connect(t, dbURL)
	before := runtime.NumGoroutine()
	const ttl = 300 * time.Millisecond
	for i := range 12 {
		l := newLocker(t, dbURL)
		keys := manyKeys(t, 2)
		for j := range keys {
			keys[j] = fmt.Sprintf("%s-%d", keys[j], i)
		}
		set, err := lock.AcquireAll(t.Context(), l, keys, lock.WithTTL(ttl), lock.WithoutWatchdog())
		if err != nil {
			t.Fatal(err)
		}
		kept, lapsed := set[0], set[1]
		stop := make(chan struct{})
		var ext sync.WaitGroup
		ext.Add(1)
		go func() {
			defer ext.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(ttl / 5):
				}
				_, _ = kept.Extend(context.Background())
			}
		}()
		<-lapsed.Done()
		var errs [3]error
		var wg sync.WaitGroup
		switch i % 4 {
		case 0:
			wg.Go(func() { errs[0] = lapsed.Release(context.Background()) })
			wg.Go(func() { errs[1] = kept.Release(context.Background()) })
		case 1:
			wg.Go(func() { errs[0] = set.Release(context.Background()) })
		case 2:
			wg.Go(func() { errs[1] = kept.Release(context.Background()) })
		case 3:
			wg.Go(func() { errs[2] = l.Close() })
		}
		wg.Wait()
		close(stop)
		ext.Wait()
		_ = set.Release(context.Background())
		for _, err := range errs {
			if err != nil {
				t.Errorf("round %d (%d): %v", i, i%4, err)
			}
		}
		if !errors.Is(lapsed.Err(), lock.ErrLeaseLost) {
			t.Errorf("round %d: lapsed Err = %v", i, lapsed.Err())
		}
		waitFor(t, "nothing held", func() bool { return heldAdvisory(t, probe) == 0 })
		waitFor(t, "connection back", func() bool { return l.pool.Stat().AcquiredConns() == 0 })
		_ = l.Close()
	}
	waitFor(t, "goroutines back", func() bool { return runtime.NumGoroutine() <= before+4 })
}
