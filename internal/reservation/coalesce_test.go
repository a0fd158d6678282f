package reservation_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/reservation"
)

// TestBatchMixedFits queues six orders behind a held lease so they form one
// batch, and checks that each is decided in arrival order, all lines or
// none, against what the orders before it left.
func TestBatchMixedFits(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 5)
	f.stock("b", 2)
	release := f.hold("a")
	// The first order needs both SKUs, so the leader waits for both leases
	// and every order after it is covered.
	results := f.queue(f.svc, "a",
		req("", line("b", 1), line("a", 1)), // fits, queued on a, its lowest SKU: a 4, b 1
		req("", line("a", 2)),               // fits: a 2
		req("", line("a", 1), line("b", 3)), // b is short: a untouched
		req("", line("a", 4)),               // a is short
		req("", line("a", 2)),               // fits: a 0
		req("", line("a", 1)),               // sold out
	)
	release()
	got := results()
	want := []error{nil, nil, inventory.ErrInsufficientStock, inventory.ErrInsufficientStock, nil, inventory.ErrInsufficientStock}
	for i, r := range got {
		if !errors.Is(r.err, want[i]) || (want[i] == nil) != (r.err == nil) {
			t.Fatalf("order %d: %v, want %v", i, r.err, want[i])
		}
	}
	var se *inventory.StockError
	if !errors.As(got[2].err, &se) || se.SKU != "b" || se.Available != 1 {
		t.Fatalf("order 2 error = %v, want short on b with 1 available", got[2].err)
	}
	for _, i := range []int{0, 1, 4} {
		for _, l := range got[i].o.Lines {
			if l.FenceToken == 0 || got[i].o.Status != inventory.StatusReserved {
				t.Fatalf("order %d: %+v, want reserved lines with their lease's token", i, got[i].o)
			}
		}
	}
	claims, writes := f.store.counts()
	if claims != 1 || len(writes) != 1 || writes[0] != 3 {
		t.Fatalf("claims %d, writes %v; want one claim and one write of 3 orders", claims, writes)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 5 || a.Available != 0 {
		t.Fatalf("audit a = %+v", a)
	}
	if b := f.audit("b"); !b.Consistent || b.Held != 1 || b.Available != 1 {
		t.Fatalf("audit b = %+v", b)
	}
}

// TestBatchUnknownSKU: an order naming a SKU that does not exist fails on
// its own; the rest of its batch is placed.
func TestBatchUnknownSKU(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 5)
	release := f.hold("a")
	results := f.queue(f.svc, "a",
		req("", line("a", 1)),
		req("", line("a", 1), line("zz-missing", 1)),
		req("", line("a", 1)),
	)
	release()
	got := results()
	if got[0].err != nil || got[2].err != nil || !errors.Is(got[1].err, inventory.ErrUnknownSKU) {
		t.Fatalf("results: %v, %v, %v; want ok, unknown_sku, ok", got[0].err, got[1].err, got[2].err)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 2 {
		t.Fatalf("audit = %+v", a)
	}
}

// TestBatchIdempotency: duplicates of an order queued in the same instance
// are in flight, replays after it return it, a reused key is refused, and an
// order refused inside a batch leaves its key free.
func TestBatchIdempotency(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	f.stock("a", 10)
	release := f.hold("a")
	results := f.queue(f.svc, "a",
		req("k-1", line("a", 3)),
		req("k-2", line("a", 9)), // short after k-1: its key must be freed
		req("", line("a", 2)),
		req("k-3", line("a", 1)),
	)
	// Duplicates of a queued order, sent while it waits: one order, the
	// others are told it is in flight.
	var wg sync.WaitGroup
	var inFlight atomic.Int32
	for range 8 {
		wg.Go(func() {
			_, _, err := f.svc.Place(ctx, req("k-1", line("a", 3)))
			if errors.Is(err, inventory.ErrIdempotencyInFlight) {
				inFlight.Add(1)
			} else {
				t.Errorf("duplicate while queued: %v", err)
			}
		})
	}
	wg.Wait()
	release()
	got := results()
	if inFlight.Load() != 8 {
		t.Fatalf("%d of 8 duplicates were in flight", inFlight.Load())
	}
	if got[0].err != nil || !errors.Is(got[1].err, inventory.ErrInsufficientStock) || got[2].err != nil || got[3].err != nil {
		t.Fatalf("batch results: %v %v %v %v", got[0].err, got[1].err, got[2].err, got[3].err)
	}
	o, replayed, err := f.svc.Place(ctx, req("k-1", line("a", 3)))
	if err != nil || !replayed || o.ID != got[0].o.ID {
		t.Fatalf("replay of k-1 = %+v, %v, %v; want the first order", o, replayed, err)
	}
	if _, _, err := f.svc.Place(ctx, req("k-1", line("a", 4))); !errors.Is(err, inventory.ErrIdempotencyReused) {
		t.Fatalf("k-1 with another body = %v, want ErrIdempotencyReused", err)
	}
	// k-2 failed, so its retry is judged afresh and, with stock, placed.
	f.stock("a", 20)
	if o, replayed, err := f.svc.Place(ctx, req("k-2", line("a", 9))); err != nil || replayed {
		t.Fatalf("retry of refused k-2 = %+v, %v, %v; want a new order", o, replayed, err)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 3+2+1+9 {
		t.Fatalf("audit = %+v", a)
	}
}

// TestBatchReplay: keys are not looked up before an order queues, so a
// replay of a placed order runs in a batch. While there is stock, the write
// refuses its key and the others are decided and written again without it
// (the last order fits only then); once the stock is gone, the ledger
// refuses it. Either way it answers as the first order, and no unit is held
// twice.
func TestBatchReplay(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	f.stock("a", 5)
	first, _, err := f.svc.Place(ctx, req("k-1", line("a", 2)))
	if err != nil {
		t.Fatal(err)
	}
	release := f.hold("a")
	results := f.queue(f.svc, "a", req("", line("a", 1)), req("k-1", line("a", 2)), req("", line("a", 2)))
	release()
	got := results()
	if got[0].err != nil || got[2].err != nil {
		t.Fatalf("the replay's batch: %v, %v; want both placed", got[0].err, got[2].err)
	}
	if r := got[1]; r.err != nil || !r.replayed || r.o.ID != first.ID {
		t.Fatalf("replay in a batch = %+v; want the first order, replayed", r)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 5 || a.Available != 0 {
		t.Fatalf("audit = %+v, want 5 held, none left", a)
	}
	o, replayed, err := f.svc.Place(ctx, req("k-1", line("a", 2)))
	if err != nil || !replayed || o.ID != first.ID {
		t.Fatalf("replay when sold out = %+v, %v, %v; want the first order", o, replayed, err)
	}
}

// TestBatchKeyTakenAcrossInstances: duplicates sent to two instances both
// queue (neither key is written yet); the batch that writes second is
// refused for that key alone, its other orders are written on a retry under
// the same leases, and the duplicate answers as a replay of the first (or,
// with another body, as a reused key). No unit is held twice.
func TestBatchKeyTakenAcrossInstances(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	svc2 := f.service(reservation.Coalescing{})
	f.stock("a", 20)
	release := f.hold("a")
	got1 := f.queue(f.svc, "a", req("k-1", line("a", 3)), req("k-r", line("a", 1)))
	got2 := f.queue(svc2, "a", req("k-1", line("a", 3)), req("k-x", line("a", 2)), req("", line("a", 1)),
		req("k-r", line("a", 2)))
	release()
	r1, r2 := got1(), got2()
	if r1[0].err != nil || r2[0].err != nil || r1[0].o.ID != r2[0].o.ID || r1[0].replayed == r2[0].replayed {
		t.Fatalf("k-1 on two instances = %+v / %+v; want one order, replayed once", r1[0], r2[0])
	}
	if r2[1].err != nil || r2[2].err != nil {
		t.Fatalf("the rest of the refused batch: %v, %v", r2[1].err, r2[2].err)
	}
	// k-r: whichever batch wrote first holds it; the other body is refused.
	placed, reused := r1[1], r2[3]
	if placed.err != nil {
		placed, reused = reused, placed
	}
	if placed.err != nil || !errors.Is(reused.err, inventory.ErrIdempotencyReused) {
		t.Fatalf("k-r with two bodies = %v / %v; want one placed, one reused", r1[1].err, r2[3].err)
	}
	held := 3 + 2 + 1 + placed.o.Lines[0].Quantity
	if a := f.audit("a"); !a.Consistent || a.Held != held {
		t.Fatalf("audit = %+v, want %d held", a, held)
	}
}

// TestKeyTakenUncoalesced: the same race with every order on its own.
func TestKeyTakenUncoalesced(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{Disabled: true})
	svc2 := f.service(reservation.Coalescing{Disabled: true})
	f.stock("a", 20)
	release := f.hold("a")
	var wg sync.WaitGroup
	var got [2]result
	for i, svc := range []*reservation.Service{f.svc, svc2} {
		wg.Go(func() {
			o, replayed, err := svc.Place(context.Background(), req("k-1", line("a", 3)))
			got[i] = result{o, replayed, err}
		})
	}
	// Both wait for the lease held above (or one finds the other's order
	// by its key first, if it is late: the answer is the same).
	time.Sleep(50 * time.Millisecond)
	release()
	wg.Wait()
	if got[0].err != nil || got[1].err != nil || got[0].o.ID != got[1].o.ID || got[0].replayed == got[1].replayed {
		t.Fatalf("k-1 on two instances = %+v / %+v; want one order, replayed once", got[0], got[1])
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 3 {
		t.Fatalf("audit = %+v", a)
	}
}

// TestBatchLeaseLost loses the batch's lease between its claim and its
// write: every order of the batch is answered with the loss, nothing is
// written, and keyed orders free their keys.
func TestBatchLeaseLost(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	f.stock("a", 10)
	f.store.onClaim(func([]inventory.Fence) { f.locker.loseLease("a") })
	release := f.hold("a")
	results := f.queue(f.svc, "a",
		req("lost-1", line("a", 1)),
		req("", line("a", 2)),
		req("", line("a", 20)), // refused on the ledger, but its batch failed
	)
	release()
	for i, r := range results() {
		if !errors.Is(r.err, lock.ErrLeaseLost) {
			t.Fatalf("order %d = %v, want ErrLeaseLost", i, r.err)
		}
	}
	if _, writes := f.store.counts(); len(writes) != 0 {
		t.Fatalf("writes after a lost lease: %v", writes)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 0 || a.Available != 10 {
		t.Fatalf("audit = %+v", a)
	}
	f.store.onClaim(nil)
	if _, replayed, err := f.svc.Place(ctx, req("lost-1", line("a", 1))); err != nil || replayed {
		t.Fatalf("retry of lost-1 = %v (replayed %v), want a new order", err, replayed)
	}
}

// TestBatchLeaseLostWithKeyTaken: a write refused for a replay's key while
// the lease is lost is not written again without that key: every order is
// answered for the loss (the replay still as a replay), and the loss is
// counted once.
func TestBatchLeaseLostWithKeyTaken(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	lost := &lossCounter{}
	svc := reservation.New(reservation.Config{Store: f.store, Locker: f.locker, Observer: lost, LockWait: 5 * time.Second})
	ctx := context.Background()
	f.stock("a", 10)
	first, _, err := svc.Place(ctx, req("k-1", line("a", 1)))
	if err != nil {
		t.Fatal(err)
	}
	f.store.onWrite(func() { f.locker.loseLease("a") })
	release := f.hold("a")
	results := f.queue(svc, "a", req("k-1", line("a", 1)), req("", line("a", 2)))
	release()
	got := results()
	f.store.onWrite(nil)
	if r := got[0]; r.err != nil || !r.replayed || r.o.ID != first.ID {
		t.Fatalf("the replay = %+v; want the first order", r)
	}
	// Its answer is the loss alone (503 lock_unavailable), not the replay's
	// refusal, which would read as 409 idempotency_key_in_flight.
	if !errors.Is(got[1].err, lock.ErrLeaseLost) || errors.Is(got[1].err, inventory.ErrIdempotencyInFlight) {
		t.Fatalf("the other order = %v, want ErrLeaseLost alone", got[1].err)
	}
	if n := lost.lost.Load(); n != 1 {
		t.Fatalf("%d leases counted lost, want 1", n)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 1 {
		t.Fatalf("audit = %+v, want the first order's unit alone", a)
	}
}

// TestBatchStaleWrite: the batch's lease ends without the holder noticing
// and a newer holder claims the row before the batch writes. The fence
// rejects the write: every order is answered stale_fence, none is written.
func TestBatchStaleWrite(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 10)
	f.store.onClaim(func(fences []inventory.Fence) {
		newer := inventory.Fence{SKU: "a", Token: fences[0].Token + 1000, Holder: fences[0].Holder}
		newer.Holder[0] ^= 0xff // another lease
		if _, err := f.store.Store.Claim(context.Background(), []inventory.Fence{newer}, false); err != nil {
			t.Errorf("newer claim: %v", err)
		}
	})
	release := f.hold("a")
	results := f.queue(f.svc, "a", req("", line("a", 1)), req("", line("a", 2)), req("", line("a", 3)))
	release()
	for i, r := range results() {
		if !errors.Is(r.err, inventory.ErrStaleFence) {
			t.Fatalf("order %d = %v, want ErrStaleFence", i, r.err)
		}
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 0 || a.Available != 10 {
		t.Fatalf("audit = %+v", a)
	}
}

// TestClientLeavesQueue: an order whose client gives up while it is queued
// is dropped undecided, and its key is free again.
func TestClientLeavesQueue(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 10)
	release := f.hold("a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := f.svc.Place(ctx, req("gone", line("a", 4)))
		done <- err
	}()
	waitFor(t, "order queued", func() bool { return reservation.Queued(f.svc, "a") == 1 })
	results := f.queue(f.svc, "a", req("", line("a", 1)))
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled order = %v, want context.Canceled", err)
	}
	release()
	if got := results(); got[0].err != nil {
		t.Fatalf("order queued after it = %v", got[0].err)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 1 {
		t.Fatalf("audit = %+v, want only the second order held", a)
	}
	if _, replayed, err := f.svc.Place(context.Background(), req("gone", line("a", 4))); err != nil || replayed {
		t.Fatalf("retry of the dropped order = %v (replayed %v)", err, replayed)
	}
}

// TestQueuedLockWait: an order queued behind a lease held elsewhere is
// answered lock_unavailable after its lock wait, like an order alone.
func TestQueuedLockWait(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 10)
	svc := reservation.New(reservation.Config{Store: f.store, Locker: f.locker, LockWait: 150 * time.Millisecond})
	defer f.hold("a")()
	start := time.Now()
	_, _, err := svc.Place(context.Background(), req("", line("a", 1)))
	if !errors.Is(err, lock.ErrNotAcquired) || time.Since(start) > 2*time.Second {
		t.Fatalf("Place behind a held lease = %v after %s, want ErrNotAcquired after 150ms", err, time.Since(start))
	}
}

// TestWaitInLineIsTheLocks: an order queued behind its own instance's
// batch, which holds the key through a chaos pause longer than the
// order's lock wait, is answered lock_unavailable when the wait ends, as
// a wait for the key: no lock was tried for it, but a wait in line cannot
// be told apart from one for the lock by a look at its end, and no store
// call held it.
func TestWaitInLineIsTheLocks(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 10)
	svc := reservation.New(reservation.Config{Store: f.store, Locker: f.locker, LockWait: 300 * time.Millisecond})
	paused := make(chan error, 1)
	go func() {
		_, _, err := svc.Place(reservation.WithPause(context.Background(), time.Second), req("", line("a", 1)))
		paused <- err
	}()
	waitFor(t, "the paused batch", func() bool { return reservation.Leading(svc, "a") && reservation.Queued(svc, "a") == 0 })
	asked := f.locker.tried.Load() + f.locker.waited.Load()
	_, _, err := svc.Place(context.Background(), req("", line("a", 1)))
	if n := f.locker.tried.Load() + f.locker.waited.Load() - asked; n != 0 {
		t.Errorf("the locker was asked %d times for the order in line", n)
	}
	if !errors.Is(err, lock.ErrNotAcquired) || errors.Is(err, inventory.ErrStoreUnavailable) {
		t.Fatalf("lock wait over in line: %v, want ErrNotAcquired", err)
	}
	if err := <-paused; err != nil {
		t.Fatalf("paused order = %v", err)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 1 {
		t.Fatalf("audit = %+v, want only the paused order held", a)
	}
}

// TestDecidedOrderAnswersAtItsDeadline: an order already decided into its
// batch when its request's deadline passes, the batch stuck in a claim the
// database does not answer (another session holds the row), is answered
// at its deadline (and a short grace), not when the claim and the write
// are done: they are bounded only by the store's timeouts, past the HTTP
// server's write deadline. The batch may still write it, so the answer is
// a timeout whose outcome is unknown; once written, a retry with its key
// replays it, and it is held once.
func TestDecidedOrderAnswersAtItsDeadline(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 5)
	letGo := f.lockRow("a")
	claiming := make(chan struct{})
	var once sync.Once
	f.store.mu.Lock()
	f.store.beforeClaim = func([]inventory.Fence) { once.Do(func() { close(claiming) }) }
	f.store.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := f.svc.Place(ctx, req("k-late", line("a", 1)))
	took := time.Since(start)
	select {
	case <-claiming:
	default:
		t.Fatalf("answered %v before its batch's claim", err)
	}
	if !errors.Is(err, inventory.ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("decided order past its deadline = %v, want DeadlineExceeded with ErrOutcomeUnknown", err)
	}
	if took > 1500*time.Millisecond {
		t.Fatalf("answered after %s, its deadline 500ms: it waited for its batch's claim", took)
	}
	letGo()
	o, replayed, err := f.svc.Place(context.Background(), req("k-late", line("a", 1)))
	if err != nil || !replayed {
		t.Fatalf("retry with the key = %+v, replayed %v, %v; want the late batch's order, replayed", o, replayed, err)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 1 {
		t.Fatalf("audit = %+v, want the order held once", a)
	}
}

// TestCoalescedHammer is the three-instance hammer inside one process:
// three Services share one fenced lock and one database, 64 clients order
// one unit of one hot SKU, a few give up early. Exactly the stock is
// reserved, the audit is clean, and batches really form.
func TestCoalescedHammer(t *testing.T) {
	for _, c := range []reservation.Coalescing{{}, {Disabled: true}, {MaxBatch: 3, MaxBatches: 1}} {
		name := map[bool]string{false: "on", true: "off"}[c.Disabled]
		if c.MaxBatch == 3 {
			name = "small batches"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, c)
			const stock, orders, clients = 150, 400, 64
			f.stock("hot", stock)
			svcs := []*reservation.Service{f.svc, f.service(c), f.service(c)}
			var next, created, short, gone atomic.Int64
			var wg sync.WaitGroup
			for i := range clients {
				wg.Go(func() {
					for n := next.Add(1); n <= orders; n = next.Add(1) {
						ctx, cancel := context.WithCancel(context.Background())
						// A client that leaves early. Alone, an order whose
						// context ends during its write may land while its
						// client hears an error, which would spoil the count;
						// queued, it is either dropped undecided or answered.
						if !c.Disabled && n%17 == 0 {
							time.AfterFunc(time.Duration(rand.IntN(2000))*time.Microsecond, cancel)
						}
						_, _, err := svcs[(i+int(n))%len(svcs)].Place(ctx, req("", line("hot", 1)))
						cancel()
						switch {
						case err == nil:
							created.Add(1)
						case errors.Is(err, inventory.ErrInsufficientStock):
							short.Add(1)
						case errors.Is(err, context.Canceled):
							gone.Add(1)
						default:
							t.Errorf("order: %v", err)
						}
					}
				})
			}
			wg.Wait()
			claims, writes := f.store.counts()
			t.Logf("created %d, insufficient %d, left %d; %d claims, %d writes", created.Load(), short.Load(), gone.Load(),
				claims, len(writes))
			a := f.audit("hot")
			if !a.Consistent || a.Held != created.Load() || created.Load() != stock {
				t.Fatalf("audit %+v with %d created; want exactly %d held, consistent", a, created.Load(), stock)
			}
			if !c.Disabled && len(writes) >= stock {
				t.Errorf("%d writes for %d orders: no batch formed", len(writes), stock)
			}
		})
	}
}

// TestHoldAcrossBatches: with more orders queued than one batch takes, the
// leader keeps its leases for the next batches without claiming again, up to
// MaxBatches; then it lets go and acquires (and claims) anew.
func TestHoldAcrossBatches(t *testing.T) {
	for _, c := range []struct {
		maxBatches, claims int
	}{{4, 1}, {2, 2}, {1, 3}} {
		// MaxHold out of the way: on a loaded machine three writes can take
		// longer than the default 50ms, and this test is about MaxBatches.
		f := newFixture(t, reservation.Coalescing{MaxBatch: 2, MaxBatches: c.maxBatches, MaxHold: time.Minute})
		f.stock("a", 100)
		release := f.hold("a")
		reqs := make([]inventory.PlaceRequest, 6)
		for i := range reqs {
			reqs[i] = req("", line("a", int64(i+1)))
		}
		results := f.queue(f.svc, "a", reqs...)
		release()
		for i, r := range results() {
			if r.err != nil {
				t.Fatalf("max batches %d: order %d: %v", c.maxBatches, i, r.err)
			}
		}
		claims, writes := f.store.counts()
		if claims != c.claims || len(writes) != 3 {
			t.Fatalf("max batches %d: %d claims, writes %v; want %d claims, 3 writes of 2", c.maxBatches, claims, writes, c.claims)
		}
		if a := f.audit("a"); !a.Consistent || a.Held != 21 || a.Available != 79 {
			t.Fatalf("max batches %d: audit %+v", c.maxBatches, a)
		}
	}
}

// sectionClock records what a SectionObserver is told.
type sectionClock struct {
	mu    sync.Mutex
	holds []time.Duration
	calls map[string][]time.Duration
}

func (*sectionClock) LockWait(time.Duration) {}
func (*sectionClock) StaleFence()            {}
func (*sectionClock) LeaseLost()             {}

func (c *sectionClock) LockHeld(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holds = append(c.holds, d)
}

func (c *sectionClock) StoreCall(call string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[call] = append(c.calls[call], d)
}

// TestSectionObserved: a batch's hold is told once, when its leases go,
// and it spans the claim and the write made under it, each told once.
func TestSectionObserved(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	clock := &sectionClock{calls: map[string][]time.Duration{}}
	svc := reservation.New(reservation.Config{Store: f.store, Locker: f.locker, Observer: clock, LockWait: 5 * time.Second})
	f.stock("a", 10)
	f.store.onWrite(func() { time.Sleep(20 * time.Millisecond) })
	release := f.hold("a")
	results := f.queue(svc, "a", req("", line("a", 1)), req("", line("a", 2)), req("", line("a", 3)))
	release()
	for i, r := range results() {
		if r.err != nil {
			t.Fatalf("order %d: %v", i, r.err)
		}
	}
	f.store.onWrite(nil)
	clock.mu.Lock()
	defer clock.mu.Unlock()
	claims, writes := clock.calls[reservation.StoreClaim], clock.calls[reservation.StoreWrite]
	if len(clock.holds) != 1 || len(claims) != 1 || len(writes) != 1 {
		t.Fatalf("told %d holds, %d claims, %d writes; want one batch: 1, 1, 1", len(clock.holds), len(claims), len(writes))
	}
	if writes[0] < 20*time.Millisecond || clock.holds[0] < claims[0]+writes[0] {
		t.Fatalf("hold %v, claim %v, write %v: the write took 20ms, and the hold spans both", clock.holds[0], claims[0], writes[0])
	}
}

// TestQueueHeadWaitsForItsOwnKeys: an order at the head of a key's line
// waits for its own SKUs, not for a SKU only an order behind it needs. The
// leader is busy writing an earlier batch while {a}, {a,b} and {a} queue on
// a, with b held elsewhere throughout; its lease then goes (one batch a
// lease), so it waits anew for what the queue's head needs. {a} first is
// placed; {a,b} waits for b and runs out of lock wait; {a} behind it waits
// in line (a serves its orders in arrival order) until {a,b} leaves, then
// is placed. Waiting for the union of the queue's SKUs failed all three.
func TestQueueHeadWaitsForItsOwnKeys(t *testing.T) {
	f, svc, first, gate := busyLeader(t, 800*time.Millisecond)
	defer f.hold("b")()
	ahead := f.queue(svc, "a", req("", line("a", 1)), req("", line("a", 1), line("b", 1)))
	// Later by a margin, so that its own lock wait outlives {a,b}'s.
	time.Sleep(300 * time.Millisecond)
	behind := f.queue(svc, "a", req("", line("a", 1)))
	close(gate)
	if got := first(); got[0].err != nil {
		t.Fatalf("the order written first: %v", got[0].err)
	}
	got := ahead()
	if got[0].err != nil {
		t.Fatalf("{a} at the head, a free: %v; want it placed", got[0].err)
	}
	if !errors.Is(got[1].err, lock.ErrNotAcquired) {
		t.Fatalf("{a,b} with b held: %v, want ErrNotAcquired", got[1].err)
	}
	if got := behind(); got[0].err != nil {
		t.Fatalf("{a} behind {a,b}: %v; want it placed once {a,b} left the line", got[0].err)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 3 {
		t.Fatalf("audit a = %+v, want the three {a} orders held", a)
	}
}

// TestQueueHeadLeavesTheWaitRestarts: the leader waits for the SKUs of the
// order at its queue's head, {a,b}, with {a} behind it, b held elsewhere.
// When the head's client leaves, the order behind it must not go on
// waiting for b, which it does not need: the wait restarts for the new
// head's SKUs and {a} is placed.
func TestQueueHeadLeavesTheWaitRestarts(t *testing.T) {
	f, svc, first, gate := busyLeader(t, 2*time.Second)
	defer f.hold("b")()
	headCtx, leave := context.WithCancel(context.Background())
	defer leave()
	results := f.queueCtx(svc, "a", []context.Context{headCtx, context.Background()},
		[]inventory.PlaceRequest{req("", line("a", 1), line("b", 1)), req("", line("a", 1))})
	close(gate)
	if got := first(); got[0].err != nil {
		t.Fatalf("the order written first: %v", got[0].err)
	}
	time.Sleep(100 * time.Millisecond) // the leader waits for {a,b}
	left := time.Now()
	leave()
	got, at := results()
	if !errors.Is(got[0].err, context.Canceled) {
		t.Fatalf("the head whose client left: %v, want context.Canceled", got[0].err)
	}
	if got[1].err != nil || at[1].Sub(left) > time.Second {
		t.Fatalf("{a} behind it: %v after %s; want it placed at once", got[1].err, at[1].Sub(left))
	}
}

// busyLeader is a fixture with SKUs a and b of 5 units and a Service whose
// leader keeps a lease for one batch and waits lockWait: an order on a is
// being written, its write held until gate closes, so the orders queued on
// a meanwhile find the leader busy and its lease then gone. first answers
// the order being written.
func busyLeader(t *testing.T, lockWait time.Duration) (f *fixture, svc *reservation.Service, first func() []result, gate chan struct{}) {
	t.Helper()
	f = newFixture(t, reservation.Coalescing{})
	f.stock("a", 5)
	f.stock("b", 5)
	svc = reservation.New(reservation.Config{Store: f.store, Locker: f.locker, LockWait: lockWait,
		Coalescing: reservation.Coalescing{MaxBatches: 1}})
	releaseA := f.hold("a")
	first = f.queue(svc, "a", req("", line("a", 1)))
	gate, writing := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.store.onWrite(func() { once.Do(func() { close(writing); <-gate }) })
	releaseA()
	<-writing
	return f, svc, first, gate
}
