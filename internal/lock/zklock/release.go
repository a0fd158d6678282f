package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// handle is a granted lease's hold on its node.
type handle struct {
	s *session
	n *node
}

// Release implements lock.Handle. A lease lost with its session has nothing
// left to delete. Otherwise the node is deleted even if ctx ends first: the
// deletion goes on in the background until it succeeds or the session ends,
// because a node left behind would block the key for the session's lifetime.
func (h *handle) Release(ctx context.Context) error {
	if !h.s.unregister(h) {
		return nil
	}
	return h.s.remove(ctx, h.n, h.n.alone)
}

// remove deletes n and, with tryParent, also the key's parent if n was its
// last child; it returns when that is done or ctx ends, whichever is first.
func (s *session) remove(ctx context.Context, n *node, tryParent bool) error {
	if ctx.Done() == nil {
		return s.deleteUntilGone(n, tryParent)
	}
	done := make(chan error, 1)
	go func() { done <- s.deleteUntilGone(n, tryParent) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("zookeeper: delete %s: still trying in the background: %w", n.path(), ctx.Err())
	}
}

// deleteRetry spaces the retries of a deletion cut off by a disconnect.
const deleteRetry = 50 * time.Millisecond

func (s *session) deleteUntilGone(n *node, tryParent bool) error {
	for {
		err := s.deleteOnce(n, tryParent)
		if err == nil || s.isGone() {
			return nil // with the session, the servers delete the node themselves
		}
		if !lostResponse(err) {
			return fmt.Errorf("zookeeper: delete %s: %w", n.path(), err)
		}
		select {
		case <-time.After(deleteRetry):
		case <-s.dead:
			return nil
		}
	}
}

// deleteOnce removes n. With tryParent, node and parent go in one
// transaction, which fails as a whole (ErrNotEmpty) if someone queued in
// the meantime; then only the node goes and the newcomer, last in line,
// removes the parent in its turn. Any version (-1): only we delete our node,
// and a node already gone (ErrNoNode) is what we wanted.
func (s *session) deleteOnce(n *node, tryParent bool) error {
	if tryParent {
		_, err := s.conn.Multi(
			&zk.DeleteRequest{Path: n.path(), Version: -1},
			&zk.DeleteRequest{Path: n.parent, Version: -1})
		switch {
		case err == nil:
			s.l.parents.set(n.key, false)
			return nil
		case !errors.Is(err, zk.ErrNotEmpty) && !errors.Is(err, zk.ErrNoNode):
			return err
		}
	}
	err := s.conn.Delete(n.path(), -1)
	if err == nil || errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}
