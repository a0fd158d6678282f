package reservation

import (
	"context"
	"time"
)

type pauseKey struct{}

// WithPause asks the service to stall for d inside the critical section of
// the batch this request's operation runs in: after the locks are held, the
// stock claimed and the lease checked, just before the write — the worst
// moment for a GC pause. The batch's leases are taken without a watchdog,
// as a paused process renews nothing, and every operation in the batch
// waits with it, as in a real pause. Only httpapi with --chaos sets it.
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
