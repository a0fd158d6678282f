package reservation

import (
	"context"
	"time"
)

type pauseKey struct{}

// stall is a chaos stall inside the critical section.
type stall struct {
	d time.Duration
	// watched keeps the lease watchdog renewing through the stall.
	watched bool
}

// WithPause asks the service to stall for d inside the critical section of
// the batch this request's operation runs in: after the locks are held, the
// stock claimed and the lease checked, just before the write — the worst
// moment for a GC pause. The batch's leases are taken without a watchdog,
// as a paused process renews nothing, and every operation in the batch
// waits with it, as in a real pause. Only httpapi with --chaos sets it.
func WithPause(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, pauseKey{}, stall{d: d})
}

// WithStall is WithPause for a process that keeps running: a slow step
// inside the critical section, while the watchdog goes on renewing the
// leases. Only a fault that stops the renewals (a partition between the
// instance and its lock servers) loses them, which is what the stall lets a
// test show: WithPause's leases lapse by themselves.
func WithStall(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, pauseKey{}, stall{d: d, watched: true})
}

func stallOf(ctx context.Context) stall {
	st, _ := ctx.Value(pauseKey{}).(stall)
	return st
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
