package inventory

import (
	"context"
	"errors"
	"time"
)

// Reap expires reserved orders whose hold has run out, under the same locks
// as any other stock change, every interval until ctx ends. Every instance
// may run one: the status change is conditional, so an order is expired once.
func (s *Service) Reap(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.reapOnce(ctx)
	}
}

func (s *Service) reapOnce(ctx context.Context) {
	ids, err := s.store.ExpiredOrders(ctx, s.now(), 100)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("reaper: list expired orders", "err", err)
		}
		return
	}
	for _, id := range ids {
		if err := s.Expire(ctx, id); err != nil && !errors.Is(err, ErrInvalidTransition) && ctx.Err() == nil {
			s.log.Warn("reaper: expire order", "order_id", id, "err", err)
		}
	}
	// A pending order older than any request could run is a key left by a
	// process that died mid-request.
	if n, err := s.store.PurgePending(ctx, s.now().Add(-10*time.Minute)); err != nil && ctx.Err() == nil {
		s.log.Error("reaper: purge pending orders", "err", err)
	} else if n > 0 {
		s.log.Info("reaper: purged abandoned idempotency keys", "count", n)
	}
}
