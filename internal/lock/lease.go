package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Handle is a backend's hold on one key. The Lease calls Release at most once.
type Handle interface {
	Release(ctx context.Context) error
}

// Extender is implemented by handles of leases that expire. Extend pushes the
// expiry out by the lease's TTL and returns the new validity deadline, or an
// error (wrapping ErrLeaseLost when the lock is no longer ours).
type Extender interface {
	Extend(ctx context.Context) (time.Time, error)
}

// LeaseParams is what a backend knows about a lease it has just acquired.
type LeaseParams struct {
	Key   string
	Token Token
	// ID identifies this lease; backends that store a value with the lock
	// (redis, redlock) use it as that value so release can compare-and-delete.
	ID uuid.UUID
	// Deadline is when the lease stops being valid unless extended; zero for
	// leases that last until their session or connection ends.
	Deadline time.Time
	// TTL is the extension step; with Watchdog the lease is extended every TTL/3.
	TTL      time.Duration
	Watchdog bool
	Handle   Handle
	// OnLost, when set, is called once if the lease is lost (not on Release).
	OnLost func(error)
	// Follows, when set, is the lease this one stands for (a decorator's,
	// which ends when Follows does): Deadline is Follows' current one, which
	// Follows' keepalive moves. Leave Deadline zero with it, so that this
	// lease runs no keepalive of its own.
	Follows *Lease
}

// Lease is a held lock. Done may close at any time, long before Release: the
// holder may be paused, its TTL may lapse, its session may expire. Checking
// Done before a write narrows the window but cannot close it; the Token,
// checked by the store on every write, is what protects the data.
type Lease struct {
	p      LeaseParams
	ctx    context.Context // cancelled, with the cause, when the lease ends
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time
	released bool

	stopKeepalive context.CancelFunc
	keepaliveDone chan struct{}
}

// NewLease wraps a backend's hold in a Lease and starts its keepalive. The
// returned lose function marks the lease lost with the given cause (it should
// wrap ErrLeaseLost); backends call it from session or connection watchers.
func NewLease(p LeaseParams) (lease *Lease, lose func(error)) {
	if p.ID == uuid.Nil {
		p.ID = uuid.New()
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lease{p: p, ctx: ctx, cancel: cancel, deadline: p.Deadline, keepaliveDone: make(chan struct{})}
	kctx, stop := context.WithCancel(context.Background())
	l.stopKeepalive = stop
	if p.Deadline.IsZero() {
		close(l.keepaliveDone)
	} else {
		go l.keepalive(kctx)
	}
	return l, l.lose
}

// Key is the locked key.
func (l *Lease) Key() string { return l.p.Key }

// Token is the fencing token to pass with every write made under this lease.
func (l *Lease) Token() Token { return l.p.Token }

// ID is the lease's unique id; the store records it next to the token so an
// equal token from a different lease is still rejected.
func (l *Lease) ID() uuid.UUID { return l.p.ID }

// Deadline is the current validity deadline; zero when the lease has none
// (it lasts as long as the backend's session or connection).
func (l *Lease) Deadline() time.Time {
	if l.p.Follows != nil {
		return l.p.Follows.Deadline()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Done is closed when the lease is lost or released.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err is nil while the lease is held, then wraps ErrLeaseLost or is ErrReleased.
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Context returns a child of parent that is cancelled, with the lease's Err
// as cause, as soon as the lease ends. Work done under the lease should use it
// so a lost lease aborts the work (a database transaction, say) promptly.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(l.ctx, func() { cancel(l.Err()) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// Release gives the lock up. It stops the keepalive and waits for it to exit
// before it asks the backend to release, so no extension can race the
// release. Calling it again, or after the lease was lost, is safe: the backend
// release only ever deletes what this lease owns.
func (l *Lease) Release(ctx context.Context) error {
	h := l.detach()
	if h == nil {
		return nil
	}
	if err := h.Release(ctx); err != nil {
		return fmt.Errorf("lock: release %q: %w", l.p.Key, err)
	}
	return nil
}

// detach ends the lease for a release: it stops the keepalive, waits for it
// to exit and marks the lease released. It returns the handle the backend
// must release, or nil when the lease was released before.
func (l *Lease) detach() Handle {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	l.mu.Unlock()

	l.stopKeepalive()
	<-l.keepaliveDone
	l.cancel(ErrReleased) // no-op when already lost: the first cause stays
	return l.p.Handle
}

func (l *Lease) lose(err error) {
	if l.ctx.Err() != nil {
		return
	}
	l.cancel(err)
	if context.Cause(l.ctx) == err && l.p.OnLost != nil {
		l.p.OnLost(err)
	}
}

// keepalive extends the lease at TTL/3 (with the watchdog; at once when less
// than that is left) and marks it lost the moment its validity deadline
// passes without a successful extension. A failed extension is treated as
// loss at once: a backend reports failure only when it could not renew on
// enough nodes, and waiting for the old deadline would only shorten the
// warning the holder gets.
func (l *Lease) keepalive(ctx context.Context) {
	defer close(l.keepaliveDone)
	ext, canExtend := l.p.Handle.(Extender)
	step := l.p.TTL / 3
	for {
		wait := time.Until(l.Deadline())
		extendNow := false
		if l.p.Watchdog && canExtend && step > 0 && wait > 0 {
			// With less than a step left (a slow acquisition used the
			// rest), at once: the validity left may still cover the round
			// trip, where waiting for the deadline loses the lease.
			extendNow = true
			if wait > step {
				wait = step
			} else {
				wait = 0
			}
		}
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-l.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if !extendNow {
			l.lose(fmt.Errorf("lock: %q: validity deadline passed without extension: %w", l.p.Key, ErrLeaseLost))
			return
		}
		ectx, cancel := context.WithDeadline(ctx, l.Deadline())
		d, err := ext.Extend(ectx)
		cancel()
		if ctx.Err() != nil {
			return // released while extending
		}
		if err != nil {
			l.lose(fmt.Errorf("lock: extend %q: %w", l.p.Key, joinLost(err)))
			return
		}
		l.mu.Lock()
		l.deadline = d
		l.mu.Unlock()
	}
}

func joinLost(err error) error {
	if errors.Is(err, ErrLeaseLost) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrLeaseLost, err)
}
