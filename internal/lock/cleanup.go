package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// cleanupEnded is the cause of a CleanupContext's end: the wait, not the
// clean-up, is over.
type cleanupEnded struct{ why string }

func (e *cleanupEnded) Error() string { return e.why }

// CleanupContext is the context a failed call waits for its own clean-up
// in (the delete of a key it created but will not hand out): ctx's values
// without its cancellation, at most timeout, and at most grace past ctx's
// end. Grace is about a round trip, so a reachable server confirms the
// clean-up while a call cut off from its servers returns about when its
// caller asked; the clean-up itself goes on in the background after that,
// and the call's error says so with ErrCleanupPending.
//
// Why the wait ended is CleanupEnd's to say: its own cause, not
// context.DeadlineExceeded, which a caller would take for its own deadline.
// The returned cancel must be called; it also stops the grace timer.
func CleanupContext(ctx context.Context, timeout, grace time.Duration) (context.Context, context.CancelFunc) {
	tctx, cancelTimeout := context.WithTimeoutCause(context.WithoutCancel(ctx), timeout,
		&cleanupEnded{fmt.Sprintf("no answer within %v", timeout)})
	cctx, cancel := context.WithCancelCause(tctx)
	var (
		mu      sync.Mutex
		timer   *time.Timer
		stopped bool
	)
	stopAfter := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			timer = time.AfterFunc(grace, func() {
				cancel(&cleanupEnded{fmt.Sprintf("no answer within %v of the caller's end", grace)})
			})
		}
	})
	return cctx, func() {
		stopAfter()
		mu.Lock()
		stopped = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel(nil)
		cancelTimeout()
	}
}

// CleanupEnd is why a wait for a clean-up in ctx ended: a CleanupContext's
// timeout or grace, or else ctx's own end (a caller's context may carry a
// cause of its own, which is no reason the clean-up was not waited for).
func CleanupEnd(ctx context.Context) error {
	var ended *cleanupEnded
	if cause := context.Cause(ctx); errors.As(cause, &ended) {
		return cause
	}
	return ctx.Err()
}
