package reservation_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/reservation"
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
