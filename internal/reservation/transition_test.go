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

// TestTransitionsShareBatches: confirms and cancels of orders on many SKUs,
// sent while the instance is busy, are written together — a few writes,
// not one each — and each still answers for its own order: a confirm and a
// cancel of the same order in one batch move it once, the loser answering
// invalid_transition from where the order stands.
func TestTransitionsShareBatches(t *testing.T) {
	const skus = 20
	f := newFixture(t, reservation.Coalescing{Gatherers: 1})
	ctx := context.Background()
	f.stock("first", 1)
	var orders []*inventory.Order
	for i := range skus {
		name := fmt.Sprintf("t%02d", i)
		f.stock(name, 10)
		for range 2 {
			o, _, err := f.svc.Place(ctx, req("", line(name, 1)))
			if err != nil {
				t.Fatal(err)
			}
			orders = append(orders, o)
		}
	}
	f.store.counts()
	first, gathered := f.busyFirst()
	type answer struct {
		o   *inventory.Order
		err error
	}
	// Order 2i is confirmed, 2i+1 cancelled; order 0 is also cancelled.
	answers := make([]answer, len(orders)+1)
	var wg sync.WaitGroup
	for i, o := range orders {
		wg.Go(func() {
			var got *inventory.Order
			var err error
			if i%2 == 0 {
				got, err = f.svc.Confirm(ctx, o.ID.String())
			} else {
				got, err = f.svc.Cancel(ctx, o.ID.String())
			}
			answers[i] = answer{got, err}
		})
	}
	wg.Go(func() {
		got, err := f.svc.Cancel(ctx, orders[0].ID.String())
		answers[len(orders)] = answer{got, err}
	})
	waitFor(t, "every status change gathered", func() bool { return reservation.Gathering(f.svc) == len(answers) })
	close(gathered)
	if err := <-first; err != nil {
		t.Fatalf("the busy first order: %v", err)
	}
	wg.Wait()

	confirm, cancel := answers[0], answers[len(orders)]
	if (confirm.err == nil) == (cancel.err == nil) {
		t.Fatalf("confirm and cancel of one order answered %v and %v: want exactly one to win", confirm.err, cancel.err)
	}
	winner, loser := inventory.StatusConfirmed, cancel.err
	if confirm.err != nil {
		winner, loser = inventory.StatusCancelled, confirm.err
	}
	var te *inventory.TransitionError
	if !errors.As(loser, &te) || te.From != winner {
		t.Fatalf("the losing change = %v, want invalid_transition from %s", loser, winner)
	}
	for i, a := range answers[1:len(orders)] {
		want := inventory.StatusCancelled
		if (i+1)%2 == 0 {
			want = inventory.StatusConfirmed
		}
		if a.err != nil || a.o.Status != want {
			t.Fatalf("change %d = %+v, %v; want %s", i+1, a.o, a.err, want)
		}
	}
	moves := f.store.moved()
	if len(moves) > 3 {
		t.Fatalf("%d writes for %d status changes (%v): want them batched", len(moves), len(answers), moves)
	}
	for i := range skus {
		name := fmt.Sprintf("t%02d", i)
		a := f.audit(name)
		sold, avail := int64(1), int64(9)
		if i == 0 && winner == inventory.StatusCancelled {
			sold, avail = 0, 10
		}
		if !a.Consistent || a.Held != 0 || a.Sold != sold || a.Available != avail {
			t.Fatalf("audit of %s = %+v, want sold %d, available %d, nothing held", name, a, sold, avail)
		}
	}
}

// reapCounter counts the reaper's outcomes.
type reapCounter struct {
	mu       sync.Mutex
	outcomes map[string]int
}

func (*reapCounter) LockWait(time.Duration) {}
func (*reapCounter) StaleFence()            {}
func (*reapCounter) LeaseLost()             {}

func (c *reapCounter) Reaped(outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.outcomes[outcome]++
}

func (c *reapCounter) count(outcome string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outcomes[outcome]
}

// TestReapersShareTheBacklog: two instances' reapers, started on a backlog
// of due holds over many SKUs, expire every order exactly once, in
// batches of many, fail none, and return every unit to stock.
func TestReapersShareTheBacklog(t *testing.T) {
	const skus, perSKU = 40, 10
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	var placed []*inventory.Order
	for i := range skus {
		name := fmt.Sprintf("r%02d", i)
		f.stock(name, perSKU)
		for range perSKU {
			o, _, err := f.svc.Place(ctx, inventory.PlaceRequest{Lines: []inventory.LineRequest{line(name, 1)}, Hold: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			placed = append(placed, o)
		}
	}
	// The reapers' clock is past every hold: the whole backlog is due.
	later := func() time.Time { return time.Now().Add(time.Hour) }
	counters := []*reapCounter{{outcomes: map[string]int{}}, {outcomes: map[string]int{}}}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range counters {
		svc := reservation.New(reservation.Config{Store: f.store, Locker: f.locker, LockWait: 5 * time.Second, Now: later, Observer: c})
		wg.Go(func() { svc.Reap(rctx, 20*time.Millisecond) })
	}
	var expired atomic.Int64
	waitFor(t, "the backlog expired", func() bool {
		n := 0
		for _, c := range counters {
			n += c.count("expired")
		}
		expired.Store(int64(n))
		return n >= len(placed)
	})
	stop()
	wg.Wait()
	if n := expired.Load(); n != int64(len(placed)) {
		t.Fatalf("%d expiries for %d orders: want each once", n, len(placed))
	}
	for _, c := range counters {
		if n := c.count("failed"); n != 0 {
			t.Fatalf("%d expiries failed", n)
		}
	}
	for _, o := range placed {
		got, err := f.svc.Order(ctx, o.ID.String())
		if err != nil || got.Status != inventory.StatusExpired {
			t.Fatalf("order %s = %+v, %v; want expired", o.ID, got, err)
		}
	}
	for i := range skus {
		if a := f.audit(fmt.Sprintf("r%02d", i)); !a.Consistent || a.Held != 0 || a.Available != perSKU {
			t.Fatalf("audit = %+v, want every unit back", a)
		}
	}
	moves := f.store.moved()
	t.Logf("%d expiries in %d writes: %v", len(placed), len(moves), moves)
	if most := slices.Max(moves); most < 20 || len(moves) > len(placed)/5 {
		t.Fatalf("%d writes for %d expiries, at most %d in one: want them batched", len(moves), len(placed), most)
	}
}

// TestConfirmThatWaitedPastTheHoldIsRefused: a confirm sent before the
// hold's end that waits for its lease past it is refused (the hold
// expired), not written: the reaper is about to return those units.
func TestConfirmThatWaitedPastTheHoldIsRefused(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	svc := reservation.New(reservation.Config{Store: f.store, Locker: f.locker, LockWait: 5 * time.Second, Now: now})
	f.stock("late", 5)
	o, _, err := svc.Place(ctx, inventory.PlaceRequest{Lines: []inventory.LineRequest{line("late", 1)}, Hold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := f.locker.Acquire(ctx, "late", lock.TryOnce())
	if err != nil {
		t.Fatal(err)
	}
	answer := make(chan error, 1)
	go func() {
		_, err := svc.Confirm(ctx, o.ID.String())
		answer <- err
	}()
	time.Sleep(100 * time.Millisecond) // the confirm waits for the SKU's lease
	clock.Add(int64(2 * time.Minute))  // and the hold runs out meanwhile
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-answer
	var te *inventory.TransitionError
	if !errors.As(err, &te) || te.From != inventory.StatusExpired {
		t.Fatalf("confirm that waited past the hold = %v; want refused, the hold expired", err)
	}
	if got, err := svc.Order(ctx, o.ID.String()); err != nil || got.Status != inventory.StatusReserved {
		t.Fatalf("order after the refused confirm = %+v, %v; want still reserved, for the reaper", got, err)
	}
}
