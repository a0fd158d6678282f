package lock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
)

// ttlHandle is an in-memory expiring hold, to test the lease's keepalive
// logic apart from any backend.
type ttlHandle struct {
	ttl      time.Duration
	extends  atomic.Int32
	fail     atomic.Bool
	released atomic.Int32
}

func (h *ttlHandle) Release(context.Context) error { h.released.Add(1); return nil }

func (h *ttlHandle) Extend(context.Context) (time.Time, error) {
	if h.fail.Load() {
		return time.Time{}, errors.New("node says no")
	}
	h.extends.Add(1)
	return time.Now().Add(h.ttl), nil
}

func newTTLLease(h *ttlHandle, watchdog bool) (*lock.Lease, func(error)) {
	return lock.NewLease(lock.LeaseParams{Key: "k", Token: 7, Deadline: time.Now().Add(h.ttl), TTL: h.ttl,
		Watchdog: watchdog, Handle: h})
}

func TestWatchdogExtendsUntilRelease(t *testing.T) {
	h := &ttlHandle{ttl: 90 * time.Millisecond}
	l, _ := newTTLLease(h, true)
	time.Sleep(400 * time.Millisecond)
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost despite the watchdog: %v", err)
	}
	if h.extends.Load() < 3 {
		t.Fatalf("%d extensions in 400 ms at TTL/3 = 30 ms", h.extends.Load())
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := h.extends.Load()
	time.Sleep(100 * time.Millisecond)
	if h.extends.Load() != n {
		t.Fatal("watchdog still extending after Release returned")
	}
	_ = l.Release(context.Background())
	if h.released.Load() != 1 {
		t.Fatalf("backend released %d times, want 1", h.released.Load())
	}
}

func TestLeaseLostAtDeadlineWithoutWatchdog(t *testing.T) {
	h := &ttlHandle{ttl: 80 * time.Millisecond}
	l, _ := newTTLLease(h, false)
	select {
	case <-l.Done():
	case <-time.After(time.Second):
		t.Fatal("Done not closed after the TTL")
	}
	if time.Now().Before(l.Deadline()) {
		t.Fatal("Done closed before the deadline")
	}
	if !errors.Is(l.Err(), lock.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l.Err())
	}
	// Release after loss keeps the loss as the cause and still frees the backend.
	_ = l.Release(context.Background())
	if !errors.Is(l.Err(), lock.ErrLeaseLost) || h.released.Load() != 1 {
		t.Fatalf("after Release: Err = %v, released %d", l.Err(), h.released.Load())
	}
}

func TestFailedExtensionLosesLease(t *testing.T) {
	h := &ttlHandle{ttl: time.Second}
	h.fail.Store(true)
	l, _ := newTTLLease(h, true)
	select {
	case <-l.Done():
	case <-time.After(time.Second):
		t.Fatal("a failed extension did not end the lease before its deadline")
	}
	if !errors.Is(l.Err(), lock.ErrLeaseLost) {
		t.Fatalf("Err = %v", l.Err())
	}
}

func TestLoseAndContext(t *testing.T) {
	l, lose := lock.NewLease(lock.LeaseParams{Key: "k", Handle: &ttlHandle{}})
	ctx, cancel := l.Context(context.Background())
	defer cancel()
	cause := errors.Join(lock.ErrLeaseLost, errors.New("session expired"))
	lose(cause)
	lose(errors.New("second cause is ignored"))
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), lock.ErrLeaseLost) || !errors.Is(l.Err(), lock.ErrLeaseLost) {
		t.Fatalf("cause = %v, Err = %v", context.Cause(ctx), l.Err())
	}
	if !l.Deadline().IsZero() {
		t.Fatal("a session lease has a deadline")
	}
}

// TestWatchdogExtendsAShortLeaseAtOnce: a lease handed out with less than
// TTL/3 of its validity left (its acquisition took the rest) is extended
// at once, not left to run out.
func TestWatchdogExtendsAShortLeaseAtOnce(t *testing.T) {
	h := &ttlHandle{ttl: 300 * time.Millisecond}
	l, _ := lock.NewLease(lock.LeaseParams{Key: "k", Token: 7, Deadline: time.Now().Add(60 * time.Millisecond), TTL: h.ttl,
		Watchdog: true, Handle: h})
	defer func() { _ = l.Release(context.Background()) }()
	time.Sleep(150 * time.Millisecond)
	if err := l.Err(); err != nil || h.extends.Load() == 0 {
		t.Fatalf("lease with 60 ms of a 300 ms TTL left: %d extensions, err %v; want extended at once", h.extends.Load(), err)
	}
	if left := time.Until(l.Deadline()); left < 100*time.Millisecond {
		t.Fatalf("validity left %v after the extension, want most of the TTL", left)
	}
}

// TestExtendWithoutWatchdogOutlivesTTL: a holder that took its lease
// without the watchdog keeps it past its TTL by extending it itself, and
// it lapses at the deadline of its last extension once the holder stops.
func TestExtendWithoutWatchdogOutlivesTTL(t *testing.T) {
	h := &ttlHandle{ttl: 90 * time.Millisecond}
	l, _ := newTTLLease(h, false)
	defer func() { _ = l.Release(context.Background()) }()
	first := l.Deadline()
	for range 10 {
		time.Sleep(30 * time.Millisecond)
		d, err := l.Extend(context.Background())
		if err != nil {
			t.Fatalf("Extend of a held lease: %v", err)
		}
		if !d.Equal(l.Deadline()) {
			t.Fatalf("Extend returned %v, Deadline is %v", d, l.Deadline())
		}
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease extended every 30 ms lost within 300 ms at a 90 ms TTL: %v", err)
	}
	if !l.Deadline().After(first.Add(200 * time.Millisecond)) {
		t.Fatalf("Deadline moved %v in 300 ms of extensions", l.Deadline().Sub(first))
	}
	last := l.Deadline()
	select {
	case <-l.Done():
	case <-time.After(time.Second):
		t.Fatal("Done not closed after the holder stopped extending")
	}
	if time.Now().Before(last) || !errors.Is(l.Err(), lock.ErrLeaseLost) {
		t.Fatalf("lapsed %v before the last extension's deadline, Err = %v", time.Until(last), l.Err())
	}
}

// TestExtendFailsOnceTheLeaseEnded: Extend returns the lease's end, lost
// or released, without asking the backend.
func TestExtendFailsOnceTheLeaseEnded(t *testing.T) {
	h := &ttlHandle{ttl: time.Second}
	l, lose := newTTLLease(h, false)
	lose(fmt.Errorf("session expired: %w", lock.ErrLeaseLost))
	if _, err := l.Extend(context.Background()); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("Extend after loss = %v, want ErrLeaseLost", err)
	}
	l, _ = newTTLLease(h, true)
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := h.extends.Load()
	if _, err := l.Extend(context.Background()); !errors.Is(err, lock.ErrReleased) {
		t.Fatalf("Extend after Release = %v, want ErrReleased", err)
	}
	if h.extends.Load() != n {
		t.Fatal("Extend after Release reached the backend")
	}
	session, lose := lock.NewLease(lock.LeaseParams{Key: "k", Handle: &ttlHandle{}})
	if d, err := session.Extend(context.Background()); err != nil || !d.IsZero() {
		t.Fatalf("Extend of a held session lease = %v, %v; want the zero deadline, nil", d, err)
	}
	lose(fmt.Errorf("session expired: %w", lock.ErrLeaseLost))
	if _, err := session.Extend(context.Background()); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("Extend of a lost session lease = %v, want ErrLeaseLost", err)
	}
}

// extendFunc is a hold whose Extend is the function itself.
type extendFunc func(ctx context.Context) (time.Time, error)

func (f extendFunc) Release(context.Context) error { return nil }

func (f extendFunc) Extend(ctx context.Context) (time.Time, error) { return f(ctx) }

func newFuncLease(ttl time.Duration, f extendFunc) *lock.Lease {
	l, _ := lock.NewLease(lock.LeaseParams{Key: "k", Token: 7, Deadline: time.Now().Add(ttl), TTL: ttl, Handle: f})
	return l
}

// TestExtendFailureLosesOnlyWhenLost: the backend saying the lock is no
// longer ours loses the lease; any other failure is returned, and the lease
// stays valid until its deadline.
func TestExtendFailureLosesOnlyWhenLost(t *testing.T) {
	l := newFuncLease(time.Minute, func(context.Context) (time.Time, error) {
		return time.Time{}, errors.New("node timed out")
	})
	if _, err := l.Extend(context.Background()); err == nil || errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("Extend with the node timing out = %v, want its error, not a loss", err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("a transient failure lost the lease: %v", err)
	}
	_ = l.Release(context.Background())

	l = newFuncLease(time.Minute, func(context.Context) (time.Time, error) {
		return time.Time{}, fmt.Errorf("key gone: %w", lock.ErrLeaseLost)
	})
	if _, err := l.Extend(context.Background()); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("Extend of a lock no longer ours = %v, want ErrLeaseLost", err)
	}
	if !errors.Is(l.Err(), lock.ErrLeaseLost) {
		t.Fatalf("lock no longer ours, yet the lease is held: Err = %v", l.Err())
	}
}

// TestExtendNeverMovesDeadlineBack: an extension that answers an earlier
// deadline than the lease has (a slower round trip landing after a faster
// one) leaves the later one.
func TestExtendNeverMovesDeadlineBack(t *testing.T) {
	l := newFuncLease(time.Minute, func(context.Context) (time.Time, error) {
		return time.Now().Add(time.Second), nil
	})
	defer func() { _ = l.Release(context.Background()) }()
	before := l.Deadline()
	d, err := l.Extend(context.Background())
	if err != nil || !d.Equal(before) || !l.Deadline().Equal(before) {
		t.Fatalf("Extend = %v, %v; Deadline %v; want the unchanged %v", d, err, l.Deadline(), before)
	}
}

// TestExtendReturnsWithItsContext: a caller's Extend returns when its ctx
// ends, its backend round trip bounded by the lease's deadline, not by
// ctx, going on (a backend may end a session whose renewal it abandons);
// the lease stays held.
func TestExtendReturnsWithItsContext(t *testing.T) {
	landed := make(chan time.Time, 1)
	l := newFuncLease(time.Second, func(ctx context.Context) (time.Time, error) {
		time.Sleep(150 * time.Millisecond)
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		d := time.Now().Add(time.Second)
		landed <- d
		return d, nil
	})
	defer func() { _ = l.Release(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := l.Extend(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Extend past its ctx = %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Fatalf("Extend returned %v after its 20 ms ctx", took)
	}
	d := <-landed
	if err := l.Err(); err != nil {
		t.Fatalf("a caller giving up on Extend lost the lease: %v", err)
	}
	// The extension lands in the lease's turn: the next one waits for it.
	if _, err := l.Extend(context.Background()); err != nil || l.Deadline().Before(d) {
		t.Fatalf("after the abandoned extension landed: Extend = %v, Deadline %v before its %v", err, l.Deadline(), d)
	}
}

// TestExtendRacesWatchdogAndRelease: callers extending a watchdog lease
// while it is released never overlap one another or the watchdog, every
// Extend during the release returns ErrReleased, and once Release and the
// callers have returned nothing reaches the backend. (A caller's
// extension in flight may overlap the release itself: Release does not
// wait for it, see TestReleaseDoesNotWaitForStuckExtend.)
func TestExtendRacesWatchdogAndRelease(t *testing.T) {
	h := &raceHandle{}
	l, _ := lock.NewLease(lock.LeaseParams{Key: "k", Deadline: time.Now().Add(60 * time.Millisecond),
		TTL: 60 * time.Millisecond, Watchdog: true, Handle: h})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				if _, err := l.Extend(context.Background()); err != nil {
					if !errors.Is(err, lock.ErrReleased) {
						t.Errorf("Extend during Release = %v, want ErrReleased", err)
					}
					return
				}
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	time.Sleep(5 * time.Millisecond) // the last extension in flight lands
	n := h.calls.Load()
	if _, err := l.Extend(context.Background()); !errors.Is(err, lock.ErrReleased) {
		t.Fatalf("Extend after Release = %v, want ErrReleased", err)
	}
	time.Sleep(20 * time.Millisecond)
	if h.overlaps.Load() != 0 || h.calls.Load() != n {
		t.Fatalf("%d extensions overlapped another, %d reached the backend after Release", h.overlaps.Load(), h.calls.Load()-n)
	}
}

// raceHandle counts extensions, and those that overlap another.
type raceHandle struct {
	busy, overlaps, calls atomic.Int32
}

func (h *raceHandle) Extend(context.Context) (time.Time, error) {
	h.calls.Add(1)
	if h.busy.Add(1) > 1 {
		h.overlaps.Add(1)
	}
	time.Sleep(time.Millisecond)
	h.busy.Add(-1)
	return time.Now().Add(60 * time.Millisecond), nil
}

func (h *raceHandle) Release(context.Context) error { return nil }

// stuckHandle's Extend blocks until unblock is closed, whatever its ctx
// says (a backend call stuck in a syscall, a client deaf to its context),
// then answers success, even past ctx's deadline, when succeed is set.
type stuckHandle struct {
	unblock  chan struct{}
	succeed  bool
	calls    atomic.Int32
	released atomic.Int32
}

func (h *stuckHandle) Release(context.Context) error { h.released.Add(1); return nil }

func (h *stuckHandle) Extend(ctx context.Context) (time.Time, error) {
	h.calls.Add(1)
	<-h.unblock
	if err := ctx.Err(); err != nil && !h.succeed {
		return time.Time{}, err
	}
	return time.Now().Add(time.Second), nil
}

// stuckExtend starts a caller's extension of l that h holds up until
// unblock, and returns once the caller has given up on it (its ctx ended)
// with the extension still in flight, in the lease's turn.
func stuckExtend(t *testing.T, l *lock.Lease, h *stuckHandle, unblock time.Duration) {
	t.Helper()
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	time.AfterFunc(unblock, func() { close(h.unblock) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := l.Extend(ctx); !errors.Is(err, context.DeadlineExceeded) || h.calls.Load() != 1 {
		t.Fatalf("stuck Extend = %v after %d backend calls, want its ctx's end after one", err, h.calls.Load())
	}
}

// TestLapseNotDelayedByStuckExtend: a lease that nobody extends but a
// caller whose backend call hangs is lost at its deadline, with the
// watchdog (whose extension waits for the stuck one's turn) or without,
// not when the backend call returns.
func TestLapseNotDelayedByStuckExtend(t *testing.T) {
	for _, wd := range []bool{false, true} {
		t.Run(fmt.Sprint("watchdog=", wd), func(t *testing.T) {
			const ttl = 150 * time.Millisecond
			h := &stuckHandle{unblock: make(chan struct{})}
			l, _ := lock.NewLease(lock.LeaseParams{Key: "k", Token: 1, Deadline: time.Now().Add(ttl), TTL: ttl,
				Watchdog: wd, Handle: h})
			deadline := l.Deadline()
			stuckExtend(t, l, h, 700*time.Millisecond)
			<-l.Done()
			if late := time.Since(deadline); late > 50*time.Millisecond {
				t.Fatalf("lease lost %v past its validity deadline: %v", late, l.Err())
			}
			if !errors.Is(l.Err(), lock.ErrLeaseLost) {
				t.Fatalf("Err = %v, want ErrLeaseLost", l.Err())
			}
		})
	}
}

// TestLateExtensionDoesNotReviveLapsedLease: an extension that answers
// success after the deadline its call was bounded by is dropped: the lease
// lapsed at its deadline stays lost, its deadline unmoved.
func TestLateExtensionDoesNotReviveLapsedLease(t *testing.T) {
	const ttl = 100 * time.Millisecond
	h := &stuckHandle{unblock: make(chan struct{}), succeed: true}
	l, _ := lock.NewLease(lock.LeaseParams{Key: "k", Token: 1, Deadline: time.Now().Add(ttl), TTL: ttl, Handle: h})
	deadline := l.Deadline()
	stuckExtend(t, l, h, 300*time.Millisecond)
	time.Sleep(500 * time.Millisecond) // the extension has landed
	if !errors.Is(l.Err(), lock.ErrLeaseLost) || !l.Deadline().Equal(deadline) {
		t.Fatalf("after a late extension: Err = %v, Deadline moved %v; want lost at the old deadline", l.Err(), l.Deadline().Sub(deadline))
	}
}

// TestReleaseDoesNotWaitForStuckExtend: Release returns at once while a
// caller's extension is stuck in a backend call deaf to the cancellation,
// and the extension's late success does not revive the released lease.
func TestReleaseDoesNotWaitForStuckExtend(t *testing.T) {
	const ttl = 2 * time.Second
	h := &stuckHandle{unblock: make(chan struct{}), succeed: true}
	l, _ := lock.NewLease(lock.LeaseParams{Key: "k", Token: 1, Deadline: time.Now().Add(ttl), TTL: ttl, Handle: h})
	deadline := l.Deadline()
	stuckExtend(t, l, h, 300*time.Millisecond)
	start := time.Now()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Fatalf("Release blocked %v behind a caller's extension", took)
	}
	time.Sleep(400 * time.Millisecond) // the extension has landed
	if !errors.Is(l.Err(), lock.ErrReleased) || !l.Deadline().Equal(deadline) || h.released.Load() != 1 {
		t.Fatalf("after the extension landed: Err = %v, Deadline moved %v, backend released %d times",
			l.Err(), l.Deadline().Sub(deadline), h.released.Load())
	}
}

// ctxHandle's Extend blocks until its ctx ends and says so as a loss, as
// etcdlock and pglock wrap every failure in ErrLeaseLost.
type ctxHandle struct {
	calls    atomic.Int32
	released atomic.Int32
}

func (h *ctxHandle) Release(context.Context) error { h.released.Add(1); return nil }

func (h *ctxHandle) Extend(ctx context.Context) (time.Time, error) {
	h.calls.Add(1)
	<-ctx.Done()
	return time.Time{}, fmt.Errorf("backend: %w: %w", lock.ErrLeaseLost, ctx.Err())
}

// TestReleaseDuringExtend: Release during a caller's extension is prompt
// with a backend that honours the cancellation, the extension's failure is
// no loss, and the caller gets ErrReleased.
func TestReleaseDuringExtend(t *testing.T) {
	for _, wd := range []bool{false, true} {
		t.Run(fmt.Sprint("watchdog=", wd), func(t *testing.T) {
			const ttl = 3 * time.Second
			h := &ctxHandle{}
			var lost atomic.Int32
			l, _ := lock.NewLease(lock.LeaseParams{Key: "k", Token: 1, Deadline: time.Now().Add(ttl), TTL: ttl,
				Watchdog: wd, Handle: h, OnLost: func(error) { lost.Add(1) }})
			errc := make(chan error, 1)
			go func() { _, err := l.Extend(context.Background()); errc <- err }()
			for h.calls.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			start := time.Now()
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 100*time.Millisecond {
				t.Fatalf("Release took %v", took)
			}
			if err := <-errc; !errors.Is(err, lock.ErrReleased) || errors.Is(err, lock.ErrLeaseLost) {
				t.Fatalf("Extend during Release = %v, want ErrReleased only", err)
			}
			if lost.Load() != 0 || !errors.Is(l.Err(), lock.ErrReleased) || h.released.Load() != 1 {
				t.Fatalf("OnLost called %d times, Err = %v, backend released %d times", lost.Load(), l.Err(), h.released.Load())
			}
		})
	}
}

// TestDroppedLeasesLeaveNoGoroutines: callers that give up on Extend and
// drop their leases unreleased leave no goroutine past the deadlines.
func TestDroppedLeasesLeaveNoGoroutines(t *testing.T) {
	const n, ttl = 200, 200 * time.Millisecond
	base := runtime.NumGoroutine()
	h := &ctxHandle{}
	for range n {
		l, _ := lock.NewLease(lock.LeaseParams{Key: "k", Token: 1, Deadline: time.Now().Add(ttl), TTL: ttl, Handle: h})
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_, _ = l.Extend(ctx)
		cancel()
	}
	waitGoroutines(t, base, 2, ttl+time.Second, fmt.Sprintf("a second after the deadline of %d dropped leases", n))
}

// sessionSet is a set of session leases (no deadline, no keepalive) on
// keys, in key order, with the functions that lose each.
func sessionSet(keys ...string) (lock.Set, []func(error)) {
	set := make(lock.Set, len(keys))
	lose := make([]func(error), len(keys))
	for i, k := range keys {
		set[i], lose[i] = lock.NewLease(lock.LeaseParams{Key: k, Handle: &ttlHandle{}})
	}
	return set, lose
}

// TestSetContextAll: the context ends once the last lease of the set has
// ended, lost or released, not before, with the set's Err (its first
// lease's loss) as cause; it ends with its parent, and its cancel ends it
// as context.Canceled, however the leases end later.
func TestSetContextAll(t *testing.T) {
	set, lose := sessionSet("a", "b", "c")
	ctx, stop := set.ContextAll(context.Background())
	defer stop()
	lostA := fmt.Errorf("a: %w", lock.ErrLeaseLost)
	lose[0](lostA)
	_ = set[1].Release(context.Background())
	if ctx.Err() != nil {
		t.Fatalf("ended with a lease still held: %v", context.Cause(ctx))
	}
	lose[2](fmt.Errorf("c: %w", lock.ErrLeaseLost))
	<-ctx.Done()
	if cause := context.Cause(ctx); cause != lostA {
		t.Fatalf("cause = %v, want the set's Err, %v", cause, lostA)
	}

	set, lose = sessionSet("a", "b")
	parent, cancelParent := context.WithCancel(context.Background())
	ctx, stop = set.ContextAll(parent)
	defer stop()
	cancelParent()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("parent cancelled: Err = %v", ctx.Err())
	}

	set, lose = sessionSet("a", "b")
	ctx, stop = set.ContextAll(context.Background())
	stop()
	lose[0](lock.ErrLeaseLost)
	lose[1](lock.ErrLeaseLost)
	if cause := context.Cause(ctx); cause != context.Canceled {
		t.Fatalf("cancelled, then every lease lost: cause = %v, want context.Canceled", cause)
	}
}

// TestSetContextAllCancelLetsGo: contexts whose cancel was called are not
// kept alive by leases that outlive them (a hold's leases serve several
// batches): cancel undoes what ContextAll registered on each lease.
func TestSetContextAllCancelLetsGo(t *testing.T) {
	set, _ := sessionSet("a", "b")
	collected := make(chan struct{})
	func() {
		ctx, stop := set.ContextAll(context.Background())
		runtime.SetFinalizer(ctx, func(any) { close(collected) })
		stop()
	}()
	for range 100 {
		runtime.GC()
		select {
		case <-collected:
			runtime.KeepAlive(set)
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	runtime.KeepAlive(set)
	t.Fatal("a cancelled ContextAll context is still reachable from the set's live leases")
}

// TestWatchdogLapsesThroughItsOwnStuckExtension: the watchdog's extension
// runs on the goroutine that has the only timer on the deadline; a backend
// call deaf to its context must not hold the loss back there either.
func TestWatchdogLapsesThroughItsOwnStuckExtension(t *testing.T) {
	const ttl = 150 * time.Millisecond
	var calls atomic.Int32
	deaf := extendFunc(func(ctx context.Context) (time.Time, error) {
		if calls.Add(1) == 1 {
			time.Sleep(700 * time.Millisecond)
			return time.Time{}, ctx.Err()
		}
		return time.Now().Add(ttl), nil
	})
	l, _ := lock.NewLease(lock.LeaseParams{Key: "k", Token: 1, Deadline: time.Now().Add(ttl), TTL: ttl,
		Watchdog: true, Handle: deaf})
	defer func() { _ = l.Release(context.Background()) }()
	deadline := l.Deadline()
	<-l.Done()
	if late := time.Since(deadline); late > 50*time.Millisecond {
		t.Fatalf("lease lost %v past its validity deadline behind the watchdog's stuck extension: %v", late, l.Err())
	}
}

// TestLeaseAllocations: a lease with a deadline is made and released on
// every hold; its extension turn is made only by a first extension, which
// most holds end before (13 allocations before Extend existed).
func TestLeaseAllocations(t *testing.T) {
	far := extendFunc(func(context.Context) (time.Time, error) { return time.Now().Add(10 * time.Second), nil })
	for _, wd := range []bool{false, true} {
		n := testing.AllocsPerRun(2000, func() {
			l, _ := lock.NewLease(lock.LeaseParams{Key: "k", Token: 1, Deadline: time.Now().Add(10 * time.Second),
				TTL: 10 * time.Second, Watchdog: wd, Handle: far})
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
		if n > 13 {
			t.Errorf("watchdog %v: %.1f allocations a lease, want at most 13", wd, n)
		}
	}
}
