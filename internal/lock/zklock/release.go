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

// remove deletes n and, if n was the last node under it, the key's parent;
// it returns when that is done or ctx ends, whichever is first.
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
		return fmt.Errorf("zookeeper: delete %s: still trying in the background: %w", n.path(), ctx.Err())
	}
}

// deleteRetry spaces the retries of a deletion cut off by a disconnect.
const deleteRetry = 50 * time.Millisecond

func (s *session) deleteUntilGone(n *node) error {
	return s.untilGone(n.path(), func() error { return s.deleteOnce(n) })
}

// untilGone repeats op, every step idempotent, while its replies are lost.
func (s *session) untilGone(what string, op func() error) error {
	for {
		err := op()
		if err == nil || s.isGone() {
			return nil // with the session, the servers delete the nodes themselves
		}
		if !lostResponse(err) {
			return fmt.Errorf("zookeeper: delete %s: %w", what, err)
		}
		select {
		case <-time.After(deleteRetry):
		case <-s.dead:
			return nil
		}
	}
}

// deleteOnce removes n, then the key's parent if n was the last node under
// it. A node that expects to be the last one (nobody queued behind it when
// it was granted, or it created the parent) tries node and parent in one
// transaction, which fails as a whole (ErrNotEmpty) if someone queued in the
// meantime; then, and for every other node, the node goes alone and
// pruneParent follows. Any version (-1): only we delete our node, and a node
// already gone (ErrNoNode) is what we wanted.
func (s *session) deleteOnce(n *node) error {
	if n.alone || n.first {
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
	if err := s.conn.Delete(n.path(), -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return s.pruneParent(n.key, n.parent)
}

// pruneParent deletes a key's parent if no node is left under it, so that
// whoever leaves last — a holder, a waiter giving up, a cancelled
// acquisition — removes it. Each departure reads the children after its own
// delete, on a server that has applied that delete: the departure whose
// delete came last in the ensemble's order sees every earlier one, hence an
// empty parent; any other sees a node whose owner leaves later and prunes in
// its turn. The delete cannot race a creator: a parent that is no longer
// empty is not deleted (ErrNotEmpty), and a creator that finds it gone
// creates it again (createNode). Only a node deleted by the servers with an
// expired session prunes nothing; the key's next user does.
func (s *session) pruneParent(key, parent string) error {
	children, _, err := s.conn.Children(parent)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		s.l.parents.set(key, false)
		return nil
	case err != nil:
		return err
	case len(children) > 0:
		return nil
	}
	err = s.conn.Delete(parent, -1)
	switch {
	case err == nil, errors.Is(err, zk.ErrNoNode):
		s.l.parents.set(key, false)
		return nil
	case errors.Is(err, zk.ErrNotEmpty):
		return nil // a newcomer, who prunes when it goes
	}
	return err
}
