package inventory

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Coalescing tunes how concurrent orders inside one instance share leases
// and transactions. Orders queue per SKU (a multi-line order on its lowest
// SKU); one goroutine per busy queue, the batch leader, takes the leases for
// the orders waiting, claims the rows once, decides each order in arrival
// order against the claimed counters, and writes them all in one fenced
// transaction. On a hot SKU this turns one lock hand-off, one claim and one
// write per order into one of each per batch: the lock hand-off, not
// Postgres, is what limits a hot SKU.
//
// The zero value is on, with the defaults below.
type Coalescing struct {
	// Disabled places every order on its own: one acquisition, one claim and
	// one write per order (--coalesce=off), to compare.
	Disabled bool
	// MaxBatch caps the orders decided and written together. Default 256.
	MaxBatch int
	// MaxBatches caps the batches run back to back under one acquisition,
	// without a new claim, before the leases are released so that other
	// instances, queued in the lock backend, get their turn. Default 4.
	MaxBatches int
	// MaxHold caps how long leases are kept for further batches. Default 50ms.
	MaxHold time.Duration
}

// Coalescing defaults.
const (
	DefaultMaxBatch   = 256
	DefaultMaxBatches = 4
	DefaultMaxHold    = 50 * time.Millisecond
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
	return c
}

// BatchObserver may be implemented by an Observer that also wants the size
// of every coalesced batch written.
type BatchObserver interface {
	Batch(orders int)
}

// maxBatchSKUs caps the SKUs one acquisition locks: every one is a lock
// round trip before the first order of the batch can be decided. An order
// alone may have MaxLines of them.
const maxBatchSKUs = MaxLines

// batchStoreTimeout bounds each store call a batch leader makes: no client
// context governs them, and one hung connection must not hold a queue (and
// its leases) forever. Only a broken database trips it.
const batchStoreTimeout = 10 * time.Second

// coalescer holds the per-SKU queues of one Service.
type coalescer struct {
	s   *Service
	cfg Coalescing

	mu sync.Mutex
	// queues has an entry exactly while a batch leader serves it.
	queues map[string]*queue
}

// queue is the orders waiting for one SKU, in arrival order; guarded by
// coalescer.mu.
type queue struct {
	key   string
	items []*pending
}

// States of a pending order. The leader moves it queued → batched (taken
// into a batch under held leases) → decided; its own request may move it to
// dropped first: when its client leaves (queued or batched) or its lock wait
// runs out (queued only). Whoever moves it first decides who answers.
const (
	stateQueued int32 = iota
	stateBatched
	stateDecided
	stateDropped
)

// pending is one order waiting for its batch.
type pending struct {
	order    *Order
	skus     []string // sorted
	deadline time.Time
	state    atomic.Int32
	answer   chan error // buffered: the leader sends once and never waits
}

func (p *pending) move(from, to int32) bool { return p.state.CompareAndSwap(from, to) }

// place queues o and waits for its batch's answer.
func (c *coalescer) place(ctx context.Context, o *Order) error {
	p := &pending{order: o, skus: slices.Sorted(slices.Values(o.SKUs())), answer: make(chan error, 1),
		deadline: time.Now().Add(c.s.lockWait)}
	c.enqueue(ctx, p)
	wait := time.NewTimer(c.s.lockWait)
	defer wait.Stop()
	for {
		select {
		case err := <-p.answer:
			return err
		case <-ctx.Done():
			if p.move(stateQueued, stateDropped) || p.move(stateBatched, stateDropped) {
				return fmt.Errorf("inventory: order left its queue undecided: %w", ctx.Err())
			}
			// Decided already: it stands or falls with its batch, which
			// answers within one write.
			return <-p.answer
		case <-wait.C:
			if p.move(stateQueued, stateDropped) {
				return notAcquired(c.s.lockWait, context.DeadlineExceeded)
			}
			// Its batch holds the leases: the answer is near.
		}
	}
}

// enqueue appends p to its queue, starting the queue's leader if none runs.
// The leader works for every order in the queue, not for the request that
// happened to start it, so it runs on a context that outlives that request.
func (c *coalescer) enqueue(ctx context.Context, p *pending) {
	key := p.skus[0]
	c.mu.Lock()
	q, running := c.queues[key]
	if !running {
		q = &queue{key: key}
		c.queues[key] = q
	}
	q.items = append(q.items, p)
	c.mu.Unlock()
	if !running {
		go c.lead(context.WithoutCancel(ctx), q)
	}
}

// prune forgets the orders at the head that are no longer queued.
func (q *queue) prune() {
	n := 0
	for n < len(q.items) && q.items[n].state.Load() != stateQueued {
		q.items[n] = nil
		n++
	}
	q.items = q.items[n:]
}
