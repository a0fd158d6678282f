package reservation

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/stockguard/stockguard/internal/inventory"
)

// ErrClosed refuses work after Close: the instance is shutting down. It is
// an inventory.ErrOverloaded (503 with Retry-After): another instance can
// take the request.
var ErrClosed = fmt.Errorf("reservation: the service is shutting down: %w", inventory.ErrOverloaded)

// lifecycle counts the runs of the critical section — batch leaders and
// ops alone — so that Close can wait for them: a leader may still be
// acquiring leases for orders whose requests have already gone.
type lifecycle struct {
	// ctx ends every run when Close gives up waiting.
	ctx    context.Context
	cancel context.CancelFunc

	// closed is set by Close, under mu. It is atomic so that every
	// coalesced order can check it (closing) without taking mu.
	closed atomic.Bool

	mu      sync.Mutex
	running int
	// drained is closed when running drops to zero after Close began.
	drained chan struct{}
}

func newLifecycle() *lifecycle {
	ctx, cancel := context.WithCancel(context.Background())
	return &lifecycle{ctx: ctx, cancel: cancel}
}

// enter starts a run on a child of ctx that also ends if Close gives up;
// done ends the run. After Close it refuses with ErrClosed.
func (l *lifecycle) enter(ctx context.Context) (run context.Context, done func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return nil, nil, ErrClosed
	}
	l.running++
	run, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.ctx, cancel)
	return run, func() {
		stop()
		cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		l.running--
		if l.running == 0 && l.drained != nil {
			close(l.drained)
			l.drained = nil
		}
	}, nil
}

// closing reports whether Close has begun. Without mu it is still ordered
// with Close: Go's atomics are sequentially consistent, so a read after
// Close's store sees it, and one before it is an order that mu would have
// let in too. What Close waits for is still counted under mu: an order let
// in joins a queue or the intake while c.mu shows their run going (it is
// counted in running until it has found them empty, under c.mu), or starts
// a run through enter, which reads the flag again under mu.
func (l *lifecycle) closing() bool { return l.closed.Load() }

// cutShort is err, the answer of an op whose request's context is ctx,
// told as ErrClosed (503 overloaded, Retry-After) when it is the
// cancellation of a run Close cut short: as context.Canceled it would read
// as the client's own leaving (499) though the client closed nothing. A
// write that may have landed keeps saying so.
func (l *lifecycle) cutShort(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || l.ctx.Err() == nil ||
		!errors.Is(err, context.Canceled) || errors.Is(err, inventory.ErrOutcomeUnknown) {
		return err
	}
	return fmt.Errorf("%w (%v)", ErrClosed, err)
}

// Close stops accepting stock changes (ErrClosed), then waits until every
// batch leader and every op alone has answered its orders and released its
// leases. If ctx ends first it cancels them: each gives up its lock wait or
// store call, answers its orders (ErrClosed, cutShort) and releases what it
// holds on a short detached context, and Close returns ctx's error once all
// have. Call it after the HTTP server has drained and the reaper has
// stopped.
func (s *Service) Close(ctx context.Context) error {
	l := s.life
	l.mu.Lock()
	l.closed.Store(true)
	if l.running == 0 {
		l.mu.Unlock()
		return nil
	}
	if l.drained == nil {
		l.drained = make(chan struct{})
	}
	drained := l.drained
	l.mu.Unlock()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
	}
	l.cancel()
	<-drained
	return fmt.Errorf("reservation: close: batches cut short: %w", ctx.Err())
}
