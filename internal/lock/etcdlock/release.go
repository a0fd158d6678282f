package etcdlock

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// handle is a granted lease's hold on its waiter key.
type handle struct {
	s *session
	w *waiter
}

// Release implements lock.Handle. A lease lost with its session has nothing
// left to delete. Otherwise the key is deleted only if its create revision is
// still the lease's token: whatever stands at that name now (re-created after
// the session ended, by anyone) belongs to someone else, and a release must
// never free another holder's lock. If ctx ends first the delete goes on in
// the background until it succeeds or the session ends.
func (h *handle) Release(ctx context.Context) error {
	if !h.s.unregister(h) {
		return nil
	}
	if err := h.s.deleteOwn(ctx, h.w); err != nil {
		h.s.l.background(func() { h.s.deleteUntilGone(h.w) })
		return fmt.Errorf("etcd: delete %s: still trying in the background: %w", h.w.path, err)
	}
	return nil
}

// deleteOwn deletes w's key if it is still the one w created. A waiter
// whose create answer was lost has no revision yet; its name, unique to it,
// is then enough.
func (s *session) deleteOwn(ctx context.Context, w *waiter) error {
	if w.rev == 0 {
		_, err := s.l.cli.Delete(ctx, w.path)
		return err
	}
	_, err := s.l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(w.path), "=", w.rev)).
		Then(clientv3.OpDelete(w.path)).
		Commit()
	return err
}
