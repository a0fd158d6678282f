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
	r := reaper{s: s, interval: interval, failing: make(map[uuid.UUID]retry)}
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

// reaper remembers the orders it failed to expire and backs off on each, so
// a few that cannot be expired (a SKU fenced by another deployment's token
// space, a backend that is down) neither flood the log every interval nor
// keep the reaper from the orders behind them.
type reaper struct {
	s        *Service
	interval time.Duration
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
	for _, id := range ids {
		err := r.s.Expire(ctx, id)
		if err == nil || errors.Is(err, inventory.ErrInvalidTransition) || ctx.Err() != nil {
			delete(r.failing, id)
			continue
		}
		f, seen := r.failing[id]
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
