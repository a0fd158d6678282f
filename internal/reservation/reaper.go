package reservation

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/inventory"
)

// Reap expires reserved orders whose hold has run out, under the same locks
// as any other stock change, every interval until ctx ends. Every instance
// may run one: the status change is conditional, so an order is expired once.
func (s *Service) Reap(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	r := newReaper(s, interval)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.once(ctx)
	}
}

// maxReapBackoff bounds how long an order that keeps failing to expire waits
// between attempts.
const maxReapBackoff = 5 * time.Minute

// maxReapFailing bounds the orders the reaper remembers failing (and so
// leaves out of its listing while they back off). Past it, the one due
// soonest is forgotten: it is only retried earlier than its backoff says.
const maxReapFailing = 1000

// reaper remembers the orders it failed to expire and backs off on each, so
// a few that cannot be expired (a SKU fenced by another deployment's token
// space, a backend that is down) neither flood the log every interval nor
// keep the reaper from the orders behind them.
type reaper struct {
	s        *Service
	interval time.Duration
	limit    int
	failing  map[uuid.UUID]retry
}

func newReaper(s *Service, interval time.Duration) *reaper {
	return &reaper{s: s, interval: interval, limit: maxReapFailing, failing: make(map[uuid.UUID]retry)}
}

type retry struct {
	next time.Time
	wait time.Duration
	// due is the order's place in the listing: only a page that spans it
	// can tell, by leaving it out, that the order is no longer due.
	due inventory.DueCursor
}

// reapPage is how many due orders the reaper lists and expires at once.
// Coalescing, they share the instance's batches: a page over 1,000 SKUs
// costs a few acquisitions, claims and writes, where one expiry after
// another cost all three an order (107 expiries/s across three instances,
// 4.8 ms of CPU each, while the same instances placed 4,600 orders/s).
const reapPage = 128

// maxReapPages bounds the pages one tick works through while a backlog
// lasts, so that a tick ends and ctx is looked at between pages.
const maxReapPages = 64

// once expires what is due: page after page while each comes back full,
// so a backlog drains at the rate the batches take it rather than a page a
// tick. Each page goes on from where the last one ended (expires_at, id):
// orders it could not expire — their keys held elsewhere, a SKU another
// instance keeps busy — are passed over for this tick, not listed again
// first. Restarting from the oldest, 128 orders of one busy SKU filled every
// page of every instance's reaper, and no order due after them on any other
// SKU was ever expired. A page refused by an instance busy with its
// clients' orders waits for the next tick.
func (r *reaper) once(ctx context.Context) {
	var after inventory.DueCursor
	for range maxReapPages {
		listed, last, busy := r.page(ctx, after)
		if listed < reapPage || busy || ctx.Err() != nil {
			return
		}
		after = last
	}
}

// page lists one page of due orders after the cursor and expires them,
// returning how many were listed, the cursor past the last, and whether
// the instance refused any as overloaded.
func (r *reaper) page(ctx context.Context, after inventory.DueCursor) (listed int, last inventory.DueCursor, overloaded bool) {
	now := r.s.now()
	skip := make([]uuid.UUID, 0, len(r.failing))
	for id, f := range r.failing {
		if now.Before(f.next) {
			skip = append(skip, id)
		}
	}
	orders, err := r.s.store.ExpiredOrders(ctx, now, after, reapPage, skip)
	if err != nil {
		if ctx.Err() == nil {
			r.s.log.Error("reaper: list expired orders", "err", err)
		}
		return 0, after, false
	}
	if len(orders) > 0 {
		last = inventory.Due(orders[len(orders)-1])
	}
	// An order due again that this page spans but left out has left the
	// reserved state (confirmed, cancelled, expired elsewhere): its backoff
	// can go. One past a full page's end may be on the next page: forgetting
	// its backoff there would retry it at once and warn of it as new.
	seen := make(map[uuid.UUID]bool, len(orders))
	for _, o := range orders {
		seen[o.ID] = true
	}
	full := len(orders) == reapPage
	for id, f := range r.failing {
		if !now.Before(f.next) && !seen[id] && dueBefore(after, f.due) && (!full || !dueBefore(last, f.due)) {
			delete(r.failing, id)
		}
	}
	for i, err := range r.s.expire(ctx, orders) {
		id := orders[i].ID
		if err != nil && ctx.Err() != nil {
			// Cut short by the shutdown: no outcome to count or back off from.
			delete(r.failing, id)
			continue
		}
		r.observe(err)
		overloaded = overloaded || errors.Is(err, inventory.ErrOverloaded)
		switch {
		case err == nil:
			delete(r.failing, id)
			continue
		case errors.Is(err, inventory.ErrInvalidTransition) || errors.Is(err, errKeyBusy) ||
			errors.Is(err, inventory.ErrOverloaded):
			// Moved by someone else, being moved, or refused by an instance
			// busy with its clients' orders: nothing to back off from.
			delete(r.failing, id)
			continue
		}
		f, known := r.failing[id]
		if !known && len(r.failing) >= r.limit {
			r.forgetSoonest()
		}
		f.wait = min(max(2*f.wait, r.interval), maxReapBackoff)
		f.next = now.Add(f.wait)
		f.due = inventory.Due(orders[i])
		r.failing[id] = f
		level := r.s.log.Debug
		if !known {
			level = r.s.log.Warn
		}
		level("reaper: expire order", "order_id", id, "retry_in", f.wait, "err", err)
	}
	return len(orders), last, overloaded
}

// dueBefore reports whether a comes before b in the listing of due orders,
// by (expires_at, id) as the store orders them: uuids byte by byte.
func dueBefore(a, b inventory.DueCursor) bool {
	if !a.ExpiresAt.Equal(b.ExpiresAt) {
		return a.ExpiresAt.Before(b.ExpiresAt)
	}
	return bytes.Compare(a.ID[:], b.ID[:]) < 0
}

// forgetSoonest drops the remembered failure due soonest.
func (r *reaper) forgetSoonest() {
	var soonest uuid.UUID
	var at time.Time
	for id, f := range r.failing {
		if at.IsZero() || f.next.Before(at) {
			soonest, at = id, f.next
		}
	}
	delete(r.failing, soonest)
}

// observe counts one expiry's outcome, when the Observer wants it.
func (r *reaper) observe(err error) {
	ro, ok := r.s.obs.(ReapObserver)
	switch {
	case !ok:
	case err == nil:
		ro.Reaped("expired")
	case errors.Is(err, inventory.ErrInvalidTransition), errors.Is(err, errKeyBusy), errors.Is(err, inventory.ErrOverloaded):
		ro.Reaped("skipped")
	default:
		ro.Reaped("failed")
	}
}
