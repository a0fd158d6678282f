package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/lock"
)

// Config wires a Service.
type Config struct {
	Store  Store
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
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Coalescing batches concurrent orders per SKU; the zero value is on.
	Coalescing Coalescing
}

// Service places, confirms, cancels and expires orders and sets stock, each
// under the distributed locks of the SKUs it touches.
type Service struct {
	store    Store
	locker   lock.Locker
	obs      Observer
	log      *slog.Logger
	lockWait time.Duration
	ttl      time.Duration
	now      func() time.Time
	// coalesce is nil when coalescing is off.
	coalesce *coalescer
	keys     *keys
}

// New returns a Service.
func New(c Config) *Service {
	s := &Service{store: c.Store, locker: c.Locker, obs: c.Observer, log: c.Logger,
		lockWait: c.LockWait, ttl: c.TTL, now: c.Now, keys: newKeys(c.Store)}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
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
		s.coalesce = &coalescer{s: s, cfg: c.Coalescing.withDefaults(), queues: make(map[string]*queue)}
	}
	return s
}

// Place reserves stock for every line of the request, or for none. With an
// idempotency key (see keys.go), a repeat of a placed request returns the
// first order (replayed = true); the same key with a different request is
// refused, and so is a repeat while the first still runs in this instance.
// A repeat sent to another instance while the first runs waits its turn and
// then replays the first, or is placed if the first was refused.
func (s *Service) Place(ctx context.Context, req PlaceRequest) (o *Order, replayed bool, err error) {
	if err := req.Validate(); err != nil {
		return nil, false, err
	}
	o = &Order{ID: uuid.New(), Status: StatusReserved, IdempotencyKey: req.IdempotencyKey, RequestHash: req.Hash(),
		// Postgres keeps microseconds: a replay must read back what the first answer said.
		Lines: make([]Line, len(req.Lines)), CreatedAt: s.now().Truncate(time.Microsecond)}
	for i, l := range req.Lines {
		o.Lines[i] = Line{SKU: l.SKU, Quantity: l.Quantity}
	}
	o.ExpiresAt = o.CreatedAt.Add(req.Hold)
	if o.IdempotencyKey != "" {
		leave, err := s.keys.enter(o.IdempotencyKey, o.RequestHash)
		if err != nil {
			return nil, false, err
		}
		defer leave()
	}
	if s.coalesce != nil && pauseOf(ctx) == 0 {
		err = s.coalesce.place(ctx, o)
	} else {
		// Alone: coalescing is off, or the request carries a chaos pause,
		// which must stall its own critical section, not a whole batch's.
		err = s.locked(ctx, o.SKUs(), false, func(skus map[string]SKU, fences map[string]Fence) (Write, error) {
			l := newLedger(skus, fences, nil)
			if err := l.reserve(o); err != nil {
				return Write{}, err
			}
			changed, _ := l.write()
			return Write{Order: o, SKUs: changed}, nil
		})
	}
	if err != nil && o.IdempotencyKey != "" && ctx.Err() == nil {
		// Nothing of this request landed. Its key may be held by an earlier
		// request (a replay, refused by the write as *KeyTakenError, or by
		// the ledger if the stock has gone since) or by one that another
		// instance placed while this one waited: answer as a repeat of it.
		if first, found, ferr := s.replayKey(ctx, o); found || ferr != nil {
			return first, ferr == nil, ferr
		}
	}
	if err != nil {
		return nil, false, err
	}
	return o, false, nil
}

// replayKey answers o from the order that holds its idempotency key, if one
// does (found): that order's replay, or ErrIdempotencyReused.
func (s *Service) replayKey(ctx context.Context, o *Order) (first *Order, found bool, err error) {
	prev, err := s.keys.find(ctx, o.IdempotencyKey)
	if err != nil || prev == nil {
		return nil, false, err
	}
	first, err = replay(prev, o.RequestHash)
	return first, true, err
}

// SetStock sets a SKU's available units, creating the SKU if needed.
// Received moves by the same amount, so received = available + held + sold.
func (s *Service) SetStock(ctx context.Context, name string, available int64) (SKU, error) {
	if err := ValidateSKU(name); err != nil {
		return SKU{}, err
	}
	if err := ValidateStock(available); err != nil {
		return SKU{}, err
	}
	var out SKU
	err := s.locked(ctx, []string{name}, true, func(skus map[string]SKU, fences map[string]Fence) (Write, error) {
		sku := skus[name]
		sku.Received += available - sku.Available
		sku.Available = available
		sku.FenceToken = fences[name].Token
		out = sku
		return Write{SKUs: []SKU{sku}}, nil
	})
	return out, err
}

// SKU returns a SKU's counters.
func (s *Service) SKU(ctx context.Context, name string) (SKU, error) {
	if err := ValidateSKU(name); err != nil {
		return SKU{}, err
	}
	return s.store.SKU(ctx, name)
}

// Audit recomputes a SKU from its order lines.
func (s *Service) Audit(ctx context.Context, name string) (Audit, error) {
	if err := ValidateSKU(name); err != nil {
		return Audit{}, err
	}
	return s.store.Audit(ctx, name)
}

// Order returns an order by id; a malformed id is simply unknown.
func (s *Service) Order(ctx context.Context, id string) (*Order, error) {
	uid, err := uuid.Parse(id)
	if err != nil {
		return nil, ErrUnknownOrder
	}
	return s.store.Order(ctx, uid)
}

// Confirm turns an order's held units into sold ones.
func (s *Service) Confirm(ctx context.Context, id string) (*Order, error) {
	return s.transition(ctx, id, StatusConfirmed)
}

// Cancel returns an order's held units to stock.
func (s *Service) Cancel(ctx context.Context, id string) (*Order, error) {
	return s.transition(ctx, id, StatusCancelled)
}

// Expire returns the units of an order whose hold ran out.
func (s *Service) Expire(ctx context.Context, id uuid.UUID) error {
	_, err := s.transition(ctx, id.String(), StatusExpired)
	return err
}

// Ready checks the store and the lock backend.
func (s *Service) Ready(ctx context.Context) error {
	if err := s.store.Ping(ctx); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := s.locker.Ping(ctx); err != nil {
		return fmt.Errorf("lock %s: %w", s.locker.Name(), err)
	}
	return nil
}

func (s *Service) transition(ctx context.Context, id string, to Status) (*Order, error) {
	o, err := s.Order(ctx, id)
	if err != nil {
		return nil, err
	}
	if o.Status == to {
		return o, nil // confirming a confirmed order, cancelling a cancelled one
	}
	if o.Status != StatusReserved {
		return nil, &TransitionError{From: o.Status, To: to}
	}
	if to == StatusConfirmed && !s.now().Before(o.ExpiresAt) {
		return nil, fmt.Errorf("%w: the hold expired at %s", &TransitionError{From: StatusExpired, To: to},
			o.ExpiresAt.UTC().Format(time.RFC3339))
	}
	err = s.locked(ctx, o.SKUs(), false, func(skus map[string]SKU, _ map[string]Fence) (Write, error) {
		w := Write{Transition: &Transition{ID: o.ID, From: StatusReserved, To: to}}
		for _, l := range o.Lines {
			sku := skus[l.SKU]
			sku.Reserved -= l.Quantity
			if to == StatusConfirmed {
				sku.Sold += l.Quantity
			} else {
				sku.Available += l.Quantity
			}
			w.SKUs = append(w.SKUs, sku)
		}
		return w, nil
	})
	if errors.Is(err, ErrInvalidTransition) {
		// Someone else moved the order first (another instance, the reaper):
		// answer from where it stands now.
		cur, gerr := s.Order(ctx, id)
		if gerr != nil {
			return nil, gerr
		}
		if cur.Status == to {
			return cur, nil
		}
		return nil, &TransitionError{From: cur.Status, To: to}
	}
	if err != nil {
		return nil, err
	}
	o.Status = to
	return o, nil
}

// decideFunc computes a Write from the counters the claim returned.
type decideFunc func(skus map[string]SKU, fences map[string]Fence) (Write, error)

// locked is the critical section: acquire the SKUs' leases in sorted order,
// claim the rows with the leases' fences, decide, then write under the fence.
//
// The write deliberately runs on the request's context, not the lease's: the
// lease is checked just before it, and a holder that stalls after that check
// (a GC pause, SIGSTOP) sends its write late whatever we do. Only the fence
// in the store stops such a write; pretending otherwise would hide the
// problem this service exists to demonstrate.
func (s *Service) locked(ctx context.Context, skus []string, create bool, decide decideFunc) error {
	pause := pauseOf(ctx)
	wctx, cancel := context.WithTimeout(ctx, s.lockWait)
	start := time.Now()
	set, err := lock.AcquireAll(wctx, s.locker, skus, s.leaseOptions(pause > 0)...)
	cancel()
	s.obs.LockWait(time.Since(start))
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = notAcquired(s.lockWait, err)
		}
		return err
	}
	defer func() {
		rctx, cancel := detached(ctx)
		defer cancel()
		if err := set.Release(rctx); err != nil {
			s.log.Warn("release leases", "skus", skus, "err", err)
		}
	}()

	fences := make([]Fence, len(set))
	byKey := make(map[string]Fence, len(set))
	for i, l := range set {
		fences[i] = Fence{SKU: l.Key(), Token: uint64(l.Token()), Holder: l.ID()}
		byKey[l.Key()] = fences[i]
	}
	lctx, stop := set.Context(ctx)
	defer stop()
	counters, err := s.store.Claim(lctx, fences, create)
	if err != nil {
		return s.failed(set, err)
	}
	w, err := decide(counters, byKey)
	if err != nil {
		return err
	}
	if err := set.Err(); err != nil {
		s.obs.LeaseLost()
		return err
	}
	if pause > 0 {
		s.log.Warn("chaos: pausing inside the critical section", "pause", pause, "skus", skus)
		if err := sleep(ctx, pause); err != nil {
			return err
		}
	}
	if err := s.store.Write(ctx, fences, w); err != nil {
		return s.failed(set, err)
	}
	return nil
}

// leaseOptions are the options of every acquisition. A lease that will be
// paused on purpose gets no watchdog: a paused process renews nothing.
func (s *Service) leaseOptions(paused bool) []lock.Option {
	var opts []lock.Option
	if s.ttl > 0 {
		opts = append(opts, lock.WithTTL(s.ttl))
	}
	if paused {
		opts = append(opts, lock.WithoutWatchdog())
	}
	return opts
}

// notAcquired is the answer to a request that waited its whole lock wait.
func notAcquired(wait time.Duration, err error) error {
	return fmt.Errorf("%w: waited %s: %w", lock.ErrNotAcquired, wait, err)
}

// failed classifies a store error raised under the leases.
func (s *Service) failed(set lock.Set, err error) error {
	if errors.Is(err, ErrStaleFence) {
		s.obs.StaleFence()
		s.log.Warn("stale fence: write rejected", "err", err)
		return err
	}
	if lerr := set.Err(); lerr != nil && errors.Is(lerr, lock.ErrLeaseLost) {
		s.obs.LeaseLost()
		return fmt.Errorf("%w (%w)", lerr, err)
	}
	return err
}

// detached gives clean-up work a context that outlives a cancelled request:
// a release that never reaches the backend blocks the key for a whole TTL.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
}
