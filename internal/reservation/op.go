package reservation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockguard/stockguard/internal/inventory"
)

// op is one stock change, decided inside the critical section on the
// ledger of the leases it runs under. Every kind of change is one: placing
// an order, setting stock, confirming, cancelling or expiring an order.
type op struct {
	// skus are the leases it needs, sorted.
	skus []string
	// create has the claim create missing SKU rows (setting stock).
	create bool
	// anySKU has the section lock skus without first asking whether they
	// exist (known.go): setting stock takes its lock like any stock
	// change, whether or not it creates the SKU.
	anySKU bool
	// key is the idempotency key of an order to place: a write may refuse it
	// alone (*inventory.KeyTakenError).
	key string
	// order is the id of the order to place or move: a write may refuse it
	// alone (*inventory.OrderError).
	order uuid.UUID
	// decide applies the change to the ledger, all of it or none, and adds
	// to w what the store must record with the ledger's changes. An error
	// refuses this op alone.
	decide func(l *inventory.Ledger, w *inventory.Write) error
}

// placeOp reserves o's lines and inserts o, its hold starting as it is
// decided: an order that waited for its leases longer than hold would
// otherwise be answered reserved with its hold already over.
func placeOp(o *inventory.Order, hold time.Duration, now func() time.Time) *op {
	return &op{skus: sortedSKUs(o), key: o.IdempotencyKey, order: o.ID, decide: func(l *inventory.Ledger, w *inventory.Write) error {
		if err := l.Reserve(o); err != nil {
			return err
		}
		// Postgres keeps microseconds, and UTC is every instance's zone: a
		// replay, on any instance, must read back what the first answer said.
		o.CreatedAt = now().UTC().Truncate(time.Microsecond)
		o.ExpiresAt = o.CreatedAt.Add(hold)
		w.Orders = append(w.Orders, o)
		return nil
	}}
}

// setOp sets a SKU's available units, creating it if needed, and stores the
// counters it decided in out, if the SKU meets expect (any SKU meets the
// empty one), checked on what the claim read under the lease. A missing SKU
// counts as 0 of each, so the claim creates its row only when that meets
// expect: otherwise the SKU stays missing and the check fails, with no
// empty row left behind.
func setOp(name string, available int64, expect inventory.StockExpectation, out *inventory.SKU) *op {
	create := expect.Check(inventory.SKU{}) == nil
	return &op{skus: []string{name}, create: create, anySKU: true, decide: func(l *inventory.Ledger, _ *inventory.Write) error {
		k, err := l.SetAvailableIf(name, available, expect)
		if err != nil {
			return err
		}
		*out = k
		return nil
	}}
}

// transitionOp moves a reserved order to `to` and settles its units. Many
// may share a batch, each a status change of its own in the write; a second
// change of the same order in one batch is refused (the write would move the
// order once and settle its units twice): the first one decides.
func transitionOp(o *inventory.Order, to inventory.Status, now func() time.Time) *op {
	return &op{skus: sortedSKUs(o), order: o.ID, decide: func(l *inventory.Ledger, w *inventory.Write) error {
		if slices.ContainsFunc(w.Transitions, func(t inventory.Transition) bool { return t.ID == o.ID }) {
			return fmt.Errorf("reservation: order %s moves earlier in its batch: %w", o.ID, inventory.ErrInvalidTransition)
		}
		// Checked again under the leases: a confirm that waited its lock
		// wait past the hold's end must not confirm what the reaper is
		// about to expire.
		if to == inventory.StatusConfirmed {
			if err := holdExpired(o, to, now()); err != nil {
				return err
			}
		}
		if err := l.Settle(o, to); err != nil {
			return err
		}
		w.Transitions = append(w.Transitions, inventory.Transition{ID: o.ID, From: inventory.StatusReserved, To: to})
		return nil
	}}
}

func sortedSKUs(o *inventory.Order) []string { return slices.Sorted(slices.Values(o.SKUs())) }

// States of a pending op. The section moves it queued → batched (taken into
// a batch under held leases) → decided; its own request may move it to
// dropped first: when its client leaves (queued or batched) or its lock wait
// runs out (queued only). Whoever moves it first decides who answers.
const (
	stateQueued int32 = iota
	stateBatched
	stateDecided
	stateDropped
)

// pending is one op waiting for its batch and its answer.
type pending struct {
	op       *op
	deadline time.Time
	// pause is the chaos stall asked by its request (WithPause, WithStall);
	// unwatched, that its leases must have no watchdog (WithPause).
	pause     time.Duration
	unwatched bool
	state     atomic.Int32
	answer    chan error // buffered: the section sends once and never waits
	// span is its request's span (a no-op one when tracing is off), linked
	// to the batch that decides it.
	span trace.Span
	// wait is the lock wait of the queue leader that waits for p's keys,
	// if one does, until p counts itself out of it (leave).
	wait atomic.Pointer[lockWait]
	// try is set for an op that takes its keys only in a gathered batch's
	// try: one held elsewhere answers it errKeyBusy at once instead of
	// sending it on to a later batch or a key's line. The reaper's expiries
	// are such: another instance's reaper working on the same orders is
	// what holds their keys, and a line to wait in would cost a lock round
	// and a write an order for status changes that are then refused.
	try bool
	// lookup is set while the section asks the store whether p's SKUs
	// exist (known.go): a lock wait that runs out then was spent waiting
	// on the database, and is answered as its fault, not the lock's.
	lookup atomic.Bool
	// tried is set once a lock call is made for p's keys (acquire): a lock
	// wait that runs out before then was not spent on the lock servers
	// (waitedOut).
	tried atomic.Bool
	// storing is the store calls in progress of the server p waits for:
	// the intake's gatherers or its queue's leader (waitedOut).
	storing atomic.Pointer[storeCalls]
	// rode is set once a gathered batch found one of p's keys held
	// elsewhere and p went on to the next gathered batch (gathered.next);
	// guarded by coalescer.mu.
	rode bool
}

// lockWait is a queue leader's wait for the keys of the orders it waits
// for. Once every one of them has left (client gone, lock wait over) the
// wait is cancelled: nobody would take what it got, and a client that sends
// orders and hangs up at once would otherwise keep a leader, and a queue,
// waiting in the key's line for the whole --lock-wait.
type lockWait struct {
	waiting atomic.Int32
	cancel  context.CancelCauseFunc
	// head is the order whose keys are want (queue.next: the queue's head;
	// the others' are among them). When it leaves and others still wait,
	// the wait is cancelled with errHeadLeft and its leader asks the queue
	// again: the next head may need fewer keys, and an order behind it
	// must not go on waiting for a key only the departed one needed.
	head *pending
}

// waitFor makes w the lock wait of waiting, counting out those that left
// already: one that dropped as w was made may have counted itself out of
// the wait before (leave), not w.
func (w *lockWait) waitFor(waiting []*pending) {
	w.waiting.Store(int32(len(waiting)))
	for _, p := range waiting {
		p.wait.Store(w)
	}
	for _, p := range waiting {
		if p.state.Load() == stateDropped {
			p.leave()
		}
	}
}

// leave counts p, dropped, out of its leader's lock wait, once per wait:
// whoever takes the wait from p (p's request or waitFor) counts it out.
func (p *pending) leave() {
	w := p.wait.Swap(nil)
	if w == nil {
		return
	}
	if w.waiting.Add(-1) == 0 {
		w.cancel(nil)
	} else if w.head == p {
		w.cancel(errHeadLeft)
	}
}

// errHeadLeft ends a lock wait whose head order left while others waited.
var errHeadLeft = errors.New("reservation: the order at the head of the line left")

// pending wraps o for the request whose context is ctx.
func (s *Service) pending(ctx context.Context, o *op) *pending {
	st := stallOf(ctx)
	return &pending{op: o, deadline: time.Now().Add(s.lockWait), pause: st.d, unwatched: st.d > 0 && !st.watched,
		answer: make(chan error, 1), span: trace.SpanFromContext(ctx)}
}

func (p *pending) move(from, to int32) bool { return p.state.CompareAndSwap(from, to) }

// alone runs p as a batch of one, on the request's own goroutine and
// context: through the same critical section as a coalesced batch.
func (s *Service) alone(ctx context.Context, p *pending) error {
	run, done, err := s.life.enter(ctx)
	if err != nil {
		return err
	}
	defer done()
	s.serve(run, &single{p: p}, nil)
	return s.life.cutShort(ctx, <-p.answer)
}

// single is the source of a batch of one: the leases p needs, then p.
type single struct{ p *pending }

func (o *single) next(h *hold) (batch []*pending, want []string, waiting []*pending) {
	switch {
	case o.p.state.Load() != stateQueued:
		return nil, nil, nil // run, or answered by a failed acquisition
	case h == nil:
		return nil, o.p.op.skus, []*pending{o.p}
	}
	o.p.move(stateQueued, stateBatched)
	return []*pending{o.p}, nil, nil
}

func (*single) keep(*hold) bool { return false }
func (*single) tries() bool     { return false }

func (*single) handsOver(*hold) bool { return false }

func (*single) storeCalls() *storeCalls { return nil }

// isHoldExpired reports whether err is holdExpired's refusal.
func isHoldExpired(err error) bool {
	te := (*inventory.TransitionError)(nil)
	return errors.As(err, &te) && te.From == inventory.StatusExpired
}

// holdExpired is the refusal of a confirm at or after the hold's end.
func holdExpired(o *inventory.Order, to inventory.Status, now time.Time) error {
	if now.Before(o.ExpiresAt) {
		return nil
	}
	return fmt.Errorf("%w: the hold expired at %s",
		&inventory.TransitionError{From: inventory.StatusExpired, To: to}, o.ExpiresAt.UTC().Format(time.RFC3339))
}
