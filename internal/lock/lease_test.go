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
// while it is released never overlap another extension or the release,
// and nothing reaches the backend after Release returns.
func TestExtendRacesWatchdogAndRelease(t *testing.T) {
	var busy, overlaps, after atomic.Int32
	var released atomic.Bool
	h := &raceHandle{busy: &busy, overlaps: &overlaps, after: &after, released: &released}
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
	time.Sleep(20 * time.Millisecond)
	if overlaps.Load() != 0 || after.Load() != 0 {
		t.Fatalf("%d extensions overlapped another or the release, %d reached the backend after it", overlaps.Load(), after.Load())
	}
}

// raceHandle counts extensions that overlap another or the release, or
// come after it.
type raceHandle struct {
	busy, overlaps, after *atomic.Int32
	released              *atomic.Bool
}

func (h *raceHandle) Extend(context.Context) (time.Time, error) {
	if h.released.Load() {
		h.after.Add(1)
	}
	if h.busy.Add(1) > 1 {
		h.overlaps.Add(1)
	}
	time.Sleep(time.Millisecond)
	h.busy.Add(-1)
	return time.Now().Add(60 * time.Millisecond), nil
}

func (h *raceHandle) Release(context.Context) error {
	if h.busy.Load() != 0 {
		h.overlaps.Add(1)
	}
	h.released.Store(true)
	return nil
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
