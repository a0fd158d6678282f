package reservation_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/reservation"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// TestReaperPassesABusySKU: more than a page of due orders on a SKU whose
// key another instance keeps do not starve the orders due after them on
// other SKUs: the reaper pages past the busy ones in the same tick.
func TestReaperPassesABusySKU(t *testing.T) {
	r := newRealStack(t)
	ctx := context.Background()
	svc := r.service(nil, nil, reservation.Coalescing{})
	busy, free := r.sku("busy"), r.sku("free")
	const onBusy = 130 // more than a reaper's page (128)
	r.stock(svc, busy, onBusy)
	r.stock(svc, free, 1)
	for i := range onBusy {
		if _, _, err := svc.Place(ctx, inventory.PlaceRequest{Lines: []inventory.LineRequest{line(busy, 1)}, Hold: time.Second}); err != nil {
			t.Fatalf("order %d on the busy SKU: %v", i, err)
		}
	}
	later, _, err := svc.Place(ctx, inventory.PlaceRequest{Lines: []inventory.LineRequest{line(free, 1)}, Hold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// Another instance keeps the busy SKU's key.
	release := r.hold(busy)
	defer release()
	// The reaper's instance an hour on: every hold is due.
	reaper := r.service(nil, func() time.Time { return time.Now().Add(time.Hour) }, reservation.Coalescing{})
	reservation.NewReaper(reaper, time.Second)(ctx)
	got, err := svc.Order(ctx, later.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != inventory.StatusExpired {
		t.Fatalf("order on a free SKU, due after %d on a busy one, is %s after a reaper tick; want expired", onBusy, got.Status)
	}
	if a, err := svc.Audit(ctx, busy); err != nil || a.Held != onBusy {
		t.Fatalf("audit of the busy SKU = %+v, %v; want its %d orders still held", a, err, onBusy)
	}
	if a, err := svc.Audit(ctx, free); err != nil || !a.Consistent || a.Held != 0 || a.Available != 1 {
		t.Fatal(fmt.Sprintf("audit of the free SKU = %+v, %v; want its unit back", a, err))
	}
}

// TestReaperBacksOffPastTheFirstPage: orders the reaper cannot expire (their
// SKU's row fenced by another token space) back off, doubling, and are
// warned about once each, also when more than a page of them is due: a page
// forgets only the backoffs of orders it spans and did not list, never those
// of the orders on the pages after it. The service's clock is the test's,
// and each tick is one reaper pass.
func TestReaperBacksOffPastTheFirstPage(t *testing.T) {
	ctx := context.Background()
	url := stacktest.NewDatabase(t, ctx)
	store := newPGStoreAt(t, url)
	var offset atomic.Int64
	start := time.Now()
	now := func() time.Time { return start.Add(time.Duration(offset.Load())) }
	logs := &reapLog{warn: map[string]int{}, debug: map[string]int{}}
	svc := reservation.New(reservation.Config{Store: store, Locker: newFencedLocker(), Now: now,
		Logger: slog.New(logs), LockWait: 2 * time.Second})
	const stuck = 200 // more than a reaper's page (128)
	if _, err := svc.SetStock(ctx, "stuck", stuck); err != nil {
		t.Fatal(err)
	}
	for i := range stuck {
		if _, _, err := svc.Place(ctx, inventory.PlaceRequest{Hold: time.Second, Lines: []inventory.LineRequest{line("stuck", 1)}}); err != nil {
			t.Fatalf("order %d: %v", i, err)
		}
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	if _, err := c.Exec(ctx, `UPDATE skus SET fence_token = 1000000000000 WHERE sku = 'stuck'`); err != nil {
		t.Fatal(err)
	}
	const interval = time.Second
	tick := reservation.NewReaper(svc, interval)
	offset.Store(int64(2 * time.Second))
	const ticks = 16
	for range ticks {
		tick(ctx)
		offset.Add(int64(interval))
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	if len(logs.warn) != stuck {
		t.Fatalf("%d orders warned about, want all %d", len(logs.warn), stuck)
	}
	maxWarn, maxTries := 0, 0
	for id, w := range logs.warn {
		maxWarn = max(maxWarn, w)
		maxTries = max(maxTries, w+logs.debug[id])
	}
	// Backoff 1, 2, 4, 8 s: tried at ticks 0, 1, 3, 7 and 15.
	if maxWarn > 1 || maxTries > 5 {
		t.Errorf("an order that cannot be expired was warned about %d times and tried %d times in %d ticks: want once, and at most 5 tries",
			maxWarn, maxTries, ticks)
	}
}

// reapLog counts the reaper's "expire order" lines per order, by level.
type reapLog struct {
	mu          sync.Mutex
	warn, debug map[string]int
}

func (h *reapLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *reapLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "reaper: expire order" {
		return nil
	}
	var id string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "order_id" {
			id = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Level >= slog.LevelWarn {
		h.warn[id]++
	} else {
		h.debug[id]++
	}
	return nil
}

func (h *reapLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *reapLog) WithGroup(string) slog.Handler      { return h }
