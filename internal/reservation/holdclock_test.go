package reservation_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/postgres"
	"github.com/stockguard/stockguard/internal/reservation"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// realStack is a fresh database on the stack's Postgres and the stack's
// Redis lock, shared by every Service of a test as by instances.
type realStack struct {
	t      *testing.T
	pg     *postgres.Store
	store  *spyStore
	locker lock.Locker
	prefix string
	// lockWait is the services' --lock-wait; default 5s.
	lockWait time.Duration
}

func newRealStack(t *testing.T) *realStack {
	t.Helper()
	url := stacktest.NewDatabase(t, context.Background())
	pg := newPGStoreAt(t, url)
	return &realStack{t: t, pg: pg, store: &spyStore{Store: pg}, locker: newBackend(t, "redis", stackParams(t, url)),
		prefix: "t" + uniq() + "-", lockWait: 5 * time.Second}
}

// sku is a name of this test's own on the shared Redis.
func (r *realStack) sku(name string) string { return r.prefix + name }

// service is one more instance with the clock now (nil: time.Now) over st
// (nil: the stack's store).
func (r *realStack) service(st inventory.Store, now func() time.Time, c reservation.Coalescing) *reservation.Service {
	if st == nil {
		st = r.store
	}
	return reservation.New(reservation.Config{Store: st, Locker: r.locker, LockWait: r.lockWait, Now: now, Coalescing: c})
}

func (r *realStack) stock(svc *reservation.Service, sku string, n int64) {
	r.t.Helper()
	if _, err := svc.SetStock(context.Background(), sku, n); err != nil {
		r.t.Fatalf("stock %s: %v", sku, err)
	}
}

// hold takes sku's lock as another instance would; the func lets it go.
func (r *realStack) hold(sku string) func() {
	r.t.Helper()
	l, err := r.locker.Acquire(context.Background(), sku)
	if err != nil {
		r.t.Fatal(err)
	}
	return func() { _ = l.Release(context.Background()) }
}

// startClock is the database's clock as read by an instance whose own
// clock is skew off.
func (r *realStack) startClock(skew time.Duration) *postgres.Clock {
	r.t.Helper()
	c, err := r.pg.StartClock(context.Background(),
		postgres.WithLocalClock(func() time.Time { return time.Now().Add(skew) }))
	if err != nil {
		r.t.Fatal(err)
	}
	t := r.t
	t.Cleanup(c.Close)
	return c
}

// TestHoldsFollowTheDatabaseClock: instances whose clocks are minutes
// apart agree on a hold's end, since each times holds by the database's
// clock: an order placed by one running two minutes slow is not already
// over, and the reaper of one running two minutes fast leaves it alone.
func TestHoldsFollowTheDatabaseClock(t *testing.T) {
	r := newRealStack(t)
	ctx := context.Background()
	fast, slow := r.startClock(2*time.Minute), r.startClock(-2*time.Minute)
	if off := fast.Offset(); off > -2*time.Minute+time.Second || off < -2*time.Minute-time.Second {
		t.Fatalf("offset measured by the fast instance = %v, want about -2m", off)
	}
	placer := r.service(nil, slow.Now, reservation.Coalescing{})
	reaperSvc := r.service(nil, fast.Now, reservation.Coalescing{})
	sku := r.sku("clock")
	r.stock(placer, sku, 5)
	before := time.Now()
	o, _, err := placer.Place(ctx, inventory.PlaceRequest{Lines: []inventory.LineRequest{line(sku, 2)}, Hold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if d := o.ExpiresAt.Sub(before); d < 55*time.Second || d > 65*time.Second {
		t.Fatalf("hold ends %v from now, want about 1m (placed by an instance 2m slow)", d)
	}
	reservation.NewReaper(reaperSvc, time.Second)(ctx)
	got, err := placer.Order(ctx, o.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != inventory.StatusReserved {
		t.Fatalf("order %s by the reaper of an instance 2m fast, with 1m of its hold left; want reserved", got.Status)
	}
	if _, err := reaperSvc.Confirm(ctx, o.ID.String()); err != nil {
		t.Fatalf("confirm on the fast instance with 1m of the hold left: %v", err)
	}
}

// TestHoldStartsWhenPlaced: an order that waited for its lock longer than
// its hold is answered with the whole hold ahead of it: the hold starts
// when the order is placed under its leases, not when it arrived.
func TestHoldStartsWhenPlaced(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  reservation.Coalescing
	}{{"coalesced", reservation.Coalescing{}}, {"alone", reservation.Coalescing{Disabled: true}}} {
		t.Run(c.name, func(t *testing.T) {
			r := newRealStack(t)
			ctx := context.Background()
			svc := r.service(nil, nil, c.cfg)
			sku := r.sku("wait")
			r.stock(svc, sku, 5)
			release := r.hold(sku)
			time.AfterFunc(1500*time.Millisecond, release)
			o, _, err := svc.Place(ctx, inventory.PlaceRequest{Lines: []inventory.LineRequest{line(sku, 1)}, Hold: time.Second})
			answered := time.Now()
			if err != nil {
				t.Fatal(err)
			}
			if !o.ExpiresAt.After(answered) {
				t.Fatalf("answered reserved at %s with the hold over at %s: the lock wait ate the hold",
					answered.Format(time.StampMicro), o.ExpiresAt.Format(time.StampMicro))
			}
			stored, err := svc.Order(ctx, o.ID.String())
			if err != nil {
				t.Fatal(err)
			}
			if !stored.ExpiresAt.Equal(o.ExpiresAt) || !stored.CreatedAt.Equal(o.CreatedAt) {
				t.Fatalf("stored hold %s..%s, answered %s..%s", stored.CreatedAt, stored.ExpiresAt, o.CreatedAt, o.ExpiresAt)
			}
		})
	}
}

// readHookStore runs once, right after the first order read it answers,
// so a test can move the order between that read and what follows it.
type readHookStore struct {
	inventory.Store
	once  sync.Once
	after func(id uuid.UUID)
}

func (s *readHookStore) Order(ctx context.Context, id uuid.UUID) (*inventory.Order, error) {
	o, err := s.Store.Order(ctx, id)
	s.once.Do(func() { s.after(id) })
	return o, err
}

// TestConfirmRetriedAtTheHoldsEnd: a confirm retried as the hold ends,
// after the first confirm landed, answers the confirmed order (confirming
// a confirmed order is 200), whether its own check of the hold ran before
// its batch (it read the order just before the first confirm landed) or
// under its leases.
func TestConfirmRetriedAtTheHoldsEnd(t *testing.T) {
	for _, where := range []string{"before the batch", "under the leases"} {
		t.Run(where, func(t *testing.T) {
			r := newRealStack(t)
			ctx := context.Background()
			first := r.service(nil, nil, reservation.Coalescing{})
			sku := r.sku("confirm")
			r.stock(first, sku, 5)
			o, _, err := first.Place(ctx, inventory.PlaceRequest{Lines: []inventory.LineRequest{line(sku, 1)}, Hold: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			// The retry's instance reads the clock at the hold's end from
			// the moment its turn comes (late).
			var late atomic.Bool
			now := func() time.Time {
				if late.Load() {
					return o.ExpiresAt
				}
				return time.Now()
			}
			hooked := &readHookStore{Store: r.pg, after: func(uuid.UUID) {
				if _, err := first.Confirm(ctx, o.ID.String()); err != nil {
					t.Errorf("first confirm: %v", err)
				}
				if where == "before the batch" {
					late.Store(true)
				}
			}}
			spy := &spyStore{Store: hooked}
			spy.onClaim(func([]inventory.Fence) { late.Store(true) })
			retry := r.service(spy, now, reservation.Coalescing{})
			got, err := retry.Confirm(ctx, o.ID.String())
			if err != nil {
				t.Fatalf("retried confirm of a confirmed order = %v, want it answered confirmed", err)
			}
			if got.Status != inventory.StatusConfirmed {
				t.Fatalf("retried confirm answered %s, want confirmed", got.Status)
			}
			if a, err := retry.Audit(ctx, sku); err != nil || !a.Consistent || a.Sold != 1 {
				t.Fatalf("audit = %+v, %v; want one sold", a, err)
			}
		})
	}
}
