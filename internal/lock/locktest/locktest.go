// Package locktest is the conformance suite every lock backend passes. A
// backend's test calls Run with a factory for its Locker; the suite checks
// the contract of package lock against the real backend.
package locktest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
)

// Config describes the backend under test.
type Config struct {
	// New returns a new Locker, as a new service instance would create it;
	// the suite closes it.
	New func(t testing.TB) lock.Locker
	// Exclusive is false only for the none backend, which locks nothing.
	Exclusive bool
	// Distributed says that two Lockers from New exclude each other (every
	// backend but none and local, whose state lives in one Locker).
	Distributed bool
	// FIFO says that waiters for a key get it in the order they began to
	// wait, in whichever Lockers from New they wait: the line is kept by the
	// server (Postgres's lock queue, ZooKeeper's sequential nodes, etcd's
	// create revisions) or by the one Locker (memlock). Redis waiters are
	// woken on release with no order across Lockers.
	FIFO bool
	// Expiring says that leases have a TTL (WithTTL, WithoutWatchdog apply).
	Expiring bool
	// Lose, when set, ends the lease for real from outside (expires the
	// session, kills the connection); the suite checks that Done closes.
	// The lease is from Acquire or, the key first of two, AcquireBatch.
	Lose func(t *testing.T, l lock.Locker, lease *lock.Lease)
}

// Key returns a key unique to this test run, valid as a SKU, so suites
// against persistent servers never see each other's state.
func Key(t testing.TB) string {
	return fmt.Sprintf("lt-%016x", rand.Uint64())
}

// Run runs the whole suite.
func Run(t *testing.T, c Config) {
	t.Run("AcquireRelease", func(t *testing.T) { testAcquireRelease(t, c) })
	t.Run("InvalidKey", func(t *testing.T) { testInvalidKey(t, c) })
	t.Run("IndependentKeys", func(t *testing.T) { testIndependentKeys(t, c) })
	t.Run("AcquireAllSorted", func(t *testing.T) { testAcquireAll(t, c) })
	t.Run("Batch", func(t *testing.T) { testBatch(t, c) })
	t.Run("BatchCancelledLeavesNothing", func(t *testing.T) { testBatchCancelled(t, c) })
	t.Run("Extend", func(t *testing.T) { testExtend(t, c) })
	t.Run("Handover", func(t *testing.T) { testHandover(t, c) })
	t.Run("HandoverCancelledReleases", func(t *testing.T) { testHandoverCancelled(t, c) })
	if c.Exclusive {
		t.Run("BatchReportsHeld", func(t *testing.T) { testBatchHeld(t, c, false) })
		if c.Distributed {
			t.Run("BatchReportsHeldBySameLocker", func(t *testing.T) { testBatchHeld(t, c, true) })
		}
		t.Run("BatchExclusion", func(t *testing.T) { testBatchExclusion(t, c) })
	}
	if c.Exclusive {
		t.Run("MutualExclusion", func(t *testing.T) { testExclusion(t, c, false) })
		t.Run("TryOnceHeld", func(t *testing.T) { testTryOnce(t, c) })
		t.Run("CancelledAcquireLeavesNoWaiter", func(t *testing.T) { testCancelledAcquire(t, c) })
	}
	if c.Distributed {
		t.Run("MutualExclusionAcrossLockers", func(t *testing.T) { testExclusion(t, c, true) })
	}
	t.Run("NoDeadlockOverlapping", func(t *testing.T) { testNoDeadlockOverlapping(t, c) })
	if c.Exclusive {
		t.Run("AcquireAllHoldWaitLetsGo", func(t *testing.T) { testHoldWaitLetsGo(t, c) })
		t.Run("AcquireAllBusyKeyNotStarved", func(t *testing.T) { testBusyKeyNotStarved(t, c) })
		t.Run("AcquireAllOutOfOrderHoldingNothing", func(t *testing.T) { testOutOfOrderHoldingNothing(t, c) })
		t.Run("WakeOnRelease", func(t *testing.T) { testWakeOnRelease(t, c) })
		t.Run("WaitDeadlineHonoured", func(t *testing.T) { testWaitDeadline(t, c) })
		t.Run("CancelledWaiterThirdLocker", func(t *testing.T) { testCancelledWaiterThirdLocker(t, c) })
	}
	probe := c.New(t)
	fenced := probe.Fenced()
	_ = probe.Close()
	if fenced {
		t.Run("TokensIncrease", func(t *testing.T) { testTokensIncrease(t, c) })
		t.Run("BatchTokensIncrease", func(t *testing.T) { testBatchTokens(t, c) })
	}
	if c.Expiring {
		t.Run("ExpiryWithoutWatchdog", func(t *testing.T) { testExpiry(t, c, alone) })
		t.Run("BatchExpiryWithoutWatchdog", func(t *testing.T) { testExpiry(t, c, inBatch) })
		t.Run("WatchdogExtends", func(t *testing.T) { testWatchdog(t, c) })
	}
	if c.Lose != nil {
		t.Run("DoneClosesOnLoss", func(t *testing.T) { testLoss(t, c, alone) })
		t.Run("BatchDoneClosesOnLoss", func(t *testing.T) { testLoss(t, c, inBatch) })
	}
	if c.Lose != nil && c.Distributed && c.Exclusive {
		t.Run("ReleaseAfterLossHarmless", func(t *testing.T) { testReleaseAfterLoss(t, c, alone) })
		t.Run("BatchReleaseAfterLossHarmless", func(t *testing.T) { testReleaseAfterLoss(t, c, inBatch) })
	}
	t.Run("CloseLosesLeases", func(t *testing.T) { testClose(t, c) })
}

func newLocker(t *testing.T, c Config) lock.Locker {
	t.Helper()
	l := c.New(t)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// MustAcquire acquires key within 10 s or fails the test.
func MustAcquire(tb testing.TB, l lock.Locker, key string, opts ...lock.Option) *lock.Lease {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		tb.Fatalf("%s: acquire %q: %v", l.Name(), key, err)
	}
	return lease
}

// MustRelease releases lease within 5 s or fails the test.
func MustRelease(tb testing.TB, lease *lock.Lease) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		tb.Fatalf("release %q: %v", lease.Key(), err)
	}
}

// form is how a case takes the lease it checks: alone, or as a key of a
// batch, which its holder lets go with Set.Release (a backend may release a
// batch's leases together, by another path than Lease.Release).
type form bool

const (
	alone   form = false
	inBatch form = true
)

// take acquires key in l in form f within 10 s, or fails the test; it
// returns the lease and how its holder lets it go: Lease.Release, or
// Set.Release of the whole batch (key and key+"-other").
func take(t *testing.T, l lock.Locker, key string, f form, opts ...lock.Option) (*lock.Lease, func(context.Context) error) {
	t.Helper()
	if f == alone {
		lease := MustAcquire(t, l, key, opts...)
		return lease, lease.Release
	}
	b := MustBatch(t, l, []string{key, key + "-other"}, opts...)
	lease := b.Leases.Lease(key)
	if lease == nil || len(b.Leases) != 2 {
		t.Fatalf("batch of %q and its -other got %q, held %q; want both", key, keysOf(b.Leases), b.Held)
	}
	return lease, b.Leases.Release
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func testAcquireRelease(t *testing.T, c Config) {
	l := newLocker(t, c)
	key := Key(t)
	lease := MustAcquire(t, l, key)
	if lease.Key() != key {
		t.Errorf("Key() = %q, want %q", lease.Key(), key)
	}
	if lease.ID().String() == "00000000-0000-0000-0000-000000000000" {
		t.Error("ID() is the nil uuid")
	}
	if err := lease.Err(); err != nil {
		t.Errorf("Err() of a held lease = %v", err)
	}
	if closed(lease.Done()) {
		t.Error("Done() closed while held")
	}
	if l.Fenced() && lease.Token() == 0 {
		t.Error("fenced backend returned token 0")
	}
	ctx, cancel := lease.Context(context.Background())
	defer cancel()
	MustRelease(t, lease)
	if !closed(lease.Done()) {
		t.Error("Done() still open after Release")
	}
	if !errors.Is(lease.Err(), lock.ErrReleased) {
		t.Errorf("Err() after Release = %v, want ErrReleased", lease.Err())
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
		t.Error("lease.Context not cancelled after Release")
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Errorf("second Release = %v, want nil", err)
	}
	// Released means free: the key can be taken again at once.
	MustRelease(t, MustAcquire(t, l, key, lock.TryOnce()))
}

func testInvalidKey(t *testing.T, c Config) {
	l := newLocker(t, c)
	if _, err := l.Acquire(context.Background(), ""); !errors.Is(err, lock.ErrInvalidKey) {
		t.Errorf("Acquire(\"\") = %v, want ErrInvalidKey", err)
	}
}

func testIndependentKeys(t *testing.T, c Config) {
	l := newLocker(t, c)
	a := MustAcquire(t, l, Key(t))
	defer MustRelease(t, a)
	b := MustAcquire(t, l, Key(t)+"b", lock.TryOnce())
	MustRelease(t, b)
}

func testAcquireAll(t *testing.T, c Config) {
	l := newLocker(t, c)
	base := Key(t)
	keys := []string{base + "-c", base + "-a", base + "-b", base + "-a"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	set, err := lock.AcquireAll(ctx, l, keys)
	if err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	if len(set) != 3 {
		t.Fatalf("AcquireAll locked %d keys, want 3 (duplicates once)", len(set))
	}
	for i, want := range []string{base + "-a", base + "-b", base + "-c"} {
		if set[i].Key() != want {
			t.Errorf("set[%d] = %q, want %q (sorted order)", i, set[i].Key(), want)
		}
	}
	if err := set.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if set.Err() == nil {
		t.Error("Set.Err() nil after Release")
	}
}

// testExclusion has goroutines (on one Locker, or on separate Lockers as
// separate service instances would) take turns on one key and checks that no
// two ever held it at once.
func testExclusion(t *testing.T, c Config, across bool) {
	const workers, rounds = 8, 15
	key := Key(t)
	lockers := make([]lock.Locker, workers)
	shared := newLocker(t, c)
	for i := range lockers {
		lockers[i] = shared
		if across {
			lockers[i] = newLocker(t, c)
		}
	}
	var holders, maxHolders atomic.Int32
	counter := 0 // plain int: the race detector sees any overlap too
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				lease, err := lockers[w].Acquire(ctx, key)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if h := holders.Add(1); h > maxHolders.Load() {
					maxHolders.Store(h)
				}
				counter++
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
				holders.Add(-1)
				if err := lease.Release(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("worker: %v", err)
	}
	if m := maxHolders.Load(); m > 1 {
		t.Fatalf("%d holders at once", m)
	}
	if counter != workers*rounds {
		t.Fatalf("counter = %d, want %d (lost update)", counter, workers*rounds)
	}
}

func testTryOnce(t *testing.T, c Config) {
	l := newLocker(t, c)
	key := Key(t)
	held := MustAcquire(t, l, key)
	defer MustRelease(t, held)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := l.Acquire(ctx, key, lock.TryOnce())
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryOnce on a held key = %v, want ErrNotAcquired", err)
	}
	if ctx.Err() != nil {
		t.Fatal("TryOnce waited for the context instead of failing")
	}
}

func testCancelledAcquire(t *testing.T, c Config) {
	l := newLocker(t, c)
	key := Key(t)
	held := MustAcquire(t, l, key)

	pre, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if _, err := l.Acquire(pre, key); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire with a cancelled context = %v, want context.Canceled", err)
	}
	returnedInTime(t, "Acquire with a cancelled context", start, 0)
	for range 3 {
		const d = 150 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), d)
		start := time.Now()
		_, err := l.Acquire(ctx, key)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire past its deadline = %v, want context.DeadlineExceeded", err)
		}
		returnedInTime(t, "Acquire past its deadline", start, d)
	}
	MustRelease(t, held)
	// The abandoned waiters must not stand in the queue: the key is free now.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx, key, lock.TryOnce())
	if err != nil {
		t.Fatalf("Acquire after cancelled waiters: %v (a waiter was left behind)", err)
	}
	MustRelease(t, lease)
}

func testTokensIncrease(t *testing.T, c Config) {
	l := newLocker(t, c)
	key := Key(t)
	var last lock.Token
	for i := range 30 {
		lease := MustAcquire(t, l, key)
		if tok := lease.Token(); tok <= last {
			t.Fatalf("acquisition %d: token %d after %d", i, tok, last)
		}
		last = lease.Token()
		MustRelease(t, lease)
	}
	// Concurrent acquisitions, recorded in the order they held the lock.
	var mu sync.Mutex
	var seq []lock.Token
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			other := newLocker(t, c)
			for range 8 {
				lease := MustAcquire(t, other, key)
				mu.Lock()
				seq = append(seq, lease.Token())
				mu.Unlock()
				MustRelease(t, lease)
			}
		})
	}
	wg.Wait()
	for i, tok := range seq {
		if tok <= last {
			t.Fatalf("concurrent acquisition %d: token %d after %d", i, tok, last)
		}
		last = tok
	}
}

// testExpiry: a lease without watchdog, on a short TTL, reports a deadline
// within that TTL, is reported lost soon after it (far sooner than any
// backend's default TTL, so a backend that ignores WithTTL fails), and
// nobody else gets the key before that deadline: a holder that watches
// Deadline or Done stops in time. b waits for the key from the start, and
// the check is on timestamps, so a busy scheduler cannot fail it. Its
// holder's late release, in form f, must not free the key's new holder.
func testExpiry(t *testing.T, c Config, f form) {
	const ttl = 300 * time.Millisecond
	a, b := newLocker(t, c), newLocker(t, c)
	if !c.Distributed {
		b = a
	}
	key := Key(t)
	old, release := take(t, a, key, f, lock.WithTTL(ttl), lock.WithoutWatchdog())
	acquired := time.Now()
	deadline := old.Deadline()
	if deadline.IsZero() {
		t.Fatal("an expiring lease has no Deadline")
	}
	if deadline.After(acquired.Add(ttl)) {
		t.Fatalf("Deadline %v after acquiring with a %v TTL: WithTTL not honoured", deadline.Sub(acquired), ttl)
	}
	type taken struct {
		lease *lock.Lease
		at    time.Time
		err   error
	}
	next := make(chan taken, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		lease, err := b.Acquire(ctx, key)
		next <- taken{lease, time.Now(), err}
	}()
	select {
	case <-old.Done():
	case <-time.After(time.Until(acquired.Add(expiryBound))):
		t.Fatalf("lease without watchdog still held %v after acquiring it with a %v TTL", expiryBound, ttl)
	}
	if !errors.Is(old.Err(), lock.ErrLeaseLost) {
		t.Fatalf("Err() after expiry = %v, want ErrLeaseLost", old.Err())
	}
	if time.Now().Before(deadline) {
		t.Fatal("Done closed before the validity deadline")
	}
	got := <-next
	if got.err != nil {
		t.Fatalf("acquire after expiry: %v", got.err)
	}
	if got.at.Before(deadline) {
		t.Fatalf("another locker took the key %v before the expired lease's deadline: the holder was told too late",
			deadline.Sub(got.at))
	}
	if a.Fenced() && got.lease.Token() <= old.Token() {
		t.Fatalf("token after expiry %d <= expired holder's %d", got.lease.Token(), old.Token())
	}
	// The expired holder's release must not free the new holder's lock.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := release(ctx); err != nil {
		t.Fatalf("release of the expired lease: %v", err)
	}
	if _, err := a.Acquire(context.Background(), key, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("key free after the expired holder released: %v", err)
	}
	MustRelease(t, got.lease)
}

// expiryBound is how soon after acquiring testExpiry wants a lease of a
// 300 ms TTL lost: room for a busy machine, yet well below the default TTLs
// the backends' suites run with (1.5 s for redis and redlock, 10 s for
// pglock), so a backend that ignores WithTTL cannot pass.
const expiryBound = time.Second

// testWatchdog holds a lease for several times the TTL it sets (and longer
// than the Redis suites' 1.5 s default): only extension keeps it. Its
// deadline moves, and stays within the TTL set, so a backend that extends
// by its default TTL instead fails too.
func testWatchdog(t *testing.T, c Config) {
	// Long enough that a keepalive delayed by a loaded CI machine (-race,
	// packages in parallel) is not a loss: pglock's server ends a session
	// idle past the TTL, as it should, and CI lost one that way at 300 ms
	// and again at 600 ms (a keepalive every TTL/3 leaves 2/3 of the TTL
	// for a stalled process). 1 s stays below the Redis suites' 1.5 s
	// default, so extending by the default instead still fails.
	const ttl = time.Second
	a, b := newLocker(t, c), newLocker(t, c)
	if !c.Distributed {
		b = a
	}
	key := Key(t)
	lease := MustAcquire(t, a, key, lock.WithTTL(ttl))
	first := lease.Deadline()
	if first.IsZero() {
		t.Fatal("an expiring lease has no Deadline")
	}
	time.Sleep(7 * ttl)
	if err := lease.Err(); err != nil {
		t.Fatalf("watchdog lease lost after %v: %v", 7*ttl, err)
	}
	now := lease.Deadline()
	if !now.After(first) {
		t.Fatalf("Deadline did not move in %v (first %v, now %v): not extended", 7*ttl, first, now)
	}
	if now.After(time.Now().Add(ttl)) {
		t.Fatalf("Deadline %v ahead, beyond the %v TTL", time.Until(now), ttl)
	}
	if _, err := b.Acquire(context.Background(), key, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("another locker took a watchdog-extended key: %v", err)
	}
	MustRelease(t, lease)
	MustRelease(t, MustAcquire(t, b, key, lock.TryOnce()))
}

// testExtend: the holder extends its lease itself. On an expiring backend
// a lease without the watchdog, extended every quarter of its TTL, outlives
// that TTL by half again, its token unchanged, and nobody else gets the key
// meanwhile: the extension reached the server. Every extension's deadline
// is within the TTL and never earlier than the last; a lease with no
// deadline (one that lasts as long as its session) answers the zero one.
// After Release, Extend fails with ErrReleased.
func testExtend(t *testing.T, c Config) {
	// The watchdog case's TTL, for the same reason: pglock's server ends a
	// session whose keepalive a loaded machine delayed past a shorter one.
	const ttl = time.Second
	a, b := newLocker(t, c), newLocker(t, c)
	if !c.Distributed {
		b = a
	}
	key := Key(t)
	var opts []lock.Option
	if c.Expiring {
		opts = []lock.Option{lock.WithTTL(ttl), lock.WithoutWatchdog()}
	}
	lease := MustAcquire(t, a, key, opts...)
	token, first := lease.Token(), lease.Deadline()
	last, start := first, time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d, err := lease.Extend(ctx)
		cancel()
		switch {
		case err != nil:
			t.Fatalf("Extend of a held lease, %v after acquiring it: %v", time.Since(start), err)
		case d.IsZero() != first.IsZero():
			t.Fatalf("Extend answered the deadline %v of a lease whose deadline was %v", d, first)
		case d.Before(last):
			t.Fatalf("Extend moved the deadline back by %v", last.Sub(d))
		case c.Expiring && d.After(time.Now().Add(ttl)):
			t.Fatalf("Extend set a deadline %v ahead, beyond the %v TTL", time.Until(d), ttl)
		}
		last = d
		if !c.Expiring || time.Since(start) > ttl*3/2 {
			break
		}
		time.Sleep(ttl / 4)
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost %v after acquiring it: %v", time.Since(start), err)
	}
	if lease.Token() != token {
		t.Fatalf("token %d after Extend, %d before", lease.Token(), token)
	}
	if c.Expiring && !last.After(first) {
		t.Fatalf("deadline %v after extending for %v, first %v: not extended", last, time.Since(start), first)
	}
	if c.Exclusive {
		if _, err := b.Acquire(context.Background(), key, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("another locker took an extended key %v after it was acquired: %v", time.Since(start), err)
		}
	}
	MustRelease(t, lease)
	if _, err := lease.Extend(context.Background()); !errors.Is(err, lock.ErrReleased) {
		t.Fatalf("Extend after Release = %v, want ErrReleased", err)
	}
}

func testLoss(t *testing.T, c Config, f form) {
	l, key, lease, release := lostLease(t, c, f)
	if !errors.Is(lease.Err(), lock.ErrLeaseLost) {
		t.Fatalf("Err() after loss = %v, want ErrLeaseLost", lease.Err())
	}
	if _, err := lease.Extend(context.Background()); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("Extend after loss = %v, want ErrLeaseLost", err)
	}
	_ = release(context.Background()) // must not panic or hang
	other := newLocker(t, c)
	next := MustAcquire(t, other, key)
	if l.Fenced() && next.Token() <= lease.Token() {
		t.Errorf("token after loss %d <= the lost lease's %d", next.Token(), lease.Token())
	}
	MustRelease(t, next)
}

// lostLease acquires a key in a new Locker, in form f, and has the backend
// lose the lease (Config.Lose), waiting for its Done; it returns how the
// holder lets the lease go, as take does.
func lostLease(t *testing.T, c Config, f form) (lock.Locker, string, *lock.Lease, func(context.Context) error) {
	t.Helper()
	l := newLocker(t, c)
	key := Key(t)
	lease, release := take(t, l, key, f)
	c.Lose(t, l, lease)
	select {
	case <-lease.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("Done not closed 15 s after the lease was lost")
	}
	return l, key, lease, release
}

// testClose: Close loses the leases still held, alone or from a batch: Done
// closes, at the latest when the contract allows (the lease's next
// extension, before its deadline) plus closeGrace, Err wraps ErrLeaseLost,
// Release after it returns, and (where Lockers exclude each other) another
// Locker gets the keys.
func testClose(t *testing.T, c Config) {
	l := c.New(t)
	t.Cleanup(func() { _ = l.Close() })
	key := Key(t)
	leases := lock.Set{MustAcquire(t, l, key)}
	b := MustBatch(t, l, []string{key + "-b1", key + "-b2"})
	if len(b.Leases) != 2 {
		t.Fatalf("batch got %q, held %q; want both keys", keysOf(b.Leases), b.Held)
	}
	leases = append(leases, b.Leases...)
	closedAt := time.Now()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, lease := range leases {
		bound := closeGrace + max(lease.Deadline().Sub(closedAt), 0)
		select {
		case <-lease.Done():
		case <-time.After(time.Until(closedAt.Add(bound))):
			t.Fatalf("%s: Done not closed %v after the Locker was closed", lease.Key(), bound)
		}
		if !errors.Is(lease.Err(), lock.ErrLeaseLost) {
			t.Fatalf("%s: Err() after Close = %v, want ErrLeaseLost", lease.Key(), lease.Err())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The connections are gone: these may fail, but return.
	_ = leases[0].Release(ctx)
	_ = b.Leases.Release(ctx)
	if c.Distributed && c.Exclusive {
		other := newLocker(t, c)
		for _, lease := range leases {
			MustRelease(t, MustAcquire(t, other, lease.Key()))
		}
	}
}

// closeGrace is how long past what the contract allows testClose waits for
// a lost lease's Done: room for a loaded machine.
const closeGrace = 5 * time.Second
