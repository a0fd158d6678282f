// Package reservation is Stockguard's request path: it places, confirms,
// cancels and expires orders and sets stock, each as an operation decided on
// the inventory rules inside the one critical section (section.go) under the
// SKUs' distributed locks. Concurrent orders share that section in batches
// (coalesce.go); idempotency keys (keys.go) and the reaper (reaper.go) sit
// around it.
package reservation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/tracing"
)

// Config wires a Service.
type Config struct {
	Store  inventory.Store
	Locker lock.Locker
	// Observer counts lock waits, stale fences and lost leases; optional.
	Observer Observer
	Logger   *slog.Logger
	// LockWait bounds how long a request waits for its locks before it is
	// answered lock_unavailable. Default 5s.
	LockWait time.Duration
	// TTL is the lease TTL asked of expiring backends; zero leaves the
	// backend's default.
	TTL time.Duration
	// Now is the clock holds are stamped and judged by; default time.Now.
	// Instances that share a database must share it too (serve passes the
	// database's, postgres.Clock): otherwise one whose clock runs fast
	// reaps holds early, and one running slow writes holds already over.
	Now func() time.Time
	// Coalescing batches concurrent orders per SKU; the zero value is on.
	Coalescing Coalescing
	// Tracer makes a span per acquisition and its batches, linked to and
	// from every request it serves; nil: none.
	Tracer *tracing.Tracer
}

// Observer receives the service's events worth counting.
type Observer interface {
	LockWait(d time.Duration)
	StaleFence()
	LeaseLost()
}

// BatchObserver may be implemented by an Observer that also wants the
// number of orders in every batch written.
type BatchObserver interface {
	Batch(orders int)
}

// SectionObserver may be implemented by an Observer that also wants where
// the critical sections' time goes: how long each one held its leases,
// from the acquisition returning to their release or hand-over, and how
// long each store call under them took (StoreClaim, StoreWrite). On a hot
// SKU one key's holds follow each other, so their sum over a while, against
// that while, is the share the key was held; the rest went to hand-offs
// between holders.
type SectionObserver interface {
	LockHeld(d time.Duration)
	StoreCall(call string, d time.Duration)
}

// The store calls a SectionObserver is told of.
const (
	StoreClaim = "claim"
	StoreWrite = "write"
)

// ReapObserver may be implemented by an Observer that also wants the outcome
// of every expiry the reaper tried: "expired", "skipped" (the order had
// moved on first, another instance held its keys, or the instance's batch
// queues were full: it is listed again while still due) or "failed"
// (retried later, backing off).
type ReapObserver interface {
	Reaped(outcome string)
}

type nopObserver struct{}

func (nopObserver) LockWait(time.Duration) {}
func (nopObserver) StaleFence()            {}
func (nopObserver) LeaseLost()             {}

// Service places, confirms, cancels and expires orders and sets stock, each
// under the distributed locks of the SKUs it touches.
type Service struct {
	store  inventory.Store
	locker lock.Locker
	obs    Observer
	// section is obs when it is a SectionObserver, else nil: asked once,
	// not on every store call and release of the critical section.
	section  SectionObserver
	log      *slog.Logger
	lockWait time.Duration
	ttl      time.Duration
	now      func() time.Time
	// coalesce is nil when coalescing is off.
	coalesce *coalescer
	keys     *keys
	known    *knownSKUs
	life     *lifecycle
	tracer   *tracing.Tracer
}

// New returns a Service.
func New(c Config) *Service {
	s := &Service{store: c.Store, locker: c.Locker, obs: c.Observer, log: c.Logger,
		lockWait: c.LockWait, ttl: c.TTL, now: c.Now, keys: newKeys(c.Store), known: newKnownSKUs(c.Store, maxKnownSKUs),
		life: newLifecycle(), tracer: c.Tracer}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	s.section, _ = s.obs.(SectionObserver)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.lockWait <= 0 {
		s.lockWait = 5 * time.Second
	}
	if s.now == nil {
		s.now = time.Now
	}
	if !c.Coalescing.Disabled {
		_, handover := c.Locker.(lock.Handover)
		s.coalesce = &coalescer{s: s, cfg: c.Coalescing.withDefaults(), queues: make(map[string]*queue),
			emptied: make(map[string]time.Time), handover: handover}
	}
	return s
}

// Place reserves stock for every line of the request, or for none. With an
// idempotency key (see keys.go), a repeat of a placed request returns the
// first order (replayed = true); the same key with a different request is
// refused, and so is a repeat while the first still runs in this instance.
// A repeat sent to another instance while the first runs waits its turn and
// then replays the first, or is placed if the first was refused.
func (s *Service) Place(ctx context.Context, req inventory.PlaceRequest) (o *inventory.Order, replayed bool, err error) {
	if err := req.Validate(); err != nil {
		return nil, false, err
	}
	// Version 7: time-ordered, so the orders' and lines' primary keys grow
	// at their right edge instead of dirtying a random index page per
	// order (Postgres' CPU per order 10 % lower on the spread workload);
	// 74 random bits still make an id unguessable.
	id, err := uuid.NewV7()
	if err != nil {
		return nil, false, fmt.Errorf("reservation: order id: %w", err)
	}
	// CreatedAt and ExpiresAt are set when the order is decided under its
	// leases (placeOp): a hold that began at arrival would lose the lock wait.
	o = &inventory.Order{ID: id, Status: inventory.StatusReserved, IdempotencyKey: req.IdempotencyKey,
		RequestHash: req.Hash(), Lines: make([]inventory.Line, len(req.Lines))}
	for i, l := range req.Lines {
		o.Lines[i] = inventory.Line{SKU: l.SKU, Quantity: l.Quantity}
	}
	if o.IdempotencyKey != "" {
		leave, err := s.keys.enter(o.IdempotencyKey, o.RequestHash)
		if err != nil {
			return nil, false, err
		}
		defer leave()
	}
	err = s.submit(ctx, s.pending(ctx, placeOp(o, req.Hold, s.now)))
	if errors.Is(err, inventory.ErrOutcomeUnknown) {
		// The write was sent and its answer lost: it may have placed o. Only
		// o's row can say, and reading it costs one lookup on a path that
		// is rare. Absent, o may still land (until the store settles the
		// write), so the answer stays unknown.
		if s.stored(ctx, o.ID) {
			return o, false, nil
		}
	}
	if err != nil && o.IdempotencyKey != "" && ctx.Err() == nil && !errors.Is(err, inventory.ErrOverloaded) {
		// Nothing of this request landed (or, its outcome unknown, not
		// yet). Its key may be held by an earlier request (a replay,
		// refused by the write as *KeyTakenError, or by the ledger if the
		// stock has gone since) or by one that another instance placed
		// while this one waited: answer as a repeat of it. Held by o, the
		// write whose answer was lost landed after all: o is new.
		if first, found, ferr := s.replayKey(ctx, o); found || ferr != nil {
			return first, ferr == nil && first.ID != o.ID, ferr
		}
	}
	if err != nil {
		return nil, false, err
	}
	return o, false, nil
}

// submit runs p through the critical section and returns its answer:
// batched with the instance's other orders and status changes, whatever
// their SKUs, or, coalescing off, alone.
func (s *Service) submit(ctx context.Context, p *pending) error {
	if s.coalesce != nil {
		return s.coalesce.place(ctx, p)
	}
	return s.alone(ctx, p)
}

// stored reports whether the order id exists, read even if ctx has ended:
// a client still waiting for its answer gets the truth.
func (s *Service) stored(ctx context.Context, id uuid.UUID) bool {
	rctx, cancel := detached(ctx)
	defer cancel()
	_, err := s.store.Order(rctx, id)
	return err == nil
}

// replayKey answers o from the order that holds its idempotency key, if one
// does (found): that order's replay, or ErrIdempotencyReused; or o itself
// when the order holding the key is o.
func (s *Service) replayKey(ctx context.Context, o *inventory.Order) (first *inventory.Order, found bool, err error) {
	prev, err := s.keys.find(ctx, o.IdempotencyKey)
	if err != nil || prev == nil {
		return nil, false, err
	}
	if prev.ID == o.ID {
		// o's own write, its answer lost, committed after stored looked:
		// this request placed it, so it is no replay of an earlier one.
		return o, true, nil
	}
	first, err = replay(prev, o.RequestHash)
	return first, true, err
}

// SetStock sets a SKU's available units, creating the SKU if needed.
// Received moves by the same amount, so received = available + held + sold.
func (s *Service) SetStock(ctx context.Context, name string, available int64) (inventory.SKU, error) {
	return s.setStock(ctx, name, available, inventory.StockExpectation{})
}

// SetStockIf is SetStock on the condition that the SKU meets expect when
// its lease is held (a SKU that does not exist counts as 0 of each);
// otherwise nothing is written and the error, a *inventory.SKUError,
// matches inventory.ErrStockChanged. A level computed from a read is then
// not set over the orders placed since the read (expect.Available), and a
// repeat of one that landed is refused instead of applied twice, even if
// orders brought available back to the number read (expect.Received).
func (s *Service) SetStockIf(ctx context.Context, name string, available int64, expect inventory.StockExpectation) (inventory.SKU, error) {
	return s.setStock(ctx, name, available, expect)
}

func (s *Service) setStock(ctx context.Context, name string, available int64, expect inventory.StockExpectation) (inventory.SKU, error) {
	if err := inventory.ValidateSKU(name); err != nil {
		return inventory.SKU{}, err
	}
	if err := inventory.ValidateStock(available); err != nil {
		return inventory.SKU{}, err
	}
	if err := inventory.ValidateExpectation(expect); err != nil {
		return inventory.SKU{}, err
	}
	var out inventory.SKU
	err := s.alone(ctx, s.pending(ctx, setOp(name, available, expect, &out)))
	return out, err
}

// SKU returns a SKU's counters.
func (s *Service) SKU(ctx context.Context, name string) (inventory.SKU, error) {
	if err := inventory.ValidateSKU(name); err != nil {
		return inventory.SKU{}, err
	}
	return s.store.SKU(ctx, name)
}

// Audit recomputes a SKU from its order lines.
func (s *Service) Audit(ctx context.Context, name string) (inventory.Audit, error) {
	if err := inventory.ValidateSKU(name); err != nil {
		return inventory.Audit{}, err
	}
	return s.store.Audit(ctx, name)
}

// Order returns an order by id; a malformed id is simply unknown.
func (s *Service) Order(ctx context.Context, id string) (*inventory.Order, error) {
	uid, err := uuid.Parse(id)
	if err != nil {
		return nil, inventory.ErrUnknownOrder
	}
	return s.store.Order(ctx, uid)
}

// Confirm turns an order's held units into sold ones.
func (s *Service) Confirm(ctx context.Context, id string) (*inventory.Order, error) {
	return s.transition(ctx, id, inventory.StatusConfirmed)
}

// Cancel returns an order's held units to stock.
func (s *Service) Cancel(ctx context.Context, id string) (*inventory.Order, error) {
	return s.transition(ctx, id, inventory.StatusCancelled)
}

// expire moves orders, listed reserved with their holds run out, to
// expired and returns each one's answer. Coalescing, they go all at once
// and share batches with each other and with the orders being placed; each
// takes its keys only in its batch's try (pending.try), so one that another
// instance is moving answers errKeyBusy instead of waiting for it. With
// coalescing off they run one after another, each a batch of one. An order
// someone moved first answers ErrInvalidTransition.
func (s *Service) expire(ctx context.Context, orders []*inventory.Order) []error {
	errs := make([]error, len(orders))
	if s.coalesce == nil {
		for i, o := range orders {
			errs[i] = s.alone(ctx, s.pending(ctx, transitionOp(o, inventory.StatusExpired, s.now)))
		}
		return errs
	}
	var wg sync.WaitGroup
	for i, o := range orders {
		p := s.pending(ctx, transitionOp(o, inventory.StatusExpired, s.now))
		p.try = true
		wg.Go(func() { errs[i] = s.coalesce.place(ctx, p) })
	}
	wg.Wait()
	return errs
}

func (s *Service) Ready(ctx context.Context) error {
	if err := s.store.Ping(ctx); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

func (s *Service) transition(ctx context.Context, id string, to inventory.Status) (*inventory.Order, error) {
	o, err := s.Order(ctx, id)
	if err != nil {
		return nil, err
	}
	if o.Status == to {
		return o, nil // confirming a confirmed order, cancelling a cancelled one
	}
	if o.Status != inventory.StatusReserved {
		return nil, &inventory.TransitionError{From: o.Status, To: to}
	}
	if to == inventory.StatusConfirmed {
		err = holdExpired(o, to, s.now())
	}
	if err == nil {
		err = s.submit(ctx, s.pending(ctx, transitionOp(o, to, s.now)))
	}
	if unknown := errors.Is(err, inventory.ErrOutcomeUnknown); unknown || errors.Is(err, inventory.ErrInvalidTransition) {
		// Someone else moved the order first (another instance, the reaper),
		// or our own write may have, its answer lost: answer from where it
		// stands now. Still reserved after a lost answer, it may yet move.
		// A hold found run out is read again too: a confirm retried at the
		// hold's end, after the first one landed, finds the order confirmed
		// (200), not its hold expired.
		rctx, cancel := detached(ctx)
		defer cancel()
		cur, gerr := s.store.Order(rctx, o.ID)
		switch {
		case gerr != nil && unknown:
			return nil, err
		case gerr != nil:
			return nil, gerr
		case cur.Status == to:
			return cur, nil
		case cur.Status == inventory.StatusReserved && unknown:
			return nil, err
		case isHoldExpired(err) && (cur.Status == inventory.StatusReserved || cur.Status == inventory.StatusExpired):
			return nil, err // expired, or soon by the reaper: the refusal says when
		}
		return nil, &inventory.TransitionError{From: cur.Status, To: to}
	}
	if err != nil {
		return nil, err
	}
	o.Status = to
	return o, nil
}
