package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/stockguard/stockguard/internal/metrics"
)

// watchLock runs the lock backend's periodic health check (check at once,
// then every interval, until ctx ends) and logs each change of its answer
// once: a WARN with the cause when the backend stops answering, an INFO
// when it answers again. The gauge and /readyz already carry the state,
// but an outage no log line mentions is one an operator reading the logs
// never learns of. The backend counts as up until its first check, so one
// down at start is logged too.
func watchLock(ctx context.Context, check func(context.Context) metrics.LockHealth, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	up := true
	var downSince time.Time
	for {
		h := check(ctx)
		switch {
		case ctx.Err() != nil:
			return // a check cut short by the stop says nothing of the backend
		case up && !h.Healthy:
			up, downSince = false, time.Now()
			log.Warn("lock backend unreachable", "cause", h.Error,
				"effect", "orders, stock changes, confirms and cancels answer 503 lock_unavailable; reads keep answering")
		case !up && h.Healthy:
			up = true
			log.Info("lock backend reachable again", "down_for", time.Since(downSince).Round(time.Millisecond).String())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
