package reservation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
	"go.opentelemetry.io/otel/trace"
)

// This file is the one critical section. Every stock change runs through
// serve: acquire the leases → claim the rows with their fences → decide
// each op on the ledger → (chaos pause) → one fenced write → release. A
// lone op (setting stock, a transition, an order with coalescing off) is a
// batch of one from a single source; coalesced orders come from a queue
// (coalesce.go), whose batches may share one acquisition and one claim.
//
// The store calls run on the section's context: the request's for a batch
// of one, a detached one for a queue's leader. Either way a write is not
// bound to the lease: the lease is checked just before the write, and a
// holder that stalls after that check (a GC pause, SIGSTOP) sends its write
// late whatever we do. Only the fence in the store stops such a write;
// pretending otherwise would hide the problem this service exists to
// demonstrate.

// source gathers the batches the section runs.
type source interface {
	// next returns the next batch, pendings covered by h's leases; or, when
	// there are none, the keys to lock (sorted) and the pendings waiting
	// for them; or nothing when the source is done.
	next(h *hold) (batch []*pending, want []string, waiting []*pending)
	// keep reports whether h should serve the next batch at once.
	keep(h *hold) bool
	// tries reports whether the section takes the keys of want in one try
	// (lock.Locker.AcquireBatch: the keys held elsewhere are left out of
	// the hold, not waited for) instead of waiting for every one of them.
	tries() bool
	// handsOver reports whether h, done with the source's batches, is kept
	// for the next source's acquisition, which lets it go in the same round
	// per lock server as it takes its own keys (lock.HandoverBatch), rather
	// than released now.
	handsOver(h *hold) bool
	// storeCalls is the section's store calls in progress for the
	// source, which the orders waiting for it read when their lock wait
	// runs out (waitedOut); nil for a batch of one, which has no other
	// order to wait behind.
	storeCalls() *storeCalls
}

// hold is the leases a section runs batches under, kept across batches
// while the source asks for it.
type hold struct {
	// ctx is the section's context with the hold's span (tracing.StartBatch):
	// the lock, claim and write spans of its batches are that span's children.
	ctx      context.Context
	span     trace.Span
	set      lock.Set
	acquired time.Time
	batches  int
	// unwatched is set when the leases were taken without a watchdog, for a
	// batch with a chaos pause in it: a paused process renews nothing.
	unwatched bool
	// ledger is nil until the first batch has claimed the rows.
	ledger *inventory.Ledger
	// broken is set when the ledger may no longer match the rows (a write
	// failed, so whether it landed is not known) or when a lease of set
	// was lost or its row taken by a newer lease: the leases are then let
	// go, neither kept for another batch nor handed over as a whole set.
	broken bool
	// spare is the leases a try obtained that no op of the batch needs
	// (their ops also need a key held elsewhere): not claimed, released
	// with set in the same round.
	spare lock.Set
	// handover is set when the hold outlives its source (handsOver).
	handover bool
	// storeCalls is the store calls in progress of the source whose batch
	// runs under h (source.storeCalls), nil for none; storeBegan is when
	// h's own began.
	storeCalls *storeCalls
	storeBegan int64
}

// inStore records a store call of h's batch beginning or ending in
// storeCalls: h makes one at a time.
func (h *hold) inStore(in bool) {
	switch {
	case h.storeCalls == nil:
	case in:
		h.storeBegan = h.storeCalls.enter()
	default:
		h.storeCalls.leave(h.storeBegan)
	}
}

// keepOnly moves the leases of h that no op of batch needs to h.spare, so
// the claim stamps only the rows the batch writes.
func (h *hold) keepOnly(batch []*pending) {
	need := make(map[string]bool, len(h.set))
	for _, p := range batch {
		for _, k := range p.op.skus {
			need[k] = true
		}
	}
	kept := h.set[:0:0]
	for _, l := range h.set {
		if need[l.Key()] {
			kept = append(kept, l)
		} else {
			h.spare = append(h.spare, l)
		}
	}
	h.set = kept
}

// overlaps reports whether h holds a lease on any of keys (sorted).
func (h *hold) overlaps(keys []string) bool {
	if h == nil {
		return false
	}
	for _, set := range []lock.Set{h.set, h.spare} {
		for _, l := range set {
			if _, found := slices.BinarySearch(keys, l.Key()); found {
				return true
			}
		}
	}
	return false
}

// covers reports whether h's leases cover p: all its SKUs, and, for a
// paused op, no watchdog.
func (h *hold) covers(p *pending) bool {
	if p.unwatched && !h.unwatched {
		return false
	}
	for _, k := range p.op.skus {
		if h.set.Lease(k) == nil {
			return false
		}
	}
	return true
}

// serve runs src's batches through the critical section until src is done.
// prev is a hold an earlier source handed over, let go of in the round of
// src's first acquisition; serve returns src's hold if it hands it over.
func (s *Service) serve(ctx context.Context, src source, prev *hold) *hold {
	h := prev
	for {
		batch, want, waiting := src.next(h)
		switch {
		case batch != nil:
			h = s.run(ctx, src, h, batch)
		case want != nil:
			h = s.acquire(ctx, want, waiting, src.tries(), h)
		case h != nil && h.handover:
			return h
		default:
			s.release(ctx, h)
			return nil
		}
	}
}

// acquire lets prev go and locks want for the pendings waiting on it, in
// sorted order, for as long as the last of them is willing to wait; with
// try, it takes in one round per lock server those of want that are free
// and leaves out the rest, and lets prev go in that same round. Those that
// name a SKU that does not exist are answered first, and nothing is locked
// for them (known.go). On failure it answers them (each one's own timer may
// have answered it first) and returns nil.
func (s *Service) acquire(ctx context.Context, want []string, waiting []*pending, try bool, prev *hold) *hold {
	ask := s.known.misses(want)
	if !try || prev.overlaps(want) || (prev != nil && len(ask) > 0) {
		// A key of both would be reported held by the handover and its
		// order sent to its queue, a cycle late; and a store lookup of
		// SKUs not seen yet (dropUnknown) is no reason to keep prev's
		// keys from other instances: let prev go first.
		s.release(ctx, prev)
		prev = nil
	}
	if want, waiting = s.dropUnknown(ctx, want, ask, waiting); len(waiting) == 0 {
		s.release(ctx, prev)
		return nil
	}
	deadline, paused := waiting[0].deadline, false
	var reqs []trace.SpanContext
	for _, p := range waiting {
		p.tried.Store(true)
		deadline = later(deadline, p.deadline)
		paused = paused || p.unwatched
		if s.tracer != nil {
			reqs = append(reqs, p.span.SpanContext())
		}
	}
	ctx, span := s.tracer.StartBatch(ctx, reqs, len(waiting))
	wctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	actx, cancel := context.WithDeadline(wctx, deadline)
	start := time.Now()
	var set lock.Set
	var err error
	if try {
		var b lock.Batch
		var released error
		gone := s.letGo(prev)
		b, released, err = lock.HandoverBatch(actx, s.locker, gone, want, s.leaseOptions(paused)...)
		if released != nil {
			s.log.Warn("release leases", "skus", leaseKeys(gone), "err", released)
		}
		set = b.Leases
	} else {
		(&lockWait{cancel: stop, head: waiting[0]}).waitFor(waiting)
		set, err = lock.AcquireAll(actx, s.locker, want, s.leaseOptions(paused)...)
	}
	cancel()
	s.obs.LockWait(time.Since(start))
	if err == nil {
		return &hold{ctx: ctx, span: span, set: set, acquired: time.Now(), unwatched: paused}
	}
	span.RecordError(err)
	span.End()
	if errors.Is(context.Cause(wctx), errHeadLeft) && ctx.Err() == nil {
		// The order whose keys were waited for left: those still waiting
		// are still queued, and the queue's next head says what to wait
		// for now, maybe fewer keys.
		return nil
	}
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = notAcquired(s.lockWait, err)
	}
	for _, p := range waiting {
		if p.move(stateQueued, stateDecided) {
			p.answer <- err
		}
	}
	return nil
}

// verdict is one op's answer, sent once the batch is settled.
type verdict struct {
	p   *pending
	err error
}

// run decides and writes one batch under h and answers its ops. It returns
// h when the source keeps the leases for its next batch, nil when they were
// released.
func (s *Service) run(ctx context.Context, src source, h *hold, batch []*pending) *hold {
	h.batches++
	ctx = h.ctx
	h.storeCalls = src.storeCalls()
	var decided []*pending
	for _, p := range batch {
		// An op whose client left before its decision is dropped here;
		// after it, the op stands or falls with the batch.
		if p.move(stateBatched, stateDecided) {
			decided = append(decided, p)
			if s.tracer != nil {
				// The request's trace shows the batch that placed it.
				p.span.AddLink(trace.Link{SpanContext: h.span.SpanContext()})
			}
		}
	}
	var verdicts []verdict
	if len(decided) > 0 {
		verdicts = s.decideAndWrite(ctx, h, decided)
	}
	// Let the leases go before answering unless they serve the next batch at
	// once or go with the next acquisition (more orders wait for it), so an
	// instance that has answered every op holds nothing and a drained server
	// leaves no lock behind.
	switch {
	case src.keep(h):
	case src.handsOver(h):
		h.handover = true
	default:
		s.release(ctx, h)
		h = nil
	}
	for _, v := range verdicts {
		v.p.answer <- v.err
	}
	return h
}

// decideAndWrite claims (only under a fresh acquisition), decides each op in
// arrival order on the ledger, checks the leases, stalls if an op asked for
// a chaos pause, and writes every change in one fenced transaction. A
// failure of the claim, the loss of every lease, or a write failure that
// belongs to no op in particular (a stale fence, a database that does not
// answer), is every op's answer, those the ledger refused included: they
// were judged against a batch that did not happen. A write refused for some
// of its ops (blame), or some of whose leases were lost (lostUnder), answers
// those alone, and the rest are decided and written again, under fences
// that still stand since nothing landed: one op's failure never fails its
// neighbours with its own answer, even once the rewrites run out
// (errRewrites).
func (s *Service) decideAndWrite(ctx context.Context, h *hold, decided []*pending) []verdict {
	var done []verdict
	fail := func(err error, groups ...[]*pending) []verdict {
		h.broken = true
		for _, g := range groups {
			for _, p := range g {
				done = append(done, verdict{p, err})
			}
		}
		return done
	}
	if err := s.claim(ctx, h, decided); err != nil {
		return fail(s.failed(h.set, err), decided)
	}
	stalled := false
	// groups are the ops still to write, in arrival order, one write each.
	groups := [][]*pending{decided}
	for rewrites := 0; len(groups) > 0; {
		verdicts, err := s.write(ctx, h, groups[0], &stalled)
		if err == nil {
			done = append(done, verdicts...)
			groups = groups[1:]
			continue
		}
		blamed, rest, ok := blame(err, groups[0])
		if !ok {
			return fail(err, groups...)
		}
		if errors.Is(err, inventory.ErrStaleFence) {
			h.broken = true // a newer lease has some of its rows: no more batches under it
		}
		for _, p := range blamed {
			done = append(done, verdict{p, ownPart(err, p)})
		}
		groups = append(rest, groups[1:]...)
		if rewrites == maxRewrites && len(groups) > 0 {
			// err is the blamed ops' answer, not theirs.
			return fail(errRewrites, groups...)
		}
		rewrites++
	}
	return done
}

// ownPart is the part of err that is p's own answer — the stale or lost
// row it names, the refusal of its order — or err.
func ownPart(err error, p *pending) error {
	for _, ke := range refusals(err, rowLost) {
		if slices.Contains(p.op.skus, ke.SKU) {
			return ke
		}
	}
	for _, oe := range refusals[*inventory.OrderError](err, nil) {
		if oe.ID == p.op.order {
			return oe
		}
	}
	return err
}

// rowLost reports whether ke is the loss of one row to the batch: a newer
// lease has claimed it, or the batch's lease on it was lost.
func rowLost(ke *inventory.SKUError) bool {
	return errors.Is(ke, inventory.ErrStaleFence) || errors.Is(ke, lock.ErrLeaseLost)
}

// maxRewrites bounds the writes a batch makes again after a write was
// refused for some of its ops; past it, the ops not yet written fail with
// errRewrites. Halving finds one culprit the store cannot name among
// MaxBatch (256) ops in 2·log2(256) = 16 writes.
const maxRewrites = 16

// errRewrites answers the ops a batch has not written when it runs out of
// rewrites, but those the last refusal names: it is theirs, and given to
// the others it would name a SKU they do not have (a lost lease's
// lock_unavailable, a stale_fence) or call their request invalid. An
// unnamed refusal being halved may belong to one of them, which a retry
// then finds. Nothing was written for them, and a retry in a batch with
// fewer refusals would likely be placed: a bound was reached, so
// inventory.ErrOverloaded (503 overloaded, Retry-After), which names no
// SKU and, unlike lock_unavailable or store_unavailable, sends no one to
// lock servers or a database that did nothing wrong.
var errRewrites = fmt.Errorf("reservation: the batch gave up after %d writes refused for other orders; nothing was written for this one: %w",
	maxRewrites, inventory.ErrOverloaded)

// blame splits a refused write's ops g into those the refusal belongs to
// and the groups to write again; ok is false when the refusal is the whole
// write's. A store names the ops it can: the orders whose idempotency keys
// other orders took (*inventory.KeyTakenError), the orders it refused
// (*inventory.OrderError, one or several joined: a value it would not take,
// a status change of an order that moved first), the rows a newer lease has claimed
// (*inventory.SKUError, stale: the ops naming them); so does lostUnder the
// rows whose leases were lost (*inventory.SKUError, lost). A value it
// refused as invalid without saying whose (invalid text) belongs to some
// op: g is halved until the op is alone. The loss of every lease, a stale
// fence it cannot name or an unreachable database belong to every op, and
// so does a write that may have landed (inventory.ErrOutcomeUnknown):
// writing any of it again could place an order twice.
func blame(err error, g []*pending) (blamed []*pending, rest [][]*pending, ok bool) {
	lost := refusals(err, rowLost)
	if errors.Is(err, inventory.ErrOutcomeUnknown) || lost == nil && errors.Is(err, lock.ErrLeaseLost) {
		return nil, nil, false
	}
	var taken *inventory.KeyTakenError
	var named func(p *pending) bool
	switch {
	case errors.As(err, &taken):
		named = func(p *pending) bool { return p.op.key != "" && slices.Contains(taken.Keys, p.op.key) }
	case refusals[*inventory.OrderError](err, nil) != nil:
		refused := refusals[*inventory.OrderError](err, nil)
		named = func(p *pending) bool {
			return slices.ContainsFunc(refused, func(oe *inventory.OrderError) bool { return oe.ID == p.op.order })
		}
	case lost != nil:
		named = func(p *pending) bool {
			return slices.ContainsFunc(lost, func(ke *inventory.SKUError) bool { return slices.Contains(p.op.skus, ke.SKU) })
		}
	case errors.Is(err, inventory.ErrInvalid) && len(g) == 1:
		return g, nil, true
	case errors.Is(err, inventory.ErrInvalid):
		return nil, [][]*pending{g[:len(g)/2], g[len(g)/2:]}, true
	default:
		return nil, nil, false
	}
	var others []*pending
	for _, p := range g {
		if named(p) {
			blamed = append(blamed, p)
		} else {
			others = append(others, p)
		}
	}
	if len(blamed) == 0 {
		return nil, nil, false // it names none of these: not theirs to answer
	}
	if len(others) > 0 {
		rest = [][]*pending{others}
	}
	return blamed, rest, true
}

// write decides decided on a copy of h's ledger and writes what they
// changed; the copy becomes h's ledger once written. The first time it gets
// that far it stalls for the batch's chaos pause, if any (stalled). An error
// is the whole batch's, unless blame names the ops it belongs to.
func (s *Service) write(ctx context.Context, h *hold, decided []*pending, stalled *bool) ([]verdict, error) {
	work := h.ledger.Clone()
	verdicts := make([]verdict, len(decided))
	var w inventory.Write
	var pause time.Duration
	for i, p := range decided {
		verdicts[i] = verdict{p, p.op.decide(work, &w)}
		pause = max(pause, p.pause)
	}
	if err := lostUnder(h, decided); err != nil {
		// Checked as late as possible; a loss after it is the fence's job.
		// Before the ledger's refusals stand too: an op refused on a row
		// whose lease was lost was judged without the lease.
		s.obs.LeaseLost()
		return nil, err
	}
	skus, fences := work.Changes()
	if len(skus) == 0 && len(w.Orders) == 0 && len(w.Transitions) == 0 {
		return verdicts, nil // nothing to write: the ledger refused every op
	}
	w.SKUs = skus
	if pause > 0 && !*stalled {
		*stalled = true
		// loadtest's chaos scenarios count this line: keep its words.
		s.log.Warn("chaos: pausing inside the critical section", "pause", pause, "skus", leaseKeys(h.set))
		if err := sleep(ctx, pause); err != nil {
			return nil, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, storeTimeout)
	began := time.Now()
	h.inStore(true)
	err := s.store.Write(wctx, fences, w)
	h.inStore(false)
	s.storeCall(StoreWrite, began)
	cancel()
	if err != nil {
		return nil, s.failed(h.set, err)
	}
	work.Written()
	h.ledger = work
	if bo, ok := s.obs.(BatchObserver); ok && len(w.Orders) > 0 {
		bo.Batch(len(w.Orders))
	}
	return verdicts, nil
}

// lostUnder returns the loss of leases of h that ops g were decided under:
// nil while every lease of h holds (checked without allocating), h.set's
// error when every one is lost (the whole batch's failure), else a
// *inventory.SKUError for each lost lease whose SKU an op of g names,
// joined, which fails only the ops naming it (blame) — whether the ledger
// changed its row or refused the op on it. An op of g naming no lost SKU
// is written under its own leases and fences, which still stand; a lost
// lease no op of g names is no error (blame would name none, and fail the
// whole write). A loss in h leaves it broken.
func lostUnder(h *hold, g []*pending) error {
	if h.set.Err() == nil {
		return nil
	}
	h.broken = true
	if allEnded(h.set) {
		return h.set.Err()
	}
	var errs []error
	for _, l := range h.set {
		err, key := l.Err(), l.Key()
		if err != nil && slices.ContainsFunc(g, func(p *pending) bool { return slices.Contains(p.op.skus, key) }) {
			errs = append(errs, &inventory.SKUError{SKU: key, Err: err})
		}
	}
	return errors.Join(errs...)
}

// claim stamps h's fences on the rows the first time a batch runs under h,
// and fills its ledger. A SKU whose row a newer lease has claimed, and,
// unless the batch creates rows, a SKU that does not exist, is set aside,
// so only the ops that name it fail (stale_fence, unknown_sku): a gathered
// batch's orders of other SKUs are placed. The claim is retried for the
// rest (their rows are claimed already; claiming again under the same fence
// matches). A stale row leaves h broken: its other leases serve no more
// batches. So does a lease that has ended before a claim is sent: its row
// is set aside with the loss, not stamped with the fence of a lease no
// longer held. A loss during the claim stops it only once every lease has
// ended (lock.Set.ContextAll): one lost lease of a gathered batch is its
// own orders' failure (lostUnder), not a reason to stop claiming the rows
// of the others.
func (s *Service) claim(ctx context.Context, h *hold, decided []*pending) error {
	if h.ledger != nil {
		return nil
	}
	create := slices.ContainsFunc(decided, func(p *pending) bool { return p.op.create })
	fences := make([]inventory.Fence, len(h.set))
	byKey := make(map[string]inventory.Fence, len(h.set))
	for i, l := range h.set {
		fences[i] = inventory.Fence{SKU: l.Key(), Token: uint64(l.Token()), Holder: l.ID()}
		byKey[l.Key()] = fences[i]
	}
	lctx, stop := h.set.ContextAll(ctx)
	defer stop()
	refused := make(map[string]error)
	for len(fences) > 0 {
		if fences = setAsideEnded(h, fences, refused); len(fences) == 0 {
			break
		}
		cctx, cancel := context.WithTimeout(lctx, storeTimeout)
		began := time.Now()
		h.inStore(true)
		skus, err := s.store.Claim(cctx, fences, create)
		h.inStore(false)
		s.storeCall(StoreClaim, began)
		cancel()
		if aside := s.setAside(err, create, h); len(aside) > 0 {
			for _, ke := range aside {
				refused[ke.SKU] = ke
			}
			fences = slices.DeleteFunc(fences, func(f inventory.Fence) bool { _, ok := refused[f.SKU]; return ok })
			continue
		}
		if err != nil {
			return err
		}
		for name := range skus {
			s.known.add(name)
		}
		h.ledger = inventory.NewLedger(skus, byKey, refused)
		return nil
	}
	h.ledger = inventory.NewLedger(map[string]inventory.SKU{}, byKey, refused)
	return nil
}

// setAsideEnded moves the fences of h's leases that have ended out of
// fences into refused, each refused with its lease's loss, and leaves h
// broken if there were any. The ops naming one are then answered with the
// loss (lock_unavailable), as those naming a set-aside row are with its
// refusal, not judged on the row nor their write fenced with a lease no
// longer held. It returns what is left of fences.
func setAsideEnded(h *hold, fences []inventory.Fence, refused map[string]error) []inventory.Fence {
	if h.set.Err() == nil {
		return fences
	}
	h.broken = true
	return slices.DeleteFunc(fences, func(f inventory.Fence) bool {
		err := h.set.Lease(f.SKU).Err()
		if err != nil {
			refused[f.SKU] = &inventory.SKUError{SKU: f.SKU, Err: err}
		}
		return err != nil
	})
}

// setAside returns the per-SKU refusals of a claim's err that answer only
// the ops naming their SKU, or nil when any part of err is the whole
// batch's (a database that does not answer, a row a creating batch could
// not make).
func (s *Service) setAside(err error, create bool, h *hold) []*inventory.SKUError {
	aside := refusals(err, func(ke *inventory.SKUError) bool {
		return errors.Is(ke, inventory.ErrStaleFence) || errors.Is(ke, inventory.ErrUnknownSKU) && !create
	})
	for _, ke := range aside {
		if errors.Is(ke, inventory.ErrStaleFence) {
			s.obs.StaleFence()
			s.log.Warn("stale fence: claim rejected", "err", ke)
			h.broken = true
		}
	}
	return aside
}

// refusals returns the errors of type E that err is made of (one, or
// several joined), when every part is one that only (if set) accepts; nil
// when err is nil or any part of it is something else. A store names so
// the rows (*inventory.SKUError) and the orders (*inventory.OrderError)
// that refused a claim or a write, each the answer of the ops naming it.
func refusals[E error](err error, only func(E) bool) []E {
	if err == nil {
		return nil
	}
	parts := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts = j.Unwrap()
	}
	out := make([]E, 0, len(parts))
	for _, part := range parts {
		var e E
		if !errors.As(part, &e) || only != nil && !only(e) {
			return nil
		}
		out = append(out, e)
	}
	return out
}

func (s *Service) release(ctx context.Context, h *hold) {
	if h == nil {
		return
	}
	ctx = h.ctx
	set := s.letGo(h)
	if len(set) == 0 {
		return
	}
	rctx, cancel := detached(ctx)
	defer cancel()
	if err := set.Release(rctx); err != nil {
		s.log.Warn("release leases", "skus", leaseKeys(set), "err", err)
	}
}

// letGo ends h and returns its leases, spare ones included, to release.
func (s *Service) letGo(h *hold) lock.Set {
	if h == nil {
		return nil
	}
	h.span.End()
	// A try that obtained none of its keys held nothing.
	if s.section != nil && len(h.set)+len(h.spare) > 0 {
		s.section.LockHeld(time.Since(h.acquired))
	}
	if len(h.spare) > 0 {
		return append(slices.Clip(h.set), h.spare...)
	}
	return h.set
}

// storeCall tells a SectionObserver how long a store call begun at began
// took.
func (s *Service) storeCall(call string, began time.Time) {
	if s.section != nil {
		s.section.StoreCall(call, time.Since(began))
	}
}

// storeTimeout bounds each store call of the section: a queue's leader has
// no client context to govern them, and one hung connection must not hold a
// queue (and its leases) forever. Only a broken database trips it. The
// postgres store's statement timeout (8 s) is below it, so that a statement
// stuck in the database is ended by the server, which then says nothing was
// written, before this bound gives up on it.
const storeTimeout = 10 * time.Second

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

// failed classifies a store error raised under the leases. Under some lost
// leases but not all it is the store's: the rewrite that follows a refusal
// (blame) fails the ops of the lost leases alone (lostUnder), and a failure
// of the whole write is the store's to explain.
func (s *Service) failed(set lock.Set, err error) error {
	if errors.Is(err, inventory.ErrStaleFence) {
		s.obs.StaleFence()
		s.log.Warn("stale fence: write rejected", "err", err)
		return err
	}
	if lerr := set.Err(); lerr != nil && errors.Is(lerr, lock.ErrLeaseLost) && allEnded(set) {
		s.obs.LeaseLost()
		// The store's error is kept as text only: under a lost lease it is
		// not what the ops failed of (a replay's taken key would otherwise
		// make every op of the batch read as idempotency_key_in_flight).
		// A write that may have landed anyway answers as the store's
		// error, not lock_unavailable, which tells a client nothing was
		// written (and lets it repeat an absolute stock level).
		if errors.Is(err, inventory.ErrOutcomeUnknown) {
			return fmt.Errorf("%w (lease: %v)", err, lerr)
		}
		return fmt.Errorf("%w (store: %v)", lerr, err)
	}
	return err
}

// detached gives clean-up work a context that outlives a cancelled request:
// a release that never reaches the backend blocks the key for a whole TTL.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
}

// allEnded reports whether no lease of set holds any more.
func allEnded(set lock.Set) bool {
	for _, l := range set {
		if l.Err() == nil {
			return false
		}
	}
	return true
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func leaseKeys(set lock.Set) []string {
	keys := make([]string, len(set))
	for i, l := range set {
		keys[i] = l.Key()
	}
	return keys
}
