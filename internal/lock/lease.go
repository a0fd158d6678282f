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
//
// A caller's extension may still be in flight when the lease's release
// reaches the backend (Release cancels it but does not wait for it), so an
// extension must only renew what the lease still holds, never bring back
// what a release removed: a compare-and-expire on the lease's own value
// (redis, redlock), a keepalive of the session (pglock: the unlock took the
// key; etcd: the release deleted it).
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
	// It may run on the lease's keepalive, which Release waits for: it must
	// not release the lease, nor wait for its Release, on its own goroutine.
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

	// turn is held by one extension at a time, the watchdog's or a
	// caller's, so that each starts from the deadline the one before it
	// stored. Made by the first extension (see turnOf): most leases are
	// released before the watchdog's first, at TTL/3.
	turn chan struct{}
	// stopped ends when Release begins, under mu with released: it aborts
	// the keepalive and the backend call of the extension in flight.
	stopped       context.Context
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
	l.stopped, l.stopKeepalive = context.WithCancel(context.Background())
	if p.Deadline.IsZero() {
		close(l.keepaliveDone)
	} else {
		go l.keepalive(l.stopped)
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

// Release gives the lock up. It stops the keepalive and waits for it to
// exit before it asks the backend to release, so the watchdog's extension
// cannot race the release. A caller's Extend in flight is cancelled, not
// waited for (a backend call deaf to its context would hold the release
// up), and its answer is dropped: an extension that reaches the backend
// alongside the release only renews what this lease still owns there (see
// Extender). Calling it again, or after the lease was lost, is safe: the
// backend release only ever deletes what this lease owns.
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

// detach ends the lease for a release: it marks the lease released, stops
// the keepalive and the extension in flight, and waits for the keepalive
// to exit. It returns the handle the backend must release, or nil when the
// lease was released before.
func (l *Lease) detach() Handle {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	// Under mu: an extension stores its answer under mu unless stopped has
	// ended, so none lands once the release has begun.
	l.stopKeepalive()
	l.mu.Unlock()

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

// Extend pushes the validity deadline out by the lease's TTL now, as the
// watchdog does every TTL/3, and returns the new deadline: a holder that
// took the lease WithoutWatchdog, or is about to start a long step, renews
// it itself. The deadline never moves backwards.
//
// Once the lease has ended Extend returns its end: Err, or ErrReleased when
// a Release is under way. The backend's round trip is the watchdog's, in
// the same turn: bounded by the current deadline and by Release, not by
// ctx, since a backend may end a session whose renewal it abandons
// (pglock); Extend returns when ctx ends, and the extension goes on (one
// whose ctx is done already starts none). An answer that comes once the
// deadline has passed is too late: the lease is lost at its deadline,
// whatever extension is in flight. A backend's answer that the lock is no
// longer ours (an error wrapping ErrLeaseLost) loses the lease. Any other
// failure is returned and the lease stays valid until its current
// deadline, where the watchdog, which has nothing to return it to, loses
// it at once.
//
// A lease without a deadline (ZooKeeper, none, local) lasts as long as its
// backend's session, which the backend keeps alive and watches itself,
// losing the lease the moment the session is: Extend returns the zero
// deadline, and nil while the lease is held, with no round trip that would
// tell more than Err does.
func (l *Lease) Extend(ctx context.Context) (time.Time, error) {
	if l.p.Follows != nil {
		if err := l.Err(); err != nil {
			return time.Time{}, fmt.Errorf("lock: extend %q: %w", l.p.Key, err)
		}
		return l.p.Follows.Extend(ctx)
	}
	if l.p.Deadline.IsZero() {
		if err := l.Err(); err != nil {
			return time.Time{}, fmt.Errorf("lock: extend %q: %w", l.p.Key, err)
		}
		return time.Time{}, nil
	}
	ext, ok := l.p.Handle.(Extender)
	if !ok {
		return time.Time{}, fmt.Errorf("lock: extend %q: the backend's leases expire unextended", l.p.Key)
	}
	return l.extend(ctx, ext)
}

// extend waits for the lease's turn and runs a caller's extension in it; it
// returns when the extension does or ctx ends.
func (l *Lease) extend(ctx context.Context, ext Extender) (time.Time, error) {
	if err := l.take(ctx); err != nil {
		return time.Time{}, err
	}
	type extension struct {
		deadline time.Time
		err      error
	}
	done := make(chan extension, 1)
	go func() {
		defer l.give()
		d, err := l.extendInTurn(ext)
		done <- extension{d, err}
	}()
	select {
	case e := <-done:
		return e.deadline, e.err
	case <-ctx.Done():
		return time.Time{}, fmt.Errorf("lock: extend %q: %w", l.p.Key, ctx.Err())
	}
}

// extendInTurn asks the backend to extend the lease, which it loses when
// the backend says the lock is no longer ours or the deadline has passed,
// and stores the later deadline. The caller has the turn.
func (l *Lease) extendInTurn(ext Extender) (time.Time, error) {
	if err := l.ended(); err != nil {
		return time.Time{}, err
	}
	deadline := l.Deadline()
	if !time.Now().Before(deadline) {
		return time.Time{}, l.lapse()
	}
	ctx, cancel := context.WithDeadline(l.stopped, deadline)
	// A backend call deaf to its context must not hold the loss back, the
	// watchdog's least of all (its goroutine has the only timer on the
	// deadline): at the deadline the lease lapses, and store drops the
	// late answer.
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			_ = l.lapseIfPast()
		}
	})
	d, err := ext.Extend(ctx)
	stop()
	cancel()
	if end := l.ended(); end != nil {
		return time.Time{}, end // released while extending: not a loss
	}
	if err != nil {
		err = fmt.Errorf("lock: extend %q: %w", l.p.Key, err)
		if errors.Is(err, ErrLeaseLost) {
			l.lose(err)
		}
		return time.Time{}, err
	}
	return l.store(d)
}

// store makes d, an extension's answer, the deadline if it is later, while
// the lease is valid. An answer that comes once the deadline has passed is
// dropped and the lease lapses: the keepalive, which does not wait for
// extensions, may have lost it already, and a lost lease stays lost.
func (l *Lease) store(d time.Time) (time.Time, error) {
	l.mu.Lock()
	if err := l.ended(); err != nil {
		l.mu.Unlock()
		return time.Time{}, err
	}
	if !time.Now().Before(l.deadline) {
		l.mu.Unlock()
		return time.Time{}, l.lapse()
	}
	if d.After(l.deadline) {
		l.deadline = d
	}
	d = l.deadline
	l.mu.Unlock()
	return d, nil
}

// take waits for the lease's turn to extend, or for ctx or the lease to end.
// The lease may lapse meanwhile, at its deadline (see keepalive).
func (l *Lease) take(ctx context.Context) error {
	// Before the select, which would take a free turn as readily as it
	// sees ctx done, and start a round trip nobody waits for.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lock: extend %q: %w", l.p.Key, err)
	}
	select {
	case l.turnOf() <- struct{}{}:
		return nil
	case <-l.ctx.Done():
		return fmt.Errorf("lock: extend %q: %w", l.p.Key, l.Err())
	case <-ctx.Done():
		return fmt.Errorf("lock: extend %q: %w", l.p.Key, ctx.Err())
	}
}

func (l *Lease) give() { <-l.turnOf() }

// turnOf is the lease's turn, made on first use.
func (l *Lease) turnOf() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.turn == nil {
		l.turn = make(chan struct{}, 1)
	}
	return l.turn
}

// ended is the lease's end, once it has ended or its Release has begun.
func (l *Lease) ended() error {
	if err := l.Err(); err != nil {
		return fmt.Errorf("lock: extend %q: %w", l.p.Key, err)
	}
	if l.stopped.Err() != nil {
		return fmt.Errorf("lock: extend %q: %w", l.p.Key, ErrReleased)
	}
	return nil
}

// lapse loses the lease whose validity deadline has passed unextended.
func (l *Lease) lapse() error {
	err := fmt.Errorf("lock: %q: validity deadline passed without extension: %w", l.p.Key, ErrLeaseLost)
	l.lose(err)
	return err
}

// lapseIfPast loses the lease, unless released, once its deadline has
// passed, and returns the loss; nil while the deadline is ahead. The
// deadline is judged under mu, where extensions store theirs: one
// stored later would have to come before the deadline, which has passed.
func (l *Lease) lapseIfPast() error {
	l.mu.Lock()
	passed := !l.released && !time.Now().Before(l.deadline)
	l.mu.Unlock()
	if !passed {
		return nil
	}
	return l.lapse()
}

// keepalive extends the lease at TTL/3 (with the watchdog; at once when less
// than that is left) and marks it lost the moment its validity deadline
// passes without a successful extension, its own or a caller's (Extend). A
// failed extension is treated as loss at once: a backend reports failure
// only when it could not renew on enough nodes before the deadline, and
// waiting for it would only shorten the warning the holder gets.
func (l *Lease) keepalive(ctx context.Context) {
	defer close(l.keepaliveDone)
	ext, canExtend := l.p.Handle.(Extender)
	step := l.p.TTL / 3
	watchdog := l.p.Watchdog && canExtend && step > 0
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		wait := time.Until(l.Deadline())
		extendNow := watchdog && wait > 0
		if extendNow {
			// With less than a step left (a slow acquisition used the
			// rest), at once: the validity left may still cover the round
			// trip, where waiting for the deadline loses the lease.
			if wait > step {
				wait = step
			} else {
				wait = 0
			}
		}
		t.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		if !extendNow {
			// Not in the turn: a caller's extension stuck in its backend
			// call must not hold the loss back. Only one that stores its
			// answer before the deadline moves it.
			if l.lapseIfPast() != nil {
				return
			}
			continue
		}
		if err := l.extendOnWatch(ctx, ext, t); err != nil {
			if ctx.Err() == nil {
				l.lose(joinLost(err))
			}
			return
		}
	}
}

// extendOnWatch runs the watchdog's extension in the lease's turn, on the
// keepalive's goroutine (ctx is stopped, which Release ends). While a
// caller's extension holds the turn, the lease lapses at its deadline
// with t, the keepalive's timer.
func (l *Lease) extendOnWatch(ctx context.Context, ext Extender, t *time.Timer) error {
	turn := l.turnOf()
	select {
	case turn <- struct{}{}:
	default:
		for taken := false; !taken; {
			t.Reset(max(time.Until(l.Deadline()), 0))
			select {
			case turn <- struct{}{}:
				taken = true
			case <-t.C:
				if err := l.lapseIfPast(); err != nil {
					return err
				}
			case <-l.ctx.Done():
				return fmt.Errorf("lock: extend %q: %w", l.p.Key, l.Err())
			case <-ctx.Done():
				return fmt.Errorf("lock: extend %q: %w", l.p.Key, ctx.Err())
			}
		}
	}
	defer l.give()
	_, err := l.extendInTurn(ext)
	return err
}

func joinLost(err error) error {
	if errors.Is(err, ErrLeaseLost) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrLeaseLost, err)
}
