package reservation

import (
	"context"
	"time"
)

type pauseKey struct{}

// WithPause asks the service to stall for d inside the critical section of
// this request: after the locks are held, the stock claimed and the lease
// checked, just before the write — the worst moment for a GC pause. The
// lease is taken without a watchdog, as a paused process renews nothing.
// Only a service started with --chaos honours it.
func WithPause(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, pauseKey{}, d)
}

func pauseOf(ctx context.Context) time.Duration {
	d, _ := ctx.Value(pauseKey{}).(time.Duration)
	return d
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
