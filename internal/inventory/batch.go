package inventory

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
)

// hold is a batch leader's leases, kept across batches while orders keep
// coming, within Coalescing's caps.
type hold struct {
	set      lock.Set
	acquired time.Time
	batches  int
	// ledger is nil until the first batch has claimed the rows.
	ledger *ledger
	// broken is set when the ledger may no longer match the rows: a write
	// failed, so whether it landed is not known. The leases are then let go.
	broken bool
}

// covers reports whether every SKU is under the hold's leases.
func (h *hold) covers(skus []string) bool {
	for _, k := range skus {
		if h.set.Lease(k) == nil {
			return false
		}
	}
	return true
}

// usable reports whether another batch may run under h without a new
// acquisition. No new claim is needed: the write requires the fence this
// hold stamped to still stand, and the ledger is exactly what was written.
func (h *hold) usable(c Coalescing) bool {
	return h != nil && !h.broken && h.batches < c.MaxBatches && time.Since(h.acquired) < c.MaxHold && h.set.Err() == nil
}

// lead serves q until it is empty: take the orders waiting, under leases
// that cover them, as one batch; when the head of the queue needs leases
// not held (or the hold has run its course), release and acquire anew.
func (c *coalescer) lead(ctx context.Context, q *queue) {
	var h *hold
	for {
		batch, want, waiting := c.take(q, h)
		switch {
		case batch != nil:
			h = c.run(ctx, q, h, batch)
		case want != nil:
			c.release(ctx, h)
			h = c.acquire(ctx, want, waiting)
		default:
			c.release(ctx, h)
			return
		}
	}
}

// take returns the next batch, the orders at the head of the queue that h
// covers; or, when there are none, the SKUs to lock for the orders at the
// head (their union, within the caps) and those orders; or nothing when the
// queue is empty, which it then leaves (the next order starts a new leader).
func (c *coalescer) take(q *queue, h *hold) (batch []*pending, want []string, waiting []*pending) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		q.prune()
		if len(q.items) == 0 {
			delete(c.queues, q.key)
			return nil, nil, nil
		}
		if !h.usable(c.cfg) {
			break
		}
		n := 0
		for n < len(q.items) && len(batch) < c.cfg.MaxBatch {
			p := q.items[n]
			if p.state.Load() == stateQueued && !h.covers(p.skus) {
				break
			}
			if p.move(stateQueued, stateBatched) {
				batch = append(batch, p)
			}
			q.items[n] = nil
			n++
		}
		q.items = q.items[n:]
		if len(batch) > 0 {
			return batch, nil, nil
		}
		if n == 0 {
			break // the head needs other leases
		}
		// Everything taken had just been dropped: look again.
	}
	for _, p := range q.items {
		if len(waiting) == c.cfg.MaxBatch {
			break
		}
		if p.state.Load() != stateQueued {
			continue
		}
		union := mergeSorted(want, p.skus)
		if len(waiting) > 0 && len(union) > maxBatchSKUs {
			break
		}
		want, waiting = union, append(waiting, p)
	}
	return nil, want, waiting
}

// acquire locks want for the orders waiting on it, in sorted order, for as
// long as the last of them is willing to wait. On failure it answers them
// (each order's own timer may have answered it first) and returns nil.
func (c *coalescer) acquire(ctx context.Context, want []string, waiting []*pending) *hold {
	s := c.s
	deadline := waiting[0].deadline
	for _, p := range waiting {
		deadline = later(deadline, p.deadline)
	}
	actx, cancel := context.WithDeadline(ctx, deadline)
	start := time.Now()
	set, err := lock.AcquireAll(actx, s.locker, want, s.leaseOptions(false)...)
	cancel()
	s.obs.LockWait(time.Since(start))
	if err == nil {
		return &hold{set: set, acquired: time.Now()}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = notAcquired(s.lockWait, err)
	}
	for _, p := range waiting {
		if p.move(stateQueued, stateDecided) {
			p.answer <- err
		}
	}
	return nil
}

// verdict is one order's answer, sent once the batch is settled.
type verdict struct {
	p   *pending
	err error
}

// run decides and writes one batch under h and answers its orders. It
// returns h when the leases are kept for the next batch, nil when they were
// released.
func (c *coalescer) run(ctx context.Context, q *queue, h *hold, batch []*pending) *hold {
	h.batches++
	var decided []*pending
	for _, p := range batch {
		// An order whose client left before its decision is dropped here;
		// after it, the order stands or falls with the batch.
		if p.move(stateBatched, stateDecided) {
			decided = append(decided, p)
		}
	}
	var verdicts []verdict
	if len(decided) > 0 {
		verdicts = c.decideAndWrite(ctx, h, decided)
	}
	// Let the leases go before answering unless they serve the next batch at
	// once, so an instance that has answered every order holds nothing (as
	// when orders run alone), and a drained server leaves no lock behind.
	if !c.keep(q, h) {
		c.release(ctx, h)
		h = nil
	}
	for _, v := range verdicts {
		v.p.answer <- v.err
	}
	return h
}

// decideAndWrite is the critical section of a batch: claim (only under a
// fresh acquisition), decide each order in arrival order on the ledger, check
// the leases, write every placed order in one fenced transaction. Any failure
// of the claim, the leases or the write is every order's answer, those the
// ledger refused included: they were judged against a batch that did not
// happen. The one exception is a write refused for idempotency keys that
// other instances' orders took meanwhile: those orders are answered with
// the refusal (their requests replay the first), and the rest are decided
// and written again, under fences that still stand since nothing landed.
func (c *coalescer) decideAndWrite(ctx context.Context, h *hold, decided []*pending) []verdict {
	var done []verdict
	all := func(err error) []verdict {
		h.broken = true
		for _, p := range decided {
			done = append(done, verdict{p, err})
		}
		return done
	}
	if err := c.claim(ctx, h); err != nil {
		return all(c.s.failed(h.set, err))
	}
	for {
		verdicts, err := c.write(ctx, h, decided)
		var taken *KeyTakenError
		// Under a lost lease nothing is written again (failed has counted
		// the loss once; a second write would count it twice).
		if errors.As(err, &taken) && !errors.Is(err, lock.ErrLeaseLost) {
			rest := make([]*pending, 0, len(decided))
			for _, p := range decided {
				if k := p.order.IdempotencyKey; k != "" && slices.Contains(taken.Keys, k) {
					done = append(done, verdict{p, err})
				} else {
					rest = append(rest, p)
				}
			}
			if len(rest) < len(decided) {
				decided = rest
				continue
			}
		}
		if err != nil {
			return all(err)
		}
		return append(done, verdicts...)
	}
}

// write decides decided on a copy of h's ledger and writes the orders it
// places; the copy becomes h's ledger once written. An error is the whole
// batch's.
func (c *coalescer) write(ctx context.Context, h *hold, decided []*pending) ([]verdict, error) {
	s := c.s
	work := h.ledger.clone()
	verdicts := make([]verdict, len(decided))
	var placed []*Order
	for i, p := range decided {
		err := work.reserve(p.order)
		if err == nil {
			placed = append(placed, p.order)
		}
		verdicts[i] = verdict{p, err}
	}
	if len(placed) == 0 {
		return verdicts, nil // nothing to write: the ledger refused every order
	}
	if err := h.set.Err(); err != nil {
		// Checked as late as possible; a loss after it is the fence's job.
		s.obs.LeaseLost()
		return nil, err
	}
	skus, fences := work.write()
	wctx, cancel := context.WithTimeout(ctx, batchStoreTimeout)
	err := s.store.Write(wctx, fences, Write{SKUs: skus, Orders: placed})
	cancel()
	if err != nil {
		return nil, s.failed(h.set, err)
	}
	clear(work.changed)
	h.ledger = work
	if bo, ok := s.obs.(BatchObserver); ok {
		bo.Batch(len(placed))
	}
	return verdicts, nil
}

// claim stamps h's fences on the rows the first time a batch runs under h,
// and fills its ledger. A SKU that does not exist is set aside, so only the
// orders that name it fail (unknown_sku); the claim is retried for the rest.
func (c *coalescer) claim(ctx context.Context, h *hold) error {
	if h.ledger != nil {
		return nil
	}
	fences := make([]Fence, len(h.set))
	byKey := make(map[string]Fence, len(h.set))
	for i, l := range h.set {
		fences[i] = Fence{SKU: l.Key(), Token: uint64(l.Token()), Holder: l.ID()}
		byKey[l.Key()] = fences[i]
	}
	lctx, stop := h.set.Context(ctx)
	defer stop()
	unknown := make(map[string]error)
	for len(fences) > 0 {
		cctx, cancel := context.WithTimeout(lctx, batchStoreTimeout)
		skus, err := c.s.store.Claim(cctx, fences, false)
		cancel()
		var ke *SKUError
		if errors.As(err, &ke) && errors.Is(err, ErrUnknownSKU) {
			unknown[ke.SKU] = err
			fences = slices.DeleteFunc(fences, func(f Fence) bool { return f.SKU == ke.SKU })
			continue
		}
		if err != nil {
			return err
		}
		h.ledger = newLedger(skus, byKey, unknown)
		return nil
	}
	h.ledger = newLedger(map[string]SKU{}, byKey, unknown)
	return nil
}

// keep reports whether h should be kept for the next batch: it is still
// usable and the order at the head of the queue is already waiting for it.
func (c *coalescer) keep(q *queue, h *hold) bool {
	if !h.usable(c.cfg) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	q.prune()
	return len(q.items) > 0 && h.covers(q.items[0].skus)
}

func (c *coalescer) release(ctx context.Context, h *hold) {
	if h == nil {
		return
	}
	rctx, cancel := detached(ctx)
	defer cancel()
	if err := h.set.Release(rctx); err != nil {
		c.s.log.Warn("release leases", "err", err)
	}
}

// mergeSorted returns the sorted union of two sorted, duplicate-free lists.
func mergeSorted(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] < b[j]:
			out = append(out, a[i])
			i++
		case a[i] > b[j]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
