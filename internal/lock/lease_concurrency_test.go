package lock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
)

// gateHandle's Extend blocks until its ctx ends (as every backend's does)
// or the test answers it through answer, then says what the test said.
type gateHandle struct {
	calls    atomic.Int32
	released atomic.Int32
	started  chan struct{} // one send per call
	answer   chan time.Time
}

func newGateHandle() *gateHandle {
	return &gateHandle{started: make(chan struct{}, 16), answer: make(chan time.Time)}
}

func (h *gateHandle) Release(context.Context) error { h.released.Add(1); return nil }

func (h *gateHandle) Extend(ctx context.Context) (time.Time, error) {
	h.calls.Add(1)
	h.started <- struct{}{}
	select {
	case d := <-h.answer:
		return d, nil
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

// waitGoroutines waits up to bound for the goroutine count to come back to
// at most base+slack, and fails with the stacks when it does not.
func waitGoroutines(t *testing.T, base, slack int, bound time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for runtime.NumGoroutine() > base+slack {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%s: %d goroutines above the %d before, %v on:\n%s",
				what, runtime.NumGoroutine()-base, base, bound, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLossDuringExtensionIsKept: a lease lost (its session watcher says
// so) while a caller's extension is in flight stays lost when the backend
// then answers success: the caller gets the loss, the deadline does not
// move, OnLost runs once.
func TestLossDuringExtensionIsKept(t *testing.T) {
	const ttl = 2 * time.Second
	h := newGateHandle()
	var lost atomic.Int32
	l, lose := lock.NewLease(lock.LeaseParams{Key: "k", Token: 1, Deadline: time.Now().Add(ttl), TTL: ttl,
		Handle: h, OnLost: func(error) { lost.Add(1) }})
	defer func() { _ = l.Release(context.Background()) }()
	before := l.Deadline()
	errc := make(chan error, 1)
	go func() { _, err := l.Extend(context.Background()); errc <- err }()
	<-h.started
	cause := fmt.Errorf("session expired: %w", lock.ErrLeaseLost)
	lose(cause)
	h.answer <- time.Now().Add(ttl)
	if err := <-errc; !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("Extend whose lease was lost in flight = %v, want ErrLeaseLost", err)
	}
	if l.Err() != cause || !l.Deadline().Equal(before) || lost.Load() != 1 {
		t.Fatalf("Err = %v, Deadline moved %v, OnLost ran %d times; want the session's loss, unmoved, once",
			l.Err(), l.Deadline().Sub(before), lost.Load())
	}
}

// TestReleaseDuringWatchdogExtension: Release while the watchdog's own
// extension is in flight cancels it and returns at once with a backend
// that heeds its context; the lease is released, not lost, and no
// goroutine of the lease is left once Release has returned.
func TestReleaseDuringWatchdogExtension(t *testing.T) {
	const ttl = 3 * time.Second
	base := runtime.NumGoroutine()
	h := newGateHandle()
	var lost atomic.Int32
	// Less than TTL/3 left: the watchdog extends at once.
	l, _ := lock.NewLease(lock.LeaseParams{Key: "k", Token: 1, Deadline: time.Now().Add(ttl / 4), TTL: ttl,
		Watchdog: true, Handle: h, OnLost: func(error) { lost.Add(1) }})
	<-h.started
	start := time.Now()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Fatalf("Release took %v behind the watchdog's extension", took)
	}
	if !errors.Is(l.Err(), lock.ErrReleased) || lost.Load() != 0 || h.released.Load() != 1 || h.calls.Load() != 1 {
		t.Fatalf("Err = %v, OnLost %d, released %d, extensions %d", l.Err(), lost.Load(), h.released.Load(), h.calls.Load())
	}
	waitGoroutines(t, base, 0, time.Second, "after Release during the watchdog's extension")
}

// TestReleaseOfLeaseLostDuringWatchdogExtension: a lease lost while the
// watchdog's extension is in flight is released at once afterwards (the
// extension ends with the release, not at the deadline), and leaves no
// goroutine.
func TestReleaseOfLeaseLostDuringWatchdogExtension(t *testing.T) {
	const ttl = 3 * time.Second
	base := runtime.NumGoroutine()
	h := newGateHandle()
	l, lose := lock.NewLease(lock.LeaseParams{Key: "k", Token: 1, Deadline: time.Now().Add(ttl / 4), TTL: ttl,
		Watchdog: true, Handle: h})
	<-h.started
	lose(fmt.Errorf("session expired: %w", lock.ErrLeaseLost))
	start := time.Now()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Fatalf("Release of a lost lease took %v behind the watchdog's extension", took)
	}
	if !errors.Is(l.Err(), lock.ErrLeaseLost) || h.released.Load() != 1 {
		t.Fatalf("Err = %v, released %d; want the loss kept and one backend release", l.Err(), h.released.Load())
	}
	waitGoroutines(t, base, 0, time.Second, "after Release of a lease lost during the watchdog's extension")
}

// jitterHandle answers after a random pause (heeding its context) with a
// random deadline around a TTL ahead, earlier than the last one at times,
// and fails now and then, as a loss or as a node's hiccup; it counts the
// calls that overlap.
type jitterHandle struct {
	ttl            time.Duration
	busy, overlaps atomic.Int32
	released       atomic.Int32
}

func (h *jitterHandle) Release(context.Context) error { h.released.Add(1); return nil }

func (h *jitterHandle) Extend(ctx context.Context) (time.Time, error) {
	if h.busy.Add(1) > 1 {
		h.overlaps.Add(1)
	}
	defer h.busy.Add(-1)
	select {
	case <-time.After(time.Duration(rand.IntN(3000)) * time.Microsecond):
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
	switch n := rand.IntN(400); {
	case n == 0:
		return time.Time{}, fmt.Errorf("not ours: %w", lock.ErrLeaseLost)
	case n < 8:
		return time.Time{}, errors.New("node hiccup")
	}
	return time.Now().Add(h.ttl/2 + time.Duration(rand.Int64N(int64(h.ttl)))), nil
}

// TestLeaseInvariantsUnderContention races callers' extensions (some giving
// up early), the watchdog, a session watcher's loss, Release and readers
// on many leases, and checks what must hold whatever the interleaving: no
// two extensions overlap; the deadline a reader sees never moves back, and
// never moves once Err says released (an extension that checked the lease
// just before a session watcher's loss may still store its answer: the
// two are concurrent, and the answer came first); a successful Extend
// answers a deadline no later than the lease's; OnLost runs at most once,
// exactly when Err is a loss; the backend is released once; and no
// goroutine of a lease outlives its Release by more than the callers it
// left to finish.
func TestLeaseInvariantsUnderContention(t *testing.T) {
	const leases, ttl = 60, 30 * time.Millisecond
	base := runtime.NumGoroutine()
	var all sync.WaitGroup
	for i := range leases {
		all.Go(func() {
			h := &jitterHandle{ttl: ttl}
			var lost atomic.Int32
			l, lose := lock.NewLease(lock.LeaseParams{Key: "k", Token: lock.Token(i + 1), Deadline: time.Now().Add(ttl),
				TTL: ttl, Watchdog: i%2 == 0, Handle: h, OnLost: func(error) { lost.Add(1) }})
			lctx, cancelCtx := l.Context(context.Background())
			defer cancelCtx()
			stop := make(chan struct{})
			var wg, reader sync.WaitGroup
			reader.Go(func() {
				last := l.Deadline()
				var releasedAt time.Time
				for {
					d, released := l.Deadline(), errors.Is(l.Err(), lock.ErrReleased)
					if d.Before(last) {
						t.Errorf("lease %d: Deadline moved back %v", i, last.Sub(d))
						return
					}
					if !releasedAt.IsZero() && !d.Equal(releasedAt) {
						t.Errorf("lease %d: Deadline moved %v after the lease was released", i, d.Sub(releasedAt))
						return
					}
					if released && releasedAt.IsZero() {
						releasedAt = l.Deadline()
					}
					last = d
					select {
					case <-stop:
						return
					default:
						runtime.Gosched()
					}
				}
			})
			for range 3 {
				wg.Go(func() {
					for {
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(4000))*time.Microsecond)
						d, err := l.Extend(ctx)
						now := l.Deadline()
						cancel()
						if err == nil && d.After(now) {
							t.Errorf("lease %d: Extend answered %v, later than the lease's %v", i, d, now)
						}
						if err != nil && l.Err() != nil {
							return
						}
					}
				})
			}
			time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
			if rand.IntN(3) == 0 {
				lose(fmt.Errorf("session expired: %w", lock.ErrLeaseLost))
			}
			if err := l.Release(context.Background()); err != nil {
				t.Errorf("lease %d: Release: %v", i, err)
			}
			select { // its own goroutine cancels it (context.AfterFunc)
			case <-lctx.Done():
			case <-time.After(time.Second):
			}
			if lctx.Err() == nil || context.Cause(lctx) != l.Err() {
				t.Errorf("lease %d: Context after Release: %v, cause %v; Err %v", i, lctx.Err(), context.Cause(lctx), l.Err())
			}
			wg.Wait()
			close(stop)
			reader.Wait()
			if err := l.Release(context.Background()); err != nil {
				t.Errorf("lease %d: second Release: %v", i, err)
			}
			switch isLost := errors.Is(l.Err(), lock.ErrLeaseLost); {
			case l.Err() == nil:
				t.Errorf("lease %d: held after Release", i)
			case isLost && lost.Load() != 1, !isLost && lost.Load() != 0:
				t.Errorf("lease %d: Err = %v, OnLost ran %d times", i, l.Err(), lost.Load())
			}
			if h.overlaps.Load() != 0 || h.released.Load() != 1 {
				t.Errorf("lease %d: %d extensions overlapped, backend released %d times", i, h.overlaps.Load(), h.released.Load())
			}
		})
	}
	all.Wait()
	// Extensions the callers gave up on end with the releases that
	// cancelled them; their goroutines are gone within a pause.
	waitGoroutines(t, base, 0, time.Second, "after every lease was released")
}

// TestOnLostOnlyOnce: losses reported at once from several watchers, the
// lease's own lapse among them, run OnLost once, with the cause that won.
func TestOnLostOnlyOnce(t *testing.T) {
	for range 200 {
		var lost atomic.Int32
		var got atomic.Value
		l, lose := lock.NewLease(lock.LeaseParams{Key: "k", Token: 1, Deadline: time.Now().Add(time.Millisecond),
			TTL: time.Millisecond, Handle: &ttlHandle{}, OnLost: func(err error) { lost.Add(1); got.Store(err) }})
		var wg sync.WaitGroup
		for j := range 4 {
			wg.Go(func() { lose(fmt.Errorf("watcher %d: %w", j, lock.ErrLeaseLost)) })
		}
		wg.Wait()
		<-l.Done()
		time.Sleep(2 * time.Millisecond) // the lapse, had it not lost the race
		if lost.Load() != 1 || got.Load() != l.Err() {
			t.Fatalf("OnLost ran %d times, last with %v; Err = %v", lost.Load(), got.Load(), l.Err())
		}
		_ = l.Release(context.Background())
	}
}

// TestExtendWithDoneContextStaysLocal: Extend with a context already done
// returns its error without a round trip, every time (take's select chose
// the free turn half the time, and the extension then went on).
func TestExtendWithDoneContextStaysLocal(t *testing.T) {
	var calls atomic.Int32
	l := newFuncLease(time.Minute, func(context.Context) (time.Time, error) {
		calls.Add(1)
		return time.Now().Add(time.Minute), nil
	})
	defer func() { _ = l.Release(context.Background()) }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 100 {
		if _, err := l.Extend(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Extend with a cancelled ctx = %v, want context.Canceled", err)
		}
		time.Sleep(200 * time.Microsecond) // an extension let go on lands, and frees the turn
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d of 100 Extends with a cancelled ctx reached the backend", n)
	}
}
