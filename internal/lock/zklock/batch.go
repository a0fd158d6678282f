package zklock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
)

// AcquireBatch implements lock.Locker in three rounds, whatever the number
// of keys: one multi creates every key's node, one pipelined round of
// children reads finds where each node stands, and one multi deletes the
// nodes of the keys held elsewhere. A key whose node is lowest is obtained
// with the lease it would have had alone (token: its node's czxid); a node
// that was its parent's only child is lowest at once and needs no read.
// Options other than TryOnce do not apply, as for Acquire; a batch never
// waits.
func (l *Locker) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	b, _, err := l.HandoverBatch(ctx, nil, keys, opts...)
	return b, err
}

// HandoverBatch implements lock.Handover: the multi that creates the
// batch's nodes first deletes the nodes of prev's leases of the current
// session, one transaction for both (a round and a transaction fewer; the
// ensemble's cost is per transaction). Handles of an earlier session have
// nothing left to delete; where the multi fails, prev's nodes are deleted
// on their own.
func (l *Locker) HandoverBatch(ctx context.Context, prev []lock.Handle, keys []string, _ ...lock.Option) (b lock.Batch, released, err error) {
	start := time.Now()
	sorted, err := lock.BatchKeys(keys)
	if err == nil {
		for _, k := range sorted {
			if cerr := checkName(k); cerr != nil {
				err = fmt.Errorf("%q: %w: %w", k, lock.ErrInvalidKey, cerr)
				break
			}
		}
	}
	if err != nil {
		return lock.Batch{}, l.releaseHandles(ctx, prev), fmt.Errorf("zookeeper: batch: %w", err)
	}
	if len(sorted) == 0 {
		return b, l.releaseHandles(ctx, prev), nil
	}
	err = l.inSession(ctx, func(s *session) (err error) {
		gone, others := s.own(ctx, prev)
		prev = nil // released by this attempt, whatever it becomes
		var rerr error
		b, rerr, err = s.acquireBatch(ctx, sorted, gone)
		released = errors.Join(released, others, rerr)
		return err
	})
	released = errors.Join(released, l.releaseHandles(ctx, prev)) // no attempt was made
	if err != nil {
		l.m.Failed(lockmetrics.Reason(err))
		return lock.Batch{}, released, fmt.Errorf("zookeeper: batch of %d keys: %w", len(sorted), err)
	}
	for range b.Leases {
		l.m.Acquired(time.Since(start))
	}
	for range b.Held {
		l.m.Failed(lockmetrics.ReasonNotAcquired)
	}
	return b, released, nil
}

// releaseHandles releases hs, those of one session in one multi, waiting
// for it no longer than a clean-up (cleanupContext).
func (l *Locker) releaseHandles(ctx context.Context, hs []lock.Handle) error {
	if len(hs) == 0 {
		return nil
	}
	rctx, cancel := cleanupContext(ctx)
	defer cancel()
	return lock.ReleaseHandles(rctx, hs)
}

// own returns the nodes of hs that are s's leases, unregistered as a
// release does, having released every other handle on its own.
func (s *session) own(ctx context.Context, hs []lock.Handle) (nodes []*node, others error) {
	var rest []lock.Handle
	for _, lh := range hs {
		if h, ok := lh.(*handle); ok && h.s == s {
			if s.unregister(h) {
				nodes = append(nodes, h.n)
			}
			continue
		}
		rest = append(rest, lh)
	}
	return nodes, s.l.releaseHandles(ctx, rest)
}

// acquireBatch runs the batch once in this session, its create multi first
// deleting gone's nodes; keys are sorted and valid. On any error it leaves
// none of its nodes behind; gone's are deleted whatever happens, released
// being why not yet.
func (s *session) acquireBatch(ctx context.Context, keys []string, gone []*node) (b lock.Batch, released, err error) {
	nodes, released, err := s.createAll(ctx, keys, gone)
	if err != nil {
		return lock.Batch{}, released, err
	}
	positions, err := s.locateAll(ctx, nodes)
	if err != nil {
		if !errors.Is(err, errSessionGone) {
			if aerr := s.abandon(ctx, nodes...); aerr != nil {
				err = fmt.Errorf("%w (%w)", err, aerr)
			}
		}
		return lock.Batch{}, released, err
	}
	var won, held []*node
	for i, n := range nodes {
		s.l.m.queueDepth.Observe(float64(positions[i].ahead))
		if positions[i].ahead == 0 {
			won = append(won, n)
		} else {
			held = append(held, n)
			b.Held = append(b.Held, n.key)
		}
	}
	// Queued behind a holder, a node would be granted the key later with
	// nobody to take it: it goes before the batch returns, or the batch
	// fails saying it is still going (lock.ErrCleanupPending), and takes
	// nothing.
	if aerr := s.abandon(ctx, held...); aerr != nil {
		return lock.Batch{}, released, errors.Join(aerr, s.abandon(ctx, won...))
	}
	if len(won) == 0 {
		return b, released, nil
	}
	if b.Leases, err = s.grant(ctx, won); err != nil {
		return lock.Batch{}, released, err
	}
	return b, released, nil
}

// createAll runs createNodes without outliving the session, nor ctx for
// longer than it takes the create to settle. A multi in flight when ctx
// ends may yet be applied, and only its outcome tells whether there are
// nodes to delete and whether gone's deletes went with it; returning
// before would leave keys held after the error that says none are. So the
// wait goes on for cleanupGrace, and nodes it created are deleted before
// the error returns. A server that does not answer that soon (out of
// reach, the multi waiting in go-zookeeper for one) leaves the clean-up to
// the background, said in the error (and in released, for gone).
func (s *session) createAll(ctx context.Context, keys []string, gone []*node) ([]*node, error, error) {
	if ctx.Done() == nil {
		return s.createNodes(ctx, keys, gone)
	}
	type result struct {
		nodes         []*node
		released, err error
	}
	done := make(chan result, 1)
	go func() {
		nodes, released, err := s.createNodes(ctx, keys, gone)
		done <- result{nodes, released, err}
	}()
	select {
	case r := <-done:
		return r.nodes, r.released, r.err
	case <-ctx.Done():
	case <-s.dead:
		return nil, nil, errSessionGone
	}
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	select {
	case r := <-done:
		if err := s.removeAll(cctx, r.nodes); err != nil {
			return nil, r.released, fmt.Errorf("%w (nodes created as it ended: %w)", ctx.Err(), err)
		}
		return nil, r.released, cmp.Or(r.err, ctx.Err())
	case <-s.dead:
		return nil, nil, errSessionGone // every node with it, gone's too
	case <-cctx.Done():
	}
	go func() {
		r := <-done
		if err := s.removeAll(context.Background(), r.nodes); err != nil {
			s.l.log.Warn("zookeeper: nodes of a cancelled create not deleted", "nodes", len(r.nodes), "err", err)
		}
	}()
	var released error
	if len(gone) > 0 {
		// As removeAll says when its wait is cut short: the deletes are
		// in that multi, or after it, still going.
		released = fmt.Errorf("zookeeper: delete %d nodes: %w: %w", len(gone), lock.ErrCleanupPending, lock.CleanupEnd(cctx))
	}
	return nil, released, fmt.Errorf("%w (create still unanswered: %w: %w)", ctx.Err(), lock.ErrCleanupPending, lock.CleanupEnd(cctx))
}

// maxCreateTries bounds the retries of one create; each retry is the server
// telling us something changed (a parent reaped, a response lost).
const maxCreateTries = 10

// createNodes makes a waiter node per key, one or a batch's, in one multi,
// and learns their czxid, the fencing token.
//
// The token: zxids number every transaction of the ensemble in one global
// order (epoch in the high 32 bits, counter in the low), so the czxid of a
// later holder's node is larger than any earlier holder's, of this key or
// any other. go-zookeeper's Create returns only the path, so the multi also
// sets each parent's (empty) data: every op of a multi shares its zxid, and
// SetData's Stat returns it — and the parent's child count after our
// create, which tells an uncontended caller that it is first without a
// listing (one round trip fewer than zk.Lock).
//
// A key's parent is a container znode (ZooKeeper 3.5+, as Curator's recipes
// use): the servers delete it once it has been emptied, so no client ever
// deletes a parent another is about to create a node under. (Client-side
// pruning raced: under churn a creator could lose ten times in a row to
// releases removing the parent between its tries.) The parents we do not
// know to be present are ensured first, in one pipelined round. A parent
// reaped since fails the multi; the reply names only the first such key,
// and keys idle as long went too, so the next try ensures them all rather
// than one per try.
//
// gone's nodes (leases let go of, lock.Handover) are deleted by the same
// multi, ahead of the creates; where it fails for any reason but a lost
// reply (after which recoverCreates tells whether it was applied), they are
// deleted on their own and the creates retried without them. Either way
// they are gone, or going, when createNodes returns; released is why not.
//
// A multi go-zookeeper never wrote (unsent: no server in reach) told us
// nothing and costs no try; it is sent again, but only while ctx, the
// caller's, lives: a caller gone has no use for a node, and once it is,
// createNodes ends at its next try. Only a multi that may have been
// applied is followed up (recoverCreates), so that its nodes get deleted.
func (s *session) createNodes(ctx context.Context, keys []string, gone []*node) (_ []*node, released, err error) {
	defer func() {
		if len(gone) > 0 {
			released = s.removeAll(context.Background(), gone)
		}
	}()
	ids := make([]uuid.UUID, len(keys))
	for i := range ids {
		ids[i] = uuid.New()
	}
	for tries := 0; tries < maxCreateTries; {
		if s.isGone() {
			return nil, nil, errSessionGone
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, nil, cerr
		}
		if err = s.ensureParents(keys); cutOff(err) {
			if !unsent(err) {
				tries++
			}
			time.Sleep(retryPause)
			continue
		} else if err != nil {
			return nil, nil, s.classify(err)
		}
		d := len(gone)
		ops := make([]any, 0, d+2*len(keys))
		for _, n := range gone {
			ops = append(ops, &zk.DeleteRequest{Path: n.path(), Version: -1})
		}
		for i, k := range keys {
			parent := s.l.cfg.root + "/" + k
			ops = append(ops,
				&zk.CreateRequest{Path: parent + "/" + nodePrefix(ids[i]), Acl: s.l.acl, Flags: zk.FlagEphemeralSequential},
				&zk.SetDataRequest{Path: parent, Version: -1})
		}
		var res []zk.MultiResponse
		res, err = s.conn.Multi(ops...)
		switch {
		case err == nil:
			gone = nil
			nodes := make([]*node, 0, len(keys))
			for i, k := range keys {
				n, err := newNode(k, s.l.cfg.root+"/"+k, res[d+2*i].String, ids[i], res[d+2*i+1].Stat)
				if err != nil {
					return nil, nil, errors.Join(err, s.removeAll(context.Background(), nodes))
				}
				nodes = append(nodes, n)
			}
			return nodes, nil, nil
		case unsent(err):
			time.Sleep(retryPause)
			continue
		case lostResponse(err):
			nodes, rerr := s.recoverCreates(keys, ids)
			if nodes != nil {
				gone = nil // applied whole: the deletes too
			}
			if nodes != nil || rerr != nil {
				return nodes, nil, rerr
			}
			time.Sleep(retryPause)
		case len(gone) > 0 || errors.Is(err, zk.ErrNoNode):
			if len(gone) > 0 {
				// One of the deletes may be what failed: they go on their
				// own, and the creates are tried again alone (if they were
				// the cause, the next try says so).
				released, gone = s.removeAll(context.Background(), gone), nil
				if released != nil {
					return nil, released, s.classify(err)
				}
			}
			if errors.Is(err, zk.ErrNoNode) {
				for _, k := range keys {
					s.l.parents.set(k, false)
				}
			}
		default:
			return nil, nil, s.classify(err)
		}
		tries++
	}
	return nil, nil, fmt.Errorf("create under %s (%d keys): gave up after %d tries: %w", s.l.cfg.root+"/"+keys[0], len(keys), maxCreateTries, err)
}

// ensureParents is ensureParent, in one pipelined round, for every key we
// do not know to be present.
func (s *session) ensureParents(keys []string) error {
	var missing []string
	for _, k := range keys {
		if !s.l.parents.isPresent(k) {
			missing = append(missing, k)
		}
	}
	return each(missing, s.ensureParent)
}

// recoverCreates is recoverCreate for a multi whose reply was lost. The
// multi was applied whole or not at all: if the first key's node is not
// there, none is; if it is, every other is found the same way.
func (s *session) recoverCreates(keys []string, ids []uuid.UUID) ([]*node, error) {
	var nodes []*node
	for i, k := range keys {
		n, err := s.recoverCreate(k, s.l.cfg.root+"/"+k, ids[i])
		if err == nil && n == nil && i > 0 {
			err = fmt.Errorf("node of %q missing from a multi that created %q's: %w", k, keys[0], errSessionGone)
		}
		if err != nil || n == nil {
			if len(nodes) > 0 {
				s.abandon(context.Background(), nodes...)
			}
			return nil, err
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// locateAll reads every node's queue in one pipelined round: go-zookeeper
// sends concurrent requests down the session's one connection back to back.
func (s *session) locateAll(ctx context.Context, nodes []*node) ([]position, error) {
	positions := make([]position, len(nodes))
	idx := make([]int, 0, len(nodes))
	for i, n := range nodes {
		if n.first {
			positions[i] = position{found: true} // nobody can be ahead
			continue
		}
		idx = append(idx, i)
	}
	err := each(idx, func(i int) error {
		n := nodes[i]
		for {
			var children []string
			err := s.run(ctx, func() (err error) {
				children, _, err = s.conn.Children(n.parent)
				return err
			})
			switch {
			case errors.Is(err, zk.ErrNoNode):
				return errSessionGone
			case s.retryRead(ctx, err):
				continue
			case err != nil:
				return s.classify(err)
			}
			positions[i] = locate(children, n.name, n.seq)
			if !positions[i].found {
				return errSessionGone
			}
			return nil
		}
	})
	if err != nil {
		if errors.Is(err, errSessionGone) {
			return nil, errSessionGone
		}
		return nil, err
	}
	return positions, nil
}

// removeAll deletes nodes as remove does one, in one multi.
func (s *session) removeAll(ctx context.Context, nodes []*node) error {
	switch len(nodes) {
	case 0:
		return nil
	case 1:
		return s.remove(ctx, nodes[0])
	}
	done := make(chan error, 1)
	go func() {
		done <- s.untilGone(fmt.Sprintf("%d nodes", len(nodes)), func() error { return s.deleteAllOnce(nodes) })
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("zookeeper: delete %d nodes: %w: %w", len(nodes), lock.ErrCleanupPending, lock.CleanupEnd(ctx))
	}
}

func (s *session) deleteAllOnce(nodes []*node) error {
	ops := make([]any, len(nodes))
	names := make([]string, len(nodes))
	for i, n := range nodes {
		ops[i] = &zk.DeleteRequest{Path: n.path(), Version: -1}
		names[i] = n.path()
	}
	_, err := s.conn.Multi(ops...)
	switch {
	case err == nil:
	case errors.Is(err, zk.ErrNoNode):
		// Some went already (a retry after a lost reply): the rest one by one.
		if err := each(nodes, func(n *node) error {
			if err := s.conn.Delete(n.path(), -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
			return nil
		}); err != nil {
			return err
		}
	default:
		return fmt.Errorf("multi delete of %s: %w", strings.Join(names, ", "), err)
	}
	return nil
}

// each runs f on every item concurrently and joins the errors: requests
// made at once go to the server back to back, one round trip for all.
func each[T any](items []T, f func(T) error) error {
	if len(items) == 1 {
		return f(items[0])
	}
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Go(func() { errs[i] = f(it) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
