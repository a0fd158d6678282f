package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/lock/retry"
)

// handle is a held lock: key k of the successful attempt, whose per-node
// state the release needs, and this Locker's turn on the key.
type handle struct {
	a      *attempt
	k      int
	turn   func() // see handOn
	handed sync.Once
}

// handOn hands this Locker's turn on the key on, once, telling the loop
// whether letting go of it may have woken a waiter elsewhere: a lost lease
// gets here from OnLost and again from a later Release, and only the
// first may hand the turn on.
func (h *handle) handOn(woke bool) {
	h.handed.Do(func() {
		if !woke {
			h.a.l.loop.Unheeded(h.a.keys[h.k])
		}
		h.turn()
	})
}

var _ lock.BatchHandle = (*handle)(nil)

// Release deletes the lock on every node that may hold it, each after that
// node's lock writes were answered, and returns once a majority of nodes is
// clear of it; the stragglers finish in the background (Close waits for
// them). The caller's cancellation is ignored, each request being bounded by
// the node timeout: a release that never reaches the nodes leaves the key
// held for a whole TTL, the very bug NOTES.md records for redsync.
func (h *handle) Release(context.Context) error {
	return h.a.l.releaseHandles([]*handle{h})
}

// Releaser implements lock.BatchHandle: the Locker's leases are released
// together, one request per node.
func (h *handle) Releaser() lock.BatchReleaser { return h.a.l.rel }

// Extend resets the TTL on every node that still holds our lock, in
// parallel, and succeeds once a majority did, with the validity recomputed
// from this extension's start. It fails at once, wrapping lock.ErrLeaseLost,
// when enough nodes answered that the lock is not ours that no majority is
// left; while nodes merely do not answer it retries until ctx (the lease's
// validity deadline) ends, because the lease is valid until then.
func (h *handle) Extend(ctx context.Context) (time.Time, error) {
	a, l, k := h.a, h.a.l, h.k
	n, q := len(l.nodes), l.quorum
	key, id := a.keys[k], a.holds[k].ID
	idx := make([]int, 0, n)
	refused := 0
	for i := range n {
		select {
		case <-a.done[i]:
			if noneOurs(a.wrote(i, k)) { // our lease id was never there
				refused++
				continue
			}
		default:
		}
		idx = append(idx, i)
	}
	for {
		start := time.Now()
		results := l.each(idx, func(i int) error { return l.nodes[i].Extend(ctx, key, id, a.ttl) })
		ok, notHeld, pending := 0, refused, len(idx)
		var errs []error
		for pending > 0 && ok < q && ok+pending >= q {
			r := <-results
			pending--
			if r.err == nil {
				ok++
				continue
			}
			if errors.Is(r.err, redisnode.ErrNotHeld) {
				notHeld++
			}
			errs = append(errs, l.nodeErr(r.node, r.err))
		}
		if ok >= q {
			if time.Since(start) < a.ttl-retry.Drift(a.ttl) {
				l.m.Extended(true)
				return start.Add(a.ttl - retry.Drift(a.ttl)), nil
			}
			errs = append(errs, fmt.Errorf("extended after %v, no validity left of a %v TTL", time.Since(start), a.ttl))
		}
		if notHeld > n-q {
			l.m.Extended(false)
			return time.Time{}, fmt.Errorf("redlock: extend %q: held on %d/%d nodes: %w: %w",
				key, n-notHeld, n, lock.ErrLeaseLost, joinNodeErrs(errs))
		}
		if l.isClosed() {
			l.m.Extended(false)
			return time.Time{}, fmt.Errorf("redlock: extend %q: locker closed: %w", key, lock.ErrLeaseLost)
		}
		if err := retry.Sleep(ctx, retry.Jitter(l.cfg.retryDelay)); err != nil {
			l.m.Extended(false)
			return time.Time{}, fmt.Errorf("redlock: extend %q: no quorum (%d/%d): %w: %w",
				key, ok, n, lock.ErrUnavailable, joinNodeErrs(errs))
		}
	}
}
