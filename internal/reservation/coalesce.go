package reservation

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
)

// Coalescing tunes how concurrent orders inside one instance share leases
// and transactions. Orders queue per SKU (a multi-line order on its lowest
// SKU); one goroutine per busy queue, the batch leader, runs the queue
// through the critical section (section.go): it takes the leases for the
// orders waiting, claims the rows once, decides each order in arrival order
// against the claimed counters, and writes them all in one fenced
// transaction. On a hot SKU this turns one lock hand-off, one claim and one
// write per order into one of each per batch: the lock hand-off, not
// Postgres, is what limits a hot SKU.
//
// The zero value is on, with the defaults below.
type Coalescing struct {
	// Disabled places every order on its own, a batch of one: one
	// acquisition, one claim and one write per order (--coalesce=off), to
	// compare.
	Disabled bool
	// MaxBatch caps the orders decided and written together. Default 256.
	MaxBatch int
	// MaxBatches caps the batches run back to back under one acquisition,
	// without a new claim, before the leases are released so that other
	// instances, queued in the lock backend, get their turn. Default 4.
	MaxBatches int
	// MaxHold caps how long leases are kept for further batches. Default 50ms.
	MaxHold time.Duration
	// MaxQueued caps the orders waiting in one SKU's queue; an order beyond
	// it is refused at once with inventory.ErrOverloaded (503 overloaded,
	// Retry-After). Default 1024: four full batches of the default size.
	MaxQueued int
	// MaxQueues caps the queues, so the batch leaders (one goroutine each,
	// each waiting for locks or the store); an order that would start one
	// more is refused with inventory.ErrOverloaded. Default 4096.
	MaxQueues int
	// Gatherers is how many gathered batches (orders of any SKUs, gather.go)
	// an instance runs at once. Default 1: on the 2-core reference machine a
	// second one made batches half as big and cost more CPU per order than
	// the overlap it bought (1,018 vs 880 orders/s, 1,000 SKUs, redlock).
	// The intake they take from holds at most MaxQueued orders.
	Gatherers int
	// Window is the shortest time from the start of one gathered batch to
	// the start of the next of the same gatherer while orders wait: a batch
	// due sooner waits for the rest of it, or until the intake holds as
	// many orders as the batch before had (it is then as full as the window
	// would make it, and waiting on would only idle the instance), and the
	// orders that arrive meanwhile ride in it. Most of a batch's cost — a
	// round per lock server, two commits — does not grow with its orders,
	// so fewer, fuller batches leave more CPU for the orders. An idle
	// instance never waits: a lone order starts a gatherer at once, and a
	// gatherer whose intake is empty ends. Nor does a gatherer holding the
	// last batch's leases for the next try (lock.Handover): it would hold
	// them longer. Zero (the default) is no window; serve sets one for
	// redlock, redis and postgres (--coalesce-window=auto).
	Window time.Duration
}

// Coalescing defaults.
const (
	DefaultMaxBatch   = 256
	DefaultMaxBatches = 4
	DefaultMaxHold    = 50 * time.Millisecond
	DefaultMaxQueued  = 1024
	DefaultMaxQueues  = 4096
	DefaultGatherers  = 1
	// MaxWindow bounds Window: a longer one is latency a busy instance
	// adds to every order.
	MaxWindow = 100 * time.Millisecond
)

func (c Coalescing) withDefaults() Coalescing {
	if c.MaxBatch <= 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxBatches <= 0 {
		c.MaxBatches = DefaultMaxBatches
	}
	if c.MaxHold <= 0 {
		c.MaxHold = DefaultMaxHold
	}
	if c.MaxQueued <= 0 {
		c.MaxQueued = DefaultMaxQueued
	}
	if c.MaxQueues <= 0 {
		c.MaxQueues = DefaultMaxQueues
	}
	if c.Gatherers <= 0 {
		c.Gatherers = DefaultGatherers
	}
	return c
}

// coalescer holds the intake and the per-SKU queues of one Service.
type coalescer struct {
	s   *Service
	cfg Coalescing

	mu sync.Mutex
	// queues has an entry exactly while a batch leader serves it.
	queues map[string]*queue
	// emptied is when each key's queue last emptied, for keys whose queue
	// emptied within lineLinger (see lingers).
	emptied map[string]time.Time
	// intake is the orders waiting for a gatherer, in arrival order.
	intake []*pending
	// gatherers counts the gatherers running.
	gatherers int
	// handover: the locker lets a batch's leases go in its next try's
	// round (lock.Handover), so a gatherer hands them over (handsOver).
	handover bool
	// filled are the gatherers waiting out a window, each woken once the
	// intake holds as many orders as its last batch (await).
	filled []filler
	// storing is the gatherers' store calls in progress, for the orders
	// waiting in the intake (pending.storing).
	storing storeCalls
}

// filler is a gatherer in await: ch is closed once the intake holds n.
type filler struct {
	n  int
	ch chan struct{}
}

// queue is the orders waiting for one SKU, in arrival order; guarded by
// coalescer.mu. It is the source a leader serves.
type queue struct {
	c     *coalescer
	key   string
	items []*pending
	// batched counts the orders its leader has taken into batches.
	batched int
	// storing is its leader's store call in progress, for the orders
	// waiting in it (pending.storing).
	storing storeCalls
}

// place queues p and waits for its batch's answer.
func (c *coalescer) place(ctx context.Context, p *pending) error {
	if err := c.enqueue(ctx, p); err != nil {
		return err
	}
	wait := time.NewTimer(c.s.lockWait)
	defer wait.Stop()
	for {
		select {
		case err := <-p.answer:
			return c.s.life.cutShort(ctx, err)
		case <-ctx.Done():
			if p.move(stateQueued, stateDropped) || p.move(stateBatched, stateDropped) {
				p.leave()
				return fmt.Errorf("reservation: order left its queue undecided: %w", ctx.Err())
			}
			return decidedLate(ctx, p)
		case <-wait.C:
			if p.move(stateQueued, stateDropped) {
				p.leave()
				return waitedOut(p, c.s.lockWait)
			}
			// Its batch holds the leases: it answers, or the request's
			// deadline does (decidedLate).
		}
	}
}

// decidedGrace is how long an order already decided into its batch still
// waits for the batch's answer once its request has ended: long enough
// for a batch's write (milliseconds) about to answer, short enough that
// Place's read-back of an unknown outcome (detached, 3 s) still answers
// before the server's write deadline, 5 s after the request's.
const decidedGrace = 200 * time.Millisecond

// decidedLate is the answer of p, decided into its batch, when its
// request ends first. The batch may be inside a claim and a write (and
// rewrites), each bounded only by the store's timeouts, which can outlast
// the server's write deadline: the connection would close with no answer.
// So after decidedGrace p is answered that its outcome is unknown (the
// batch may still write it; a keyed retry replays it), and the batch's
// answer, sent later, lands unread in p's buffered channel.
func decidedLate(ctx context.Context, p *pending) error {
	grace := time.NewTimer(decidedGrace)
	defer grace.Stop()
	select {
	case err := <-p.answer:
		return err
	case <-grace.C:
		return fmt.Errorf("reservation: the order's batch had not answered when its request ended: %w (%w)",
			inventory.ErrOutcomeUnknown, ctx.Err())
	}
}

// waitedOut is the answer of p, still queued when its lock wait of wait
// ran out; nothing was written for it. A wait spent whole behind one store
// call of its server (a claim or a write for the batch ahead, bounded only
// by the store's timeouts: a call in progress that began before p started
// waiting) is the database's, as a slow lookup of its SKUs is
// (slowLookup), and no lock was tried for p. Any other is the lock's
// (lock_unavailable): a wait in line behind batches that each took their
// turn at the lock and the database cannot be told apart from a lock wait
// by a look at its end (blaming whichever call runs then gave a healthy
// database most waits under load).
func waitedOut(p *pending, wait time.Duration) error {
	if p.lookup.Load() {
		return slowLookup(wait)
	}
	if sc := p.storing.Load(); sc != nil && !p.tried.Load() && sc.behind(p.deadline.Add(-wait)) {
		return fmt.Errorf("reservation: waited the whole lock wait (%s) behind a store call of another batch, no lock tried for it: %w",
			wait, inventory.ErrStoreUnavailable)
	}
	return notAcquired(wait, context.DeadlineExceeded)
}

// storeCalls are a source's store calls in progress, by the time each
// began (unix nanoseconds): one a gatherer or a queue's leader, so a few.
type storeCalls struct {
	mu    sync.Mutex
	began []int64
}

// enter records a call beginning now; leave(t) its end, t what enter said.
func (sc *storeCalls) enter() int64 {
	t := time.Now().UnixNano()
	sc.mu.Lock()
	sc.began = append(sc.began, t)
	sc.mu.Unlock()
	return t
}

func (sc *storeCalls) leave(t int64) {
	sc.mu.Lock()
	if i := slices.Index(sc.began, t); i >= 0 {
		sc.began = slices.Delete(sc.began, i, i+1)
	}
	sc.mu.Unlock()
}

// behind reports whether a call in progress began before since: a wait
// that began at since was spent whole behind it.
func (sc *storeCalls) behind(since time.Time) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return slices.ContainsFunc(sc.began, func(t int64) bool { return t < since.UnixNano() })
}

// enqueue hands p to the queue of its lowest SKU when one runs (a hot SKU:
// its leader may hold the lease already) or emptied a moment ago
// (lingers), when p asks for a chaos pause (its leases need no watchdog) or
// when it has more lines than a gathered batch takes (maxGatherLines); any
// other order goes to the intake, whose gatherers batch orders of every
// SKU (gather.go). Once Close has begun it refuses p (ErrClosed), even for
// a queue or gatherer still running: a steady stream of orders would keep
// them, and Close, running.
func (c *coalescer) enqueue(ctx context.Context, p *pending) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.s.life.closing() {
		return ErrClosed
	}
	key := p.op.skus[0]
	if _, running := c.queues[key]; !running && p.pause == 0 && len(p.op.skus) <= maxGatherLines && !c.lingers(key) {
		return c.gather(ctx, p)
	}
	return c.enqueueLocked(ctx, p)
}

// lineLinger is how long after a key's queue empties its next order still
// goes to a queue, not the intake. A queue runs for a key held elsewhere,
// and on a hot SKU one empties after every lease of its instance while
// the key goes on to the other instances: a gatherer would try it at once
// (a round on every lock server, refused while another holds it) and,
// when it finds it free in the moment between a release and the woken
// waiter's acquisition, take it out of turn for the few orders it has, a
// lease, a claim and a write for them on the key's serial chain. The
// queue's leader waits in the key's line instead. An order for one of many
// SKUs rarely comes back within it.
const lineLinger = 50 * time.Millisecond

// lingers reports whether key's queue emptied within lineLinger, and
// forgets it when longer ago. c.mu is held.
func (c *coalescer) lingers(key string) bool {
	at, ok := c.emptied[key]
	if !ok {
		return false
	}
	if time.Since(at) < lineLinger {
		return true
	}
	delete(c.emptied, key)
	return false
}

// leave ends q, whose queue emptied, and notes when (lingers) if it was a
// busy key's: its leader placed more than one order. One order is a key
// of many that another instance happened to hold when a gatherer tried it
// (1,000 SKUs, three redlock instances): its next orders, gathered, share
// rounds with other SKUs', while lingering would send each through an
// acquisition of its own. c.mu is held.
func (c *coalescer) leave(q *queue) {
	delete(c.queues, q.key)
	if q.batched < 2 {
		return
	}
	now := time.Now()
	if len(c.emptied) >= c.cfg.MaxQueues {
		for k, at := range c.emptied {
			if now.Sub(at) >= lineLinger {
				delete(c.emptied, k)
			}
		}
	}
	if len(c.emptied) < c.cfg.MaxQueues {
		c.emptied[q.key] = now
	}
}

// enqueueLocked appends p to its queue, starting the queue's leader if none
// runs, or refuses it (inventory.ErrOverloaded) past the queue bounds. The
// leader works for every order in the queue, not for the request that
// happened to start it, so it runs on a context that outlives that request
// (but not a Close that gives up waiting). c.mu is held.
func (c *coalescer) enqueueLocked(ctx context.Context, p *pending) error {
	key := p.op.skus[0]
	q, running := c.queues[key]
	if running {
		q.prune()
		if len(q.items) >= c.cfg.MaxQueued {
			return fmt.Errorf("reservation: %d orders queued for %q: %w", len(q.items), key, inventory.ErrOverloaded)
		}
		q.items = append(q.items, p)
		p.storing.Store(&q.storing)
		return nil
	}
	if len(c.queues) >= c.cfg.MaxQueues {
		return fmt.Errorf("reservation: %d batch queues busy: %w", len(c.queues), inventory.ErrOverloaded)
	}
	lctx, done, err := c.s.life.enter(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	q = &queue{c: c, key: key, items: []*pending{p}}
	p.storing.Store(&q.storing)
	c.queues[key] = q
	go func() {
		defer done()
		c.s.serve(lctx, q, nil)
	}()
	return nil
}

// usable reports whether another batch may run under h without a new
// acquisition. No new claim is needed: the write requires the fence this
// hold stamped to still stand, and the ledger is exactly what was written.
// Leases taken without a watchdog serve one batch: they may run out in the
// next.
func (c *coalescer) usable(h *hold) bool {
	return h != nil && !h.broken && h.batches < c.cfg.MaxBatches && time.Since(h.acquired) < c.cfg.MaxHold &&
		!(h.unwatched && h.batches > 0) && h.set.Err() == nil
}

// next returns the orders at the head of the queue that h covers; or, when
// there are none, the SKUs of the order at the head, to lock, with it and
// the orders after it those SKUs cover, up to the first they do not; or
// nothing when the queue is empty, which it then leaves (the next order
// starts a new leader). The head waits for its own keys only: waiting for
// the union of the orders queued kept an order whose keys were free waiting,
// and failing, for a key only an order behind it needed. An order that needs
// more than the head's keys waits for its own turn at the head, and the
// orders behind it behind it: every order in the queue has the queue's key,
// which serves them in arrival order.
func (q *queue) next(h *hold) (batch []*pending, want []string, waiting []*pending) {
	c := q.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		q.prune()
		if len(q.items) == 0 {
			c.leave(q)
			return nil, nil, nil
		}
		if !c.usable(h) {
			break
		}
		n := 0
		for n < len(q.items) && len(batch) < c.cfg.MaxBatch {
			p := q.items[n]
			if p.state.Load() == stateQueued && !h.covers(p) {
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
			q.batched += len(batch)
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
		if len(waiting) == 0 {
			want = p.op.skus
		} else if !subsetSorted(p.op.skus, want) {
			break
		}
		waiting = append(waiting, p)
	}
	if len(waiting) == 0 {
		// Every order left between the prune and this scan (a client drops
		// its order without c.mu): leave as an emptied queue does, or the
		// key's later orders would join a queue no leader serves.
		clear(q.items)
		q.items = nil
		c.leave(q)
	}
	return nil, want, waiting
}

// keep reports whether h should be kept for the next batch: it is still
// usable and the order at the head of the queue is already waiting for it.
func (q *queue) keep(h *hold) bool {
	c := q.c
	if !c.usable(h) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	q.prune()
	return len(q.items) > 0 && h.covers(q.items[0])
}

func (*queue) tries() bool { return false }

func (q *queue) storeCalls() *storeCalls { return &q.storing }

func (*queue) handsOver(*hold) bool { return false }

// prune forgets the orders at the head that are no longer queued.
func (q *queue) prune() { q.items = pruneHead(q.items) }

// pruneHead drops the pendings at the head of items that are no longer
// queued (their clients left, their lock wait ran out, or a batch took
// them), clearing their slots for the collector.
func pruneHead(items []*pending) []*pending {
	n := 0
	for n < len(items) && items[n].state.Load() != stateQueued {
		n++
	}
	clear(items[:n])
	return items[n:]
}

// subsetSorted reports whether every key of a, sorted, is in b, sorted.
func subsetSorted(a, b []string) bool {
	j := 0
	for _, k := range a {
		for j < len(b) && b[j] < k {
			j++
		}
		if j == len(b) || b[j] != k {
			return false
		}
		j++
	}
	return true
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
