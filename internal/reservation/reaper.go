package reservation

import (
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
	r := reaper{s: s, interval: interval, limit: maxReapFailing, failing: make(map[uuid.UUID]retry)}
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

type retry struct {
	next time.Time
	wait time.Duration
}

func (r *reaper) once(ctx context.Context) {
	now := r.s.now()
	skip := make([]uuid.UUID, 0, len(r.failing))
	for id, f := range r.failing {
		if now.Before(f.next) {
			skip = append(skip, id)
		}
	}
	ids, err := r.s.store.ExpiredOrders(ctx, now, 100, skip)
	if err != nil {
		if ctx.Err() == nil {
			r.s.log.Error("reaper: list expired orders", "err", err)
		}
		return
	}
	// An order due again that the listing left out has left the reserved
	// state (confirmed, cancelled, expired elsewhere) or is past this
	// round's limit: either way its backoff can go.
	listed := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		listed[id] = true
	}
	for id, f := range r.failing {
		if !now.Before(f.next) && !listed[id] {
			delete(r.failing, id)
		}
	}
	for _, id := range ids {
		err := r.s.Expire(ctx, id)
		r.observe(err)
		if err == nil || errors.Is(err, inventory.ErrInvalidTransition) || ctx.Err() != nil {
			delete(r.failing, id)
			continue
		}
		f, seen := r.failing[id]
		if !seen && len(r.failing) >= r.limit {
			r.forgetSoonest()
		}
		f.wait = min(max(2*f.wait, r.interval), maxReapBackoff)
		f.next = now.Add(f.wait)
		r.failing[id] = f
		level := r.s.log.Debug
		if !seen {
			level = r.s.log.Warn
		}
		level("reaper: expire order", "order_id", id, "retry_in", f.wait, "err", err)
	}
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
	case errors.Is(err, inventory.ErrInvalidTransition):
		ro.Reaped("skipped")
	default:
		ro.Reaped("failed")
	}
}
