package reservation_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/reservation"
)

// TestGatherAcrossSKUs: orders for different SKUs that arrive while the
// instance's gatherer is busy are placed together: one try of all their
// keys, which also lets the busy batch's lease go (lock.HandoverBatch), one
// claim, one write; an order whose key is held elsewhere, in that try and
// in the next batch's, goes to its SKU's queue and is placed once the key
// is free, and an order refused by the ledger fails alone. Idle again, the
// instance holds nothing.
func TestGatherAcrossSKUs(t *testing.T) {
	const n = 8
	f := gatherFixture(t, n)
	ctx := context.Background()
	f.stock("held", 1)
	f.store.counts()

	// The first order's write waits until the others have gathered.
	first, gathered := f.busyFirst()

	release := f.hold("held")
	var wg, onHeld sync.WaitGroup
	errs := make([]error, n+1)
	for i := range n {
		q := int64(1)
		if i == 3 {
			q = 3 // more than s3 has: refused alone
		}
		wg.Go(func() { _, _, errs[i] = f.svc.Place(ctx, req("", line(fmt.Sprintf("s%d", i), q))) })
	}
	// Last: had it come before s0's order, that one would stay behind it
	// on s0 (each key serves a batch's orders in arrival order).
	waitFor(t, "eight orders gathered", func() bool { return reservation.Gathering(f.svc) == n })
	onHeld.Go(func() { _, _, errs[n] = f.svc.Place(ctx, req("", line("s0", 1), line("held", 1))) })
	waitFor(t, "nine orders gathered", func() bool { return reservation.Gathering(f.svc) == n+1 })
	close(gathered)
	if err := <-first; err != nil {
		t.Fatalf("first order: %v", err)
	}
	wg.Wait()
	waitFor(t, "the order on the held key queued", func() bool { return reservation.Queued(f.svc, "held") == 1 })
	claims, writes := f.store.counts()
	// The first order's claim and write, then the gathered batch's.
	if claims != 2 || len(writes) != 2 || writes[1] != n-1 {
		t.Fatalf("claims %d, writes %v; want the gathered %d orders in one claim and one write", claims, writes, n-1)
	}
	release()
	onHeld.Wait()
	for i, err := range errs {
		switch {
		case i == 3 && !errors.Is(err, inventory.ErrInsufficientStock):
			t.Fatalf("order on s3 = %v, want insufficient stock", err)
		case i != 3 && err != nil:
			t.Fatalf("order %d: %v", i, err)
		}
	}
	if a := f.audit("s0"); !a.Consistent || a.Held != 2 {
		t.Fatalf("audit s0 = %+v, want both its orders held", a)
	}
	if n := f.locker.handedOver.Load(); n != 1 {
		t.Fatalf("%d leases handed over, want the first batch's", n)
	}
	for _, sku := range []string{"first", "s0", "s7", "held"} {
		lease, err := f.locker.Acquire(ctx, sku, lock.TryOnce())
		if err != nil {
			t.Fatalf("%s still held by the idle instance: %v", sku, err)
		}
		_ = lease.Release(ctx)
	}
}

// TestGatherTakesItsKeyAgain: when the gathered batch after a busy one
// needs a key of the busy batch, the busy batch's leases are released
// before the try rather than handed over (which would report that key held
// and send its order to the key's queue, a cycle late): every order is
// placed in the one gathered batch.
func TestGatherTakesItsKeyAgain(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{Gatherers: 1})
	ctx := context.Background()
	f.stock("first", 3)
	f.stock("other", 3)
	f.store.counts()

	first, gathered := f.busyFirst()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, sku := range []string{"first", "other"} {
		wg.Go(func() { _, _, errs[i] = f.svc.Place(ctx, req("", line(sku, 1))) })
	}
	waitFor(t, "two orders gathered", func() bool { return reservation.Gathering(f.svc) == 2 })
	close(gathered)
	if err := <-first; err != nil {
		t.Fatalf("first order: %v", err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("order %d: %v", i, err)
		}
	}
	if n := f.locker.handedOver.Load(); n != 0 {
		t.Fatalf("%d leases handed over; want the busy batch's released first", n)
	}
	if claims, writes := f.store.counts(); claims != 2 || len(writes) != 2 || writes[1] != 2 {
		t.Fatalf("claims %d, writes %v; want both gathered orders in one claim and one write", claims, writes)
	}
}

// TestGatherRidesOnce: an order whose key another holder has when its
// gathered batch tries (and places others) goes back to the head of the
// intake, and the next
// gathered batch, due at once, places it when the key has come free in
// between: no queue, no wait in the key's line, no round of its own.
func TestGatherRidesOnce(t *testing.T) {
	f := gatherFixture(t, 1)
	ctx := context.Background()
	f.stock("held", 1)
	f.store.counts()
	var writes atomic.Int32
	busy, second := make(chan struct{}), make(chan struct{})
	f.store.onWrite(func() {
		switch writes.Add(1) {
		case 1:
			<-busy
		case 2:
			<-second
		}
	})
	stocked := f.locker.waited.Load() // SetStock's, before any order
	release := f.hold("held")
	first := make(chan error, 1)
	go func() { _, _, err := f.svc.Place(ctx, req("", line("first", 1))); first <- err }()
	waitFor(t, "the first batch to write", func() bool { return f.store.tried() == 1 })
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, sku := range []string{"held", "s0"} {
		wg.Go(func() { _, _, errs[i] = f.svc.Place(ctx, req("", line(sku, 1))) })
	}
	waitFor(t, "two orders gathered", func() bool { return reservation.Gathering(f.svc) == 2 })
	close(busy)
	// The batch of both writes s0's order; the order on the held key is
	// back in the intake.
	waitFor(t, "the order on the held key back in the intake", func() bool {
		return f.store.tried() == 2 && reservation.Gathering(f.svc) == 1
	})
	release()
	close(second)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatalf("first order: %v", err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("order %d: %v", i, err)
		}
	}
	if claims, w := f.store.counts(); claims != 3 || len(w) != 3 || w[1] != 1 || w[2] != 1 {
		t.Fatalf("claims %d, writes %v; want the held key's order in the third batch", claims, w)
	}
	if n := f.locker.waited.Load() - stocked; n != 1 {
		t.Fatalf("%d acquisitions waited in a line; want only the test's own hold", n)
	}
	if a := f.audit("held"); !a.Consistent || a.Held != 1 {
		t.Fatalf("audit held = %+v, want its order held", a)
	}
}

// TestGatherLetsGoBeforeLookingUp: a gathered batch that names a SKU this
// instance has not seen yet lets the busy batch's leases go before it asks
// the store about it, rather than keeping their keys from other instances
// for the lookup's round trip (or its timeout, with the database slow).
func TestGatherLetsGoBeforeLookingUp(t *testing.T) {
	f := gatherFixture(t, 0)
	// Made by another instance: this one has not seen it.
	if _, err := f.service(reservation.Coalescing{}).SetStock(context.Background(), "fresh", 1); err != nil {
		t.Fatal(err)
	}
	f.store.counts()
	var heldAtLookup []string
	f.store.mu.Lock()
	f.store.beforeLookup = func(context.Context) {
		if lease, err := f.locker.Acquire(context.Background(), "first", lock.TryOnce()); err != nil {
			heldAtLookup = append(heldAtLookup, "first")
		} else {
			_ = lease.Release(context.Background())
		}
	}
	f.store.mu.Unlock()
	first, gathered := f.busyFirst()
	done := make(chan error, 1)
	go func() { _, _, err := f.svc.Place(context.Background(), req("", line("fresh", 1))); done <- err }()
	waitFor(t, "the order gathered", func() bool { return reservation.Gathering(f.svc) == 1 })
	close(gathered)
	if err := <-first; err != nil {
		t.Fatalf("first order: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the order on the SKU not seen before: %v", err)
	}
	if len(heldAtLookup) > 0 {
		t.Fatalf("keys %v still held by the earlier batch while the store was asked about a new SKU", heldAtLookup)
	}
}

// gatherFixture is a fixture with one gatherer and SKUs s0..s<n-1> of 2
// units each, and "first" (busyFirst's) of 1.
func gatherFixture(t *testing.T, n int) *fixture {
	t.Helper()
	f := newFixture(t, reservation.Coalescing{Gatherers: 1})
	for i := range n {
		f.stock(fmt.Sprintf("s%d", i), 2)
	}
	f.stock("first", 1)
	return f
}

// TestGatherNothingObtainedGoesToLine: a gathered batch that obtained none
// of its keys (a hot SKU another instance keeps for several batches) sends
// its orders to their queues at once: a second try would be a round for
// those keys alone.
func TestGatherNothingObtainedGoesToLine(t *testing.T) {
	f := gatherFixture(t, 0)
	ctx := context.Background()
	f.stock("held", 1)
	release := f.hold("held")
	tried := f.locker.tried.Load()
	first, gathered := f.busyFirst()
	done := make(chan error, 1)
	go func() { _, _, err := f.svc.Place(ctx, req("", line("held", 1))); done <- err }()
	waitFor(t, "the order gathered", func() bool { return reservation.Gathering(f.svc) == 1 })
	close(gathered)
	if err := <-first; err != nil {
		t.Fatalf("first order: %v", err)
	}
	waitFor(t, "the order on the held key queued", func() bool { return reservation.Queued(f.svc, "held") == 1 })
	// busyFirst's try of "first", then one try of "held".
	if n := f.locker.tried.Load() - tried; n != 2 {
		t.Fatalf("%d batch tries of a key; want 2: the held key tried once", n)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("the order on the held key: %v", err)
	}
}

// busyFirst places one order on "first" whose write waits until gathered is
// closed, and returns once that write has started; first is its answer.
func (f *fixture) busyFirst() (first <-chan error, gathered chan struct{}) {
	f.t.Helper()
	gathered = make(chan struct{})
	var once sync.Once
	f.store.onWrite(func() { once.Do(func() { <-gathered }) })
	answer := make(chan error, 1)
	go func() { _, _, err := f.svc.Place(context.Background(), req("", line("first", 1))); answer <- err }()
	waitFor(f.t, "the first batch to write", func() bool { return f.store.tried() == 1 })
	return answer, gathered
}

// plainLocker is the fixture's locker without lock.Handover, as redis and
// redlock are: a gathered batch lets its leases go before answering, and
// the window applies.
type plainLocker struct{ lock.Locker }

// TestGatherWindow: a gatherer whose batch answered with orders waiting
// starts the next once the intake holds as many orders as that batch had,
// and no later than the window from its start; orders sent one after
// another, each once the last is answered, never wait, nor does a lone
// order on an idle instance.
func TestGatherWindow(t *testing.T) {
	const window = 400 * time.Millisecond
	f := newFixture(t, reservation.Coalescing{Gatherers: 1})
	f.svc = reservation.New(reservation.Config{Store: f.store, Locker: plainLocker{f.locker}, LockWait: 5 * time.Second,
		Coalescing: reservation.Coalescing{Gatherers: 1, Window: window}})
	for i := range 10 {
		f.stock(fmt.Sprintf("s%d", i), 2)
	}
	f.stock("first", 1)
	ctx := context.Background()

	for i := range 3 {
		start := time.Now()
		if _, _, err := f.svc.Place(ctx, req("", line(fmt.Sprintf("s%d", i), 1))); err != nil {
			t.Fatalf("order %d one after another: %v", i, err)
		}
		if d := time.Since(start); d >= window {
			t.Fatalf("order %d, sent once the last was answered, took %v: it waited for the window", i, d)
		}
	}
	f.store.counts()

	// Each of the next three writes waits for its gate.
	gates := []chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	var writes atomic.Int32
	f.store.onWrite(func() {
		if k := int(writes.Add(1)) - 1; k < len(gates) {
			<-gates[k]
		}
	})
	var wg sync.WaitGroup
	place := func(sku string) {
		wg.Go(func() {
			if _, _, err := f.svc.Place(ctx, req("", line(sku, 1))); err != nil {
				t.Errorf("order on %s: %v", sku, err)
			}
		})
	}
	place("first")
	waitFor(t, "the first batch to write", func() bool { return f.store.tried() == 1 })
	for _, sku := range []string{"s3", "s4", "s5"} {
		place(sku)
	}
	waitFor(t, "three orders gathered", func() bool { return reservation.Gathering(f.svc) == 3 })
	opened := time.Now()
	close(gates[0])
	waitFor(t, "the three in the next batch", func() bool { return f.store.tried() == 2 })
	if d := time.Since(opened); d >= window {
		t.Fatalf("three orders behind a batch of one started %v after it answered: they filled the batch, no window was due", d)
	}

	// One order behind the batch of three: the gatherer waits, and two more
	// fill the next batch before the window is out.
	place("s6")
	waitFor(t, "one order gathered", func() bool { return reservation.Gathering(f.svc) == 1 })
	close(gates[1])
	waitFor(t, "the gatherer waiting for the intake to fill", func() bool { return reservation.Filling(f.svc) == 1 })
	filled := time.Now()
	place("s7")
	place("s8")
	waitFor(t, "the filled batch", func() bool { return f.store.tried() == 3 })
	if d := time.Since(opened); d >= window {
		// The batch of three began after opened: the window from its
		// start would have ended later than this.
		t.Fatalf("the batch the intake filled started %v after the batch before it: it waited out the window", d)
	}

	// One order behind that batch and nobody else: the window from its start.
	place("s9")
	waitFor(t, "one order gathered", func() bool { return reservation.Gathering(f.svc) == 1 })
	close(gates[2])
	waitFor(t, "the last order", func() bool { return f.store.tried() == 4 })
	if d := time.Since(filled); d < window {
		t.Fatalf("a lone order behind a batch of three went %v after that batch began; want the window, %v", d, window)
	}
	wg.Wait()
	if claims, writes := f.store.counts(); claims != 4 || !slices.Equal(writes, []int{1, 3, 3, 1}) {
		t.Fatalf("claims %d, writes %v; want 4 claims and writes of 1, 3, 3, 1 orders", claims, writes)
	}
}

// TestAnEmptiedQueueLingers: an order for a key whose queue placed several
// orders and emptied a moment ago goes to a queue again, to wait in the
// key's line, rather than to a gatherer, whose try would find the key held
// or take it out of turn; past LineLinger it is gathered again. A queue
// that placed one order (a key of many that was held elsewhere once)
// lingers not at all.
func TestAnEmptiedQueueLingers(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("hot", 10)
	f.stock("cold", 10)
	release := f.hold("cold")
	results := f.queue(f.svc, "cold", req("", line("cold", 1)))
	release()
	if r := results(); r[0].err != nil {
		t.Fatal(r[0].err)
	}
	waitFor(t, "the cold queue emptied", func() bool { return !reservation.Leading(f.svc, "cold") })
	tried := f.locker.tried.Load()
	if _, _, err := f.svc.Place(context.Background(), req("", line("cold", 1))); err != nil {
		t.Fatal(err)
	}
	if f.locker.tried.Load() == tried {
		t.Error("the next order of a queue that placed one was not gathered")
	}

	release = f.hold("hot")
	results = f.queue(f.svc, "hot", req("", line("hot", 1)), req("", line("hot", 1)))
	release()
	for _, r := range results() {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	waitFor(t, "the queue emptied", func() bool { return !reservation.Leading(f.svc, "hot") })
	tried = f.locker.tried.Load()
	release = f.hold("hot")
	results = f.queue(f.svc, "hot", req("", line("hot", 1)))
	if n := f.locker.tried.Load() - tried; n != 0 {
		t.Errorf("the order after the queue emptied was tried %d times; want it in the key's line at once", n)
	}
	release()
	if r := results(); r[0].err != nil {
		t.Fatal(r[0].err)
	}
	waitFor(t, "the queue emptied again", func() bool { return !reservation.Leading(f.svc, "hot") })
	time.Sleep(reservation.LineLinger + 10*time.Millisecond)
	tried = f.locker.tried.Load()
	if _, _, err := f.svc.Place(context.Background(), req("", line("hot", 1))); err != nil {
		t.Fatal(err)
	}
	if f.locker.tried.Load() == tried {
		t.Error("an order past LineLinger was not gathered")
	}
}

// TestSlowLookupIsTheStores: an order whose lock wait runs out while the
// store is still asked whether its SKU exists (the database hung) is
// answered store_unavailable, not lock_unavailable, when its lock wait
// ends: nothing was locked, and the lock servers, which the alert on
// lock_unavailable blames, were never asked. Coalescing off too, where the
// order's own goroutine asks the store: the lookup ends with its lock wait.
func TestSlowLookupIsTheStores(t *testing.T) {
	for _, c := range []reservation.Coalescing{{}, {Disabled: true}} {
		t.Run(fmt.Sprintf("disabled=%v", c.Disabled), func(t *testing.T) {
			f := newFixture(t, reservation.Coalescing{})
			// Made by another instance: the instance below has not seen it.
			f.stock("slow", 1)
			svc := reservation.New(reservation.Config{Store: f.store, Locker: f.locker, LockWait: 200 * time.Millisecond, Coalescing: c})
			f.store.mu.Lock()
			// The database hangs until the statement's context ends, when
			// the driver gives up on it.
			f.store.beforeLookup = func(ctx context.Context) {
				select {
				case <-ctx.Done():
				case <-time.After(1500 * time.Millisecond):
				}
			}
			f.store.mu.Unlock()
			asked := f.locker.tried.Load() + f.locker.waited.Load()
			start := time.Now()
			_, _, err := svc.Place(context.Background(), req("", line("slow", 1)))
			took := time.Since(start)
			if !errors.Is(err, inventory.ErrStoreUnavailable) || errors.Is(err, lock.ErrNotAcquired) {
				t.Errorf("lock wait over during the lookup: %v, want ErrStoreUnavailable", err)
			}
			if took > time.Second {
				t.Errorf("answered after %s; the lock wait is 200ms", took)
			}
			if n := f.locker.tried.Load() + f.locker.waited.Load() - asked; n != 0 {
				t.Errorf("the locker was asked %d times", n)
			}
		})
	}
}

// TestLookupPastTheLockWait: an order whose lock wait is over before its
// SKUs are looked up (spent in a queue, behind another batch; here a lock
// wait of 1 ns) is answered lock_unavailable, as its own timer answers it,
// asking no one: not the store, which a lookup on an ended context would
// blame (store_unavailable) for a wait it had no part in, nor the locker.
func TestLookupPastTheLockWait(t *testing.T) {
	for _, c := range []reservation.Coalescing{{}, {Disabled: true}} {
		t.Run(fmt.Sprintf("disabled=%v", c.Disabled), func(t *testing.T) {
			f := newFixture(t, reservation.Coalescing{})
			// Made by another instance: the instance below has not seen it.
			f.stock("late", 1)
			svc := reservation.New(reservation.Config{Store: f.store, Locker: f.locker, LockWait: time.Nanosecond, Coalescing: c})
			var lookups atomic.Int32
			f.store.mu.Lock()
			f.store.beforeLookup = func(context.Context) { lookups.Add(1) }
			f.store.mu.Unlock()
			asked := f.locker.tried.Load() + f.locker.waited.Load()
			_, _, err := svc.Place(context.Background(), req("", line("late", 1)))
			if !errors.Is(err, lock.ErrNotAcquired) || errors.Is(err, inventory.ErrStoreUnavailable) {
				t.Errorf("lock wait over before the lookup: %v, want ErrNotAcquired", err)
			}
			if n := lookups.Load(); n != 0 {
				t.Errorf("the store was asked %d times", n)
			}
			if n := f.locker.tried.Load() + f.locker.waited.Load() - asked; n != 0 {
				t.Errorf("the locker was asked %d times", n)
			}
		})
	}
}

// TestWaitBehindAStoreCallIsTheStores: an order waiting in the intake while
// the instance's only gatherer is inside a claim the database does not
// answer (another session holds the row) is answered store_unavailable when
// its lock wait ends, not lock_unavailable: no lock was tried for it, and
// the lock servers, which the alert on lock_unavailable blames, did
// nothing wrong. Nothing was written for it, so the answer is definite.
func TestWaitBehindAStoreCallIsTheStores(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	svc := reservation.New(reservation.Config{Store: f.store, Locker: f.locker, LockWait: time.Second})
	for _, s := range []string{"stuck", "behind"} {
		if _, err := svc.SetStock(ctx, s, 5); err != nil {
			t.Fatal(err)
		}
	}
	letGo := f.lockRow("stuck")
	claiming := make(chan struct{})
	var once sync.Once
	f.store.mu.Lock()
	f.store.beforeClaim = func([]inventory.Fence) { once.Do(func() { close(claiming) }) }
	f.store.mu.Unlock()
	first := make(chan error, 1)
	go func() {
		_, _, err := svc.Place(ctx, req("", line("stuck", 1)))
		first <- err
	}()
	<-claiming
	asked := f.locker.tried.Load() + f.locker.waited.Load()
	start := time.Now()
	_, _, err := svc.Place(ctx, req("", line("behind", 1)))
	took := time.Since(start)
	if n := f.locker.tried.Load() + f.locker.waited.Load() - asked; n != 0 {
		t.Errorf("the locker was asked %d times for the order behind", n)
	}
	letGo()
	if err := <-first; err != nil {
		t.Errorf("the stuck order, once its row is free: %v", err)
	}
	if !errors.Is(err, inventory.ErrStoreUnavailable) || errors.Is(err, lock.ErrNotAcquired) || errors.Is(err, inventory.ErrOutcomeUnknown) {
		t.Fatalf("lock wait over behind a stuck claim: %v, want ErrStoreUnavailable, outcome known", err)
	}
	if took < time.Second || took > 3*time.Second {
		t.Errorf("answered after %s; the lock wait is 1s", took)
	}
	if a := f.audit("behind"); !a.Consistent || a.Held != 0 {
		t.Errorf("audit of the order's SKU = %+v, want nothing held", a)
	}
}
