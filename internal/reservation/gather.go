package reservation

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
)

// Orders spread over many SKUs are the ordinary workload, and a queue per
// SKU serves them badly: each order pays its own lock rounds, claim and
// write. So an order whose SKU has no queue goes to the instance's intake
// instead, and a gatherer takes whatever the intake holds — orders of any
// SKUs — as one batch: it takes the free keys of all of them in one try
// (one round per lock server per phase, lock.Locker.AcquireBatch), places
// the orders whose keys it all obtained with one claim and one write, and
// releases everything in one round: on a backend that folds a release into
// its next try (lock.Handover: zookeeper's multi), the next batch's try,
// while orders wait for it (handsOver). An order with a key held elsewhere rides
// along once in the next gathered batch when its batch placed others
// (missed); held again, or in a batch that got nothing, it moves to
// the queue of its lowest SKU, whose leader waits in that key's line (woken
// by the backend, not polling) holding nothing else, exactly as a hot SKU's
// orders do. A gatherer never waits for a key while it holds one, so
// gatherers of different instances cannot deadlock.
//
// An idle instance's first order starts a gatherer at once, and a busy
// instance gathers for as long as its gatherers are busy with the batches
// before (group commit's natural batching), and then for the window
// (Coalescing.Window) from the start of the batch before, or until as many
// orders wait as that batch had: batches grow with the load, and a busy
// instance spends its rounds and commits on fuller ones without idling.

// maxGatherLines is the most SKUs an order may have and still be gathered.
// A bigger order is a batch by itself (it gains nothing from company) and
// would hold the instance's gatherer, and every small order behind it, for
// its own many keys: it goes to its lowest SKU's queue instead.
const maxGatherLines = 8

// maxGatherSKUs caps the keys one gathered batch tries: each is per-key
// work on every lock server and a row in the claim.
const maxGatherSKUs = 400

// gather queues p in the intake and starts a gatherer if fewer than the
// configured number run; or refuses it (inventory.ErrOverloaded) when the
// intake is full. c.mu is held.
func (c *coalescer) gather(ctx context.Context, p *pending) error {
	c.intake = pruneHead(c.intake)
	if len(c.intake) >= c.cfg.MaxQueued {
		return fmt.Errorf("reservation: %d orders gathering: %w", len(c.intake), inventory.ErrOverloaded)
	}
	c.intake = append(c.intake, p)
	p.storing.Store(&c.storing)
	c.wakeFilled()
	if c.gatherers >= c.cfg.Gatherers {
		return nil
	}
	lctx, done, err := c.s.life.enter(context.WithoutCancel(ctx))
	if err != nil {
		c.intake = c.intake[:len(c.intake)-1]
		return err
	}
	c.gatherers++
	go func() {
		defer done()
		// prev is the last batch's leases while more orders wait: the next
		// batch's try lets them go in its own round (handsOver).
		var prev *hold
		var behind bool // the last batch answered with orders waiting
		var started time.Time
		var last int // the orders the last batch gathered
		for {
			if prev == nil && behind {
				c.await(lctx, started, last)
			}
			started = time.Now()
			g := c.takeIntake()
			if g == nil {
				c.s.release(lctx, prev)
				return
			}
			last = len(g.orders)
			prev = c.s.serve(lctx, g, prev)
			behind = g.behind
		}
	}()
	return nil
}

// await waits out the window from started, the start of the gatherer's
// last batch, whose answers went out with orders waiting behind it; while
// orders still wait (an empty intake ends the gatherer at once instead),
// until the intake holds as many orders as that batch gathered (last: the
// next is as full as the window would make it, so waiting longer would
// only idle the instance — a closed loop of clients is back by then), or
// until lctx ends. Orders that arrive only after the answers (a client
// sending its next order when the last is answered) are not a busy
// instance: the gatherer takes them at once.
func (c *coalescer) await(lctx context.Context, started time.Time, last int) {
	if c.cfg.Window <= 0 {
		return
	}
	d := c.cfg.Window - time.Since(started)
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.intake = pruneHead(c.intake)
	if len(c.intake) == 0 || len(c.intake) >= last {
		c.mu.Unlock()
		return
	}
	f := filler{n: last, ch: make(chan struct{})}
	c.filled = append(c.filled, f)
	c.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-f.ch:
	case <-lctx.Done():
	}
	c.mu.Lock()
	c.filled = slices.DeleteFunc(c.filled, func(o filler) bool { return o.ch == f.ch })
	c.mu.Unlock()
}

// wakeFilled wakes the gatherers in await whose batch the intake now
// fills. c.mu is held.
func (c *coalescer) wakeFilled() {
	c.filled = slices.DeleteFunc(c.filled, func(f filler) bool {
		if len(c.intake) < f.n {
			return false
		}
		close(f.ch)
		return true
	})
}

// takeIntake returns the next gathered batch: the queued orders at the
// head of the intake, up to MaxBatch and maxGatherSKUs keys; or nil, the
// gatherer then ending, when the intake is empty.
func (c *coalescer) takeIntake() *gathered {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.intake = pruneHead(c.intake)
	if len(c.intake) == 0 {
		c.gatherers--
		return nil
	}
	g := &gathered{c: c}
	n := 0
	for ; n < len(c.intake) && len(g.orders) < c.cfg.MaxBatch; n++ {
		p := c.intake[n]
		if p.state.Load() != stateQueued {
			continue
		}
		union := mergeSorted(g.want, p.op.skus)
		if len(g.orders) > 0 && len(union) > maxGatherSKUs {
			break
		}
		g.want, g.orders = union, append(g.orders, p)
	}
	clear(c.intake[:n])
	c.intake = c.intake[n:]
	return g
}

// gathered is the source of one gathered batch: the keys of all its orders
// in one try, then the orders whose keys were all obtained; the others go
// to their queues.
type gathered struct {
	c      *coalescer
	want   []string
	orders []*pending
	// tried is set once the section has tried want.
	tried bool
	// behind is set when orders waited in the intake as the batch was about
	// to answer: they arrived while it ran (handsOver).
	behind bool
}

func (g *gathered) next(h *hold) (batch []*pending, want []string, waiting []*pending) {
	if !g.tried {
		g.tried = true
		return nil, g.want, g.orders
	}
	if h == nil || h.batches > 0 {
		return nil, nil, nil // the try failed and answered them, or the batch ran
	}
	// A set, not hold.covers: a batch may have hundreds of orders and keys,
	// and this runs with the leases held. Gathered orders have no chaos
	// pause (enqueue), so the keys are all that decide.
	got := make(map[string]bool, len(h.set))
	for _, l := range h.set {
		got[l.Key()] = true
	}
	var missed []*pending
	for _, p := range g.orders {
		if p.state.Load() != stateQueued {
			continue // answered by the unknown-SKU check, or gone
		}
		if !allIn(p.op.skus, got) {
			missed = append(missed, p)
			continue
		}
		if p.move(stateQueued, stateBatched) {
			batch = append(batch, p)
		}
	}
	g.c.missed(missed, len(batch) > 0)
	h.keepOnly(batch)
	if len(batch) == 0 {
		return nil, nil, nil
	}
	return batch, nil, nil
}

func (*gathered) keep(*hold) bool { return false }
func (*gathered) tries() bool     { return true }

func (g *gathered) storeCalls() *storeCalls { return &g.c.storing }

// handsOver keeps the leases for the next gathered batch while orders wait
// in the intake, where the backend lets them go in the round of its try
// (lock.Handover: one multi on zookeeper, not two). Elsewhere the handover
// would only hold the keys a little longer for the same rounds. With no order waiting they go at
// once, so an idle instance holds nothing; so do those of a hold with a
// lease lost or broken (a write whose outcome is unknown), released now
// rather than carried into the next try as if still whole. Whether orders
// wait is also what opens the window before the next batch (behind,
// await).
func (g *gathered) handsOver(h *hold) bool {
	g.c.mu.Lock()
	g.behind = len(g.c.intake) > 0
	hand := g.c.handover && g.behind
	g.c.mu.Unlock()
	return hand && !h.broken && h.set.Err() == nil
}

// missed places the orders, in arrival order, that a gathered batch could
// not place because one of their keys was held elsewhere; placed says the
// batch placed others. Another instance's batch holds a key for one batch,
// a few milliseconds, and this gatherer's next batch is due at once: so an
// order held the first time, in a batch that placed others (its keys are a
// few among many), goes back to the head of the intake, where the next try
// carries its keys at the cost of one key each in a round that runs anyway.
// An order held again, or in a batch that obtained nothing (a hot SKU,
// whose holder keeps it for several batches: a second try would be a round
// for that key alone), or whose lowest SKU has a queue by now, goes to that
// SKU's queue, whose leader waits in the key's line (woken, not polling).
// An op that only tries (pending.try, the reaper's) is answered errKeyBusy.
// Sending every missed order to the line at once was a round and a
// transaction of its own for each: a fifth of all lock rounds went to
// batches of one order that had lost a single race (redlock, 1,000 SKUs,
// 3 instances).
func (c *coalescer) missed(ps []*pending, placed bool) {
	if len(ps) == 0 {
		return
	}
	type refusal struct {
		p   *pending
		err error
	}
	var again []*pending
	var refused []refusal
	c.mu.Lock()
	for _, p := range ps {
		if p.try {
			refused = append(refused, refusal{p, errKeyBusy})
			continue
		}
		if _, running := c.queues[p.op.skus[0]]; placed && !running && !p.rode {
			p.rode = true
			again = append(again, p)
			continue
		}
		if err := c.enqueueLocked(context.Background(), p); err != nil {
			refused = append(refused, refusal{p, err})
		}
	}
	if len(again) > 0 {
		// The gatherer serving this batch takes them next (its loop calls
		// takeIntake after serve): the intake needs no gatherer of its own.
		c.intake = append(again, pruneHead(c.intake)...)
	}
	c.mu.Unlock()
	for _, r := range refused {
		if r.p.move(stateQueued, stateDecided) {
			r.p.answer <- r.err
		}
	}
}

// errKeyBusy answers an op that takes its keys only in a try (pending.try)
// when one of them was held elsewhere: nothing was written.
var errKeyBusy = fmt.Errorf("reservation: a key is held elsewhere: %w", lock.ErrNotAcquired)

func allIn(keys []string, set map[string]bool) bool {
	for _, k := range keys {
		if !set[k] {
			return false
		}
	}
	return true
}
