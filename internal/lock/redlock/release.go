package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/lock/retry"
)

// held is key k of attempt a: what a release must delete, and where.
// quiet marks the clean-up of a key another holder has: its delete wakes
// nobody (see heldElsewhere).
type held struct {
	a     *attempt
	k     int
	quiet bool
}

// releaseUntil is what release waits for before it returns.
type releaseUntil uint8

const (
	// allDeletes: every node's delete confirmed or handed to the
	// background (wait, below).
	allDeletes releaseUntil = iota
	// clearMajority: a majority of nodes clear of the keys.
	clearMajority
	// ownMajority: that, and a majority of the release's own deletes
	// confirmed, for a split's pause at most.
	ownMajority
)

// release compare-and-deletes every key of hs on every node it may have been
// written to (all but those whose round-1 answer was that SET NX found the
// key held, or whose round 1 never reached the node, save the key's wake
// node, which wakes a waiter: see wake), in one request per node for all
// the keys. Each node's delete
// waits until every attempt among hs has sent that node all it will: a SET
// that landed after the delete would hold that node for the whole TTL, and
// a round-2 raise or a late node's lesson that landed after it could come
// after the next holder's increment there, leaving that node's counter
// below our token (which the empty-restart argument of the package doc
// counts on it knowing).
// Where the round-1 write got no reply, it may land even later (a paused
// Redis runs what its connections buffered when it resumes): the node's
// Release confirms that delete by a second one sent after the node's
// answer, and any delete a node does not confirm in its tries goes on in
// the background (redisnode.Release), its error wrapping
// redisnode.ErrPending.
// With allDeletes (wait) it returns when every node's delete has been
// confirmed or handed to the background. Once ctx is done it stops waiting for the
// nodes whose round-1 write got no answer: the caller's deadline is not
// the clean-up's, and such a node (frozen, say) would hold it a node
// timeout per try. The others answered round 1 and answer a delete within
// a round trip, so it waits for them, up to one node timeout (the overrun
// Acquire's doc allows), rather than report a clean-up healthy nodes are
// about to confirm as pending (and leave the key held for the next
// caller). The deletes not confirmed by then go on (tracked by l.bg, and
// redisnode's background after their tries), and the error wraps
// lock.ErrCleanupPending. Otherwise it returns once a majority of nodes
// is clear of the keys (clearMajority) and, for a lease's release, a
// majority of its own deletes is confirmed, or a split's pause after the
// first (ownMajority, see freed), the rest finishing in the background.
// It returns the errors of the deletes it waited for, when fewer than that
// majority could be confirmed, or, with wait, when any is still pending.
// ctx only bounds the wait: the deletes run without its cancellation.
func (l *Locker) release(ctx context.Context, hs []held, until releaseUntil) error {
	if len(hs) == 0 {
		return nil
	}
	wait := until == allDeletes
	n := len(l.nodes)
	// The caller's values without its cancellation: a release that never
	// reaches the nodes leaves the keys held for a whole TTL.
	bg := hs[0].a.bg
	ttl := hs[0].a.ttl
	for _, h := range hs[1:] {
		ttl = max(ttl, h.a.ttl)
	}
	// unanswered gets each node where some hold's round-1 write got no
	// answer: once ctx is done, its delete is not waited for.
	unanswered := make(chan int, n)
	// oursAt marks the nodes where this release deletes a value of ours,
	// written by each node's call before its result is sent.
	oursAt := make([]bool, n)
	results := l.each(allNodes(n), func(i int) error {
		if len(hs) == 1 { // a lone lease: no per-node slices to build
			h := hs[0]
			<-h.a.fin[i]
			w, st := l.wake(h, i), h.a.wrote(i, h.k)
			oursAt[i] = !noneOurs(st)
			if st == writeUnknown {
				unanswered <- i
			}
			if noneOurs(st) && w == redisnode.WakeNone {
				return nil
			}
			var written []redisnode.Written // nil: the node granted it (the common case)
			if st != writeAcquired {
				written = []redisnode.Written{writtenAs(st)}
			}
			_, _, err := l.nodes[i].Release(bg, h.a.holds[h.k:h.k+1:h.k+1], []redisnode.Wake{w}, written, ttl)
			return l.wakeOnly(i, !noneOurs(st), err)
		}
		holds := make([]redisnode.Hold, 0, len(hs))
		wake := make([]redisnode.Wake, 0, len(hs))
		var written []redisnode.Written // allocated at the first hold not granted
		ours, unknown := false, false
		for _, h := range hs {
			<-h.a.fin[i]
			w, st := l.wake(h, i), h.a.wrote(i, h.k)
			unknown = unknown || st == writeUnknown
			if noneOurs(st) && w == redisnode.WakeNone {
				continue
			}
			ours = ours || !noneOurs(st)
			if st != writeAcquired && written == nil {
				written = make([]redisnode.Written, len(holds), len(hs))
			}
			if written != nil {
				written = append(written, writtenAs(st))
			}
			holds = append(holds, h.a.holds[h.k])
			wake = append(wake, w)
		}
		oursAt[i] = ours
		if unknown {
			unanswered <- i
		}
		if len(holds) == 0 {
			return nil
		}
		_, _, err := l.nodes[i].Release(bg, holds, wake, written, ttl)
		return l.wakeOnly(i, ours, err)
	})
	cleared, freed, pending, left := 0, 0, 0, n
	// A node that refused our write counts as clear, having nothing of ours,
	// but it holds another value: often the straggling delete of the lease
	// before. Were a majority clear only by such nodes and one delete, the
	// next try (a local waiter, the instance this release wakes) would meet
	// our value on the nodes still deleting it, split, and pause a split's
	// delay. So a lease's release also waits for a majority of its own
	// deletes (freed), though no longer than that delay (settle): a node
	// that holds ours and does not answer (frozen, down) costs no more.
	// An attempt's clean-up of keys it did not obtain has its own deletes
	// on fewer than a majority, and the keys are held elsewhere or split:
	// it does not wait for them.
	var settle time.Duration
	if until == ownMajority {
		settle = l.cfg.retryDelay / retry.SplitShare
	}
	var settled <-chan time.Time
	var errs []error
	var done <-chan struct{} // nil without wait: the majority is awaited whatever ctx does
	if wait {
		done = ctx.Done()
	}
	var grace <-chan time.Time // after ctx is done: the most it waits on
	abandon := make([]bool, n) // nodes whose round 1 got no answer
	unsure := 0                // of those, the nodes not yet in results
	answered := make([]bool, n)
	for left > 0 {
		if !wait && cleared >= l.quorum {
			if freed >= l.quorum || settle <= 0 {
				break
			}
			if settled == nil {
				t := time.NewTimer(settle)
				defer t.Stop()
				settled = t.C
			}
		}
		if grace != nil && left == unsure {
			return l.gaveUp(cleared, left, errs)
		}
		var r result
		select {
		case r = <-results:
		case i := <-unanswered:
			if !answered[i] {
				abandon[i] = true
				unsure++
			}
			continue
		case <-done:
			done = nil
			t := time.NewTimer(l.cfg.nodeTimeout)
			defer t.Stop()
			grace = t.C
			continue
		case <-grace:
			return l.gaveUp(cleared, left, errs)
		case <-settled:
			settle = 0 // a majority is clear: enough
			continue
		}
		answered[r.node] = true
		if abandon[r.node] {
			unsure--
		}
		left--
		if r.err != nil {
			if errors.Is(r.err, redisnode.ErrPending) {
				pending++
			}
			errs = append(errs, l.nodeErr(r.node, r.err))
			// Debug: with a node down, every release fails there.
			l.cfg.log.Debug("redlock: release", "keys", len(hs), "node", l.nodes[r.node].Addr(), "err", r.err)
			continue
		}
		cleared++
		if oursAt[r.node] {
			freed++
		}
	}
	switch {
	case cleared < l.quorum:
		return fmt.Errorf("released on %d/%d nodes: %w: %w", cleared, n, lock.ErrUnavailable, joinNodeErrs(errs))
	case wait && pending > 0:
		return fmt.Errorf("released on %d/%d nodes, %d going on in the background: %w", cleared, n, pending, joinNodeErrs(errs))
	}
	return nil
}

// gaveUp is release's error when its caller's ctx ended with left nodes'
// deletes unconfirmed: they go on in the background.
func (l *Locker) gaveUp(cleared, left int, errs []error) error {
	err := fmt.Errorf("released on %d/%d nodes, %d unconfirmed when the caller gave up, going on in the background: %w",
		cleared, len(l.nodes), left, lock.ErrCleanupPending)
	if len(errs) > 0 {
		err = fmt.Errorf("%w: %w", err, joinNodeErrs(errs))
	}
	return err
}

// wakeOnly is err of a node's Release, unless nothing of ours was to be
// deleted there (ours false: the call only carried a wake-up, a hint): the
// node is then clear whatever it answered.
func (l *Locker) wakeOnly(i int, ours bool, err error) error {
	if err != nil && !ours {
		l.cfg.log.Debug("redlock: wake-up", "node", l.nodes[i].Addr(), "err", err)
		return nil
	}
	return err
}

// noneOurs reports whether the attempt's round 1 left nothing of ours on the
// node: it refused our write, or the write never reached it.
func noneOurs(st int8) bool { return st == writeRefused || st == writeUnsent }

// writtenAs is what a node's Release must know of our write there.
func writtenAs(st int8) redisnode.Written {
	switch st {
	case writeAcquired:
		return redisnode.Landed
	case writeUnknown:
		return redisnode.Unknown
	}
	return redisnode.Absent
}

// wake is what h's delete on node i does for the key's waiters: on its
// wake node, unless quiet, it wakes one whether or not the lock there was
// ours. A lease holds a majority, not every node: one that held the key
// without its wake node (that node refused our write, after a split or a
// straggling clean-up) is let go of by the deletes elsewhere, and a wake
// that waited for a delete there would leave the key's waiters asleep for
// their whole span while it stood free. Where the node is not the wake
// node, or the key is held elsewhere (quiet), nobody is woken.
func (l *Locker) wake(h held, i int) redisnode.Wake {
	if h.quiet || i != l.wakeNode(h.a.keys[h.k]) {
		return redisnode.WakeNone
	}
	return redisnode.WakeAnyway
}

// releaser releases many of one Locker's leases in one request per node.
type releaser struct{ l *Locker }

// ReleaseBatch implements lock.BatchReleaser.
func (r *releaser) ReleaseBatch(ctx context.Context, hs []lock.Handle) error {
	mine := make([]*handle, 0, len(hs))
	var errs []error
	for _, h := range hs {
		if rh, ok := h.(*handle); ok && rh.a.l == r.l {
			mine = append(mine, rh)
		} else if err := h.Release(ctx); err != nil { // not ours: cannot happen through Set.Release
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, r.l.releaseHandles(mine))...)
}

// releaseHandles releases the leases of hs together and then hands each
// key's turn on: the next local waiter starts only once a majority is
// clear, or its first attempt would find the key still held and sleep a
// retry delay.
func (l *Locker) releaseHandles(hs []*handle) error {
	if len(hs) == 0 {
		return nil
	}
	items := make([]held, len(hs))
	for i, h := range hs {
		items[i] = held{a: h.a, k: h.k}
	}
	err := l.release(context.Background(), items, ownMajority)
	for _, h := range hs {
		h.handOn(true)
	}
	if errors.Is(err, redisnode.ErrPending) {
		err = fmt.Errorf("%w: %w", lock.ErrCleanupPending, err)
	}
	switch {
	case err == nil:
		return nil
	case len(hs) == 1:
		return fmt.Errorf("redlock: release %q: %w", hs[0].a.keys[hs[0].k], err)
	default:
		return fmt.Errorf("redlock: release %d keys: %w", len(hs), err)
	}
}
