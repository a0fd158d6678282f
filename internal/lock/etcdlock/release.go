package etcdlock

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockguard/stockguard/internal/lock"
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
		return fmt.Errorf("etcd: delete %s: %w: %w", h.w.path, lock.ErrCleanupPending, err)
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

// Releaser implements lock.BatchHandle: the leases of one session that a
// lock.Set releases together go in one transaction per maxTxnOps keys.
func (h *handle) Releaser() lock.BatchReleaser { return h.s }

// ReleaseBatch implements lock.BatchReleaser, as Release does each: a
// transaction deletes its keys only if every one still has its lease's
// create revision; if any has not (an error whose key we cannot tell), each
// key of that transaction is released on its own.
func (s *session) ReleaseBatch(ctx context.Context, hs []lock.Handle) error {
	var ws []*waiter
	var errs []error
	for _, lh := range hs {
		if h := lh.(*handle); s.unregister(h) { // lock.Set groups by Releaser: ours
			ws = append(ws, h.w)
		}
	}
	for start := 0; start < len(ws); start += maxTxnOps {
		chunk := ws[start:min(start+maxTxnOps, len(ws))]
		var cmps []clientv3.Cmp
		ops := make([]clientv3.Op, len(chunk))
		for i, w := range chunk {
			if w.rev != 0 {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(w.path), "=", w.rev))
			}
			ops[i] = clientv3.OpDelete(w.path)
		}
		resp, err := s.l.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err == nil && resp.Succeeded {
			continue
		}
		for _, w := range chunk {
			if err := s.deleteOwn(ctx, w); err != nil {
				s.l.background(func() { s.deleteUntilGone(w) })
				errs = append(errs, fmt.Errorf("etcd: delete %s: %w: %w", w.path, lock.ErrCleanupPending, err))
			}
		}
	}
	return errors.Join(errs...)
}
