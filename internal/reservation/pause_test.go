package reservation_test

import (
	"context"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/reservation"
)

// TestPausedOrderSharesItsBatch is the proof that a chaos pause exercises
// the path production runs. A paused order (WithPause, which X-Chaos-Pause
// sets) is not run apart: it queues like any other, so the orders queued
// behind it form one batch with it — one acquisition, without a watchdog,
// one claim, one write of all three — and every one of them waits out its
// stall. (It heads the queue here: leases already taken with a watchdog do
// not cover a paused order, so one that arrives later starts the next
// batch, with whatever queued behind it.) Had the paused order a path of its own (as it once had), it would
// be written alone, under a lease of its own, and its neighbours would not
// wait for it: this test would fail on the writes and on the times.
func TestPausedOrderSharesItsBatch(t *testing.T) {
	const pause = 300 * time.Millisecond
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 10)
	release := f.hold("a")
	bg := context.Background()
	results := f.queueCtx(f.svc, "a", []context.Context{reservation.WithPause(bg, pause), bg, bg},
		[]inventory.PlaceRequest{req("", line("a", 1)), req("", line("a", 2)), req("", line("a", 3))})
	unwatched := f.locker.unwatched.Load()
	start := time.Now()
	release()
	got, at := results()
	for i, r := range got {
		if r.err != nil {
			t.Fatalf("order %d: %v", i, r.err)
		}
		if waited := at[i].Sub(start); waited < pause {
			t.Errorf("order %d answered after %v, before its batch's %v stall", i, waited, pause)
		}
	}
	if claims, writes := f.store.counts(); claims != 1 || len(writes) != 1 || writes[0] != 3 {
		t.Fatalf("claims %d, writes %v; want the paused order in one claim and one write with the other two", claims, writes)
	}
	if n := f.locker.unwatched.Load() - unwatched; n != 1 {
		t.Fatalf("%d leases taken without a watchdog, want the paused batch's one", n)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 6 {
		t.Fatalf("audit = %+v", a)
	}
}

// TestPausedLoneOps: with coalescing off an order, and always a stock
// change or a transition, is a batch of one through the same section: its
// pause stalls it under a lease taken without a watchdog, between its claim
// and its write.
func TestPausedLoneOps(t *testing.T) {
	const pause = 200 * time.Millisecond
	f := newFixture(t, reservation.Coalescing{Disabled: true})
	ctx := reservation.WithPause(context.Background(), pause)
	f.stock("a", 10)
	ops := []struct {
		name string
		run  func() error
	}{
		{"set stock", func() error { _, err := f.svc.SetStock(ctx, "a", 20); return err }},
		{"place", func() error {
			o, _, err := f.svc.Place(ctx, req("", line("a", 2)))
			if err == nil {
				_, err = f.svc.Confirm(ctx, o.ID.String())
			}
			return err
		}},
	}
	for _, op := range ops {
		unwatched := f.locker.unwatched.Load()
		start := time.Now()
		if err := op.run(); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		steps := f.locker.unwatched.Load() - unwatched // place and confirm are two
		if took := time.Since(start); took < time.Duration(steps)*pause || steps == 0 {
			t.Fatalf("%s: %d unwatched leases, took %v; want each stalled %v", op.name, steps, took, pause)
		}
	}
	if a := f.audit("a"); !a.Consistent || a.Sold != 2 || a.Available != 18 {
		t.Fatalf("audit = %+v", a)
	}
}

// TestStalledOpKeepsItsWatchdog: a stall (WithStall, which X-Chaos-Stall
// sets) waits at the pause's point but under leases with their watchdog, so
// that only a fault that stops the renewals can lose them.
func TestStalledOpKeepsItsWatchdog(t *testing.T) {
	const stall = 200 * time.Millisecond
	f := newFixture(t, reservation.Coalescing{Disabled: true})
	f.stock("a", 10)
	unwatched := f.locker.unwatched.Load()
	start := time.Now()
	if _, _, err := f.svc.Place(reservation.WithStall(context.Background(), stall), req("", line("a", 2))); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < stall {
		t.Fatalf("placed after %v, before its %v stall", took, stall)
	}
	if n := f.locker.unwatched.Load() - unwatched; n != 0 {
		t.Fatalf("%d leases taken without a watchdog, want none for a stall", n)
	}
	if a := f.audit("a"); !a.Consistent || a.Held != 2 {
		t.Fatalf("audit = %+v", a)
	}
}
