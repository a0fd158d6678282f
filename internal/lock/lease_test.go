package lock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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
