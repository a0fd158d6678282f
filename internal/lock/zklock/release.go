package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/stockguard/stockguard/internal/lock"
)

// handle is a granted lease's hold on its node.
type handle struct {
	s *session
	n *node
}

// Release implements lock.Handle. A lease lost with its session, or to a
// disconnect, has nothing left for Release to delete (the servers, or the
// session's own clean-up, see to it). Otherwise the node is deleted even if
// ctx ends first: the deletion goes on in the background until it succeeds
// or the session ends, because a node left behind would block the key for
// the session's lifetime.
func (h *handle) Release(ctx context.Context) error {
	if !h.s.unregister(h) {
		return nil
	}
	return h.s.remove(ctx, h.n)
}

// Releaser implements lock.BatchHandle: the leases of one session that a
// lock.Set releases together go in one multi, one round trip, rather than
// one delete after another.
func (h *handle) Releaser() lock.BatchReleaser { return h.s }

// ReleaseBatch implements lock.BatchReleaser for the handles of s, as
// Release does each.
func (s *session) ReleaseBatch(ctx context.Context, hs []lock.Handle) error {
	nodes := make([]*node, 0, len(hs))
	for _, lh := range hs {
		if h := lh.(*handle); s.unregister(h) { // lock.Set groups by Releaser: ours
			nodes = append(nodes, h.n)
		}
	}
	return s.removeAll(ctx, nodes)
}

// remove deletes n; it returns when that is done or ctx ends, whichever is
// first. The key's parent, a container, is the servers' to delete.
func (s *session) remove(ctx context.Context, n *node) error {
	if ctx.Done() == nil {
		return s.deleteUntilGone(n)
	}
	done := make(chan error, 1)
	go func() { done <- s.deleteUntilGone(n) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("zookeeper: delete %s: %w: %w", n.path(), lock.ErrCleanupPending, lock.CleanupEnd(ctx))
	}
}

// deleteRetry spaces the retries of a deletion cut off by a disconnect.
const deleteRetry = 50 * time.Millisecond

// deleteUntilGone deletes n at any version (-1): only we delete our node,
// and a node already gone (ErrNoNode, a retry after a lost reply) is what
// we wanted.
func (s *session) deleteUntilGone(n *node) error {
	return s.untilGone(n.path(), func() error {
		if err := s.conn.Delete(n.path(), -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		return nil
	})
}

// untilGone repeats op, every step idempotent, while a disconnect cuts it off.
func (s *session) untilGone(what string, op func() error) error {
	for {
		err := op()
		if err == nil || s.isGone() {
			return nil // with the session, the servers delete the nodes themselves
		}
		if !cutOff(err) {
			return fmt.Errorf("zookeeper: delete %s: %w", what, err)
		}
		select {
		case <-time.After(deleteRetry):
		case <-s.dead:
			return nil
		}
	}
}
