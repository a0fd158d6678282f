package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockguard/stockguard/internal/lock"
)

// releaseTimeout bounds a release whose context allows longer: its delete
// then goes on in the background.
const releaseTimeout = 3 * time.Second

// handle is a granted lease's hold on its waiter key.
type handle struct {
	s *session
	w *waiter
}

// Release implements lock.Handle. A lease lost with its session, or whose
// key someone deleted, has nothing left to delete. Otherwise the key is
// deleted only if its create revision is still the lease's token: whatever
// stands at that name now (re-created after the session ended, by anyone)
// belongs to someone else, and a release must never free another holder's
// lock. Each attempt is bounded by attemptTimeout and retried (a member
// that lost its leader holds a request until its own timeout, some 6 s)
// within ctx and releaseTimeout; after that the delete goes on in the
// background until it succeeds or the session ends.
func (h *handle) Release(ctx context.Context) error {
	if !h.s.unregister(h) && h.s.isGone() {
		return nil
	}
	// A lease lost while its session lives had its key deleted by someone,
	// as far as the Locker can tell; deleted again (a no-op then: the
	// compare on its create revision), a key wrongly thought gone does not
	// stay on a live session, blocking its SKU for every instance.
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	if err := h.s.retry(ctx, func(c context.Context, via caller) error { return h.s.deleteOwn(c, via, h.w) }); err != nil {
		h.s.l.background(func() { h.s.deleteUntilGone(h.w) })
		return fmt.Errorf("etcd: delete %s: %w: %w", h.w.path, lock.ErrCleanupPending, err)
	}
	return nil
}

// deleteOwn deletes w's key if it is still the one w created. A waiter
// whose create answer was lost has no revision yet; its name, unique to it,
// is then enough.
func (s *session) deleteOwn(ctx context.Context, via caller, w *waiter) error {
	if w.rev == 0 {
		_, err := via.Delete(ctx, w.path)
		return err
	}
	_, err := via.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(w.path), "=", w.rev)).
		Then(clientv3.OpDelete(w.path)).
		Commit()
	return err
}

// Releaser implements lock.BatchHandle: the leases of one session that a
// lock.Set releases together go in one transaction per maxTxnOps keys.
func (h *handle) Releaser() lock.BatchReleaser { return h.s }

// ReleaseBatch implements lock.BatchReleaser, as Release does each: a
// transaction (n compares, n deletes: up to maxTxnOps keys) deletes its keys
// only if every one still has its lease's create revision; if any has not,
// each key of that transaction is released on its own. Attempts are
// bounded and retried as Release's are.
func (s *session) ReleaseBatch(ctx context.Context, hs []lock.Handle) error {
	var ws []*waiter
	var errs []error
	for _, lh := range hs {
		if h := lh.(*handle); s.unregister(h) || !s.isGone() { // lock.Set groups by Releaser: ours; as Release does
			ws = append(ws, h.w)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
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
		var together atomic.Bool // an attempt may run twice at once (see attempt)
		err := s.retry(ctx, func(c context.Context, via caller) error {
			resp, err := via.Txn(c).If(cmps...).Then(ops...).Commit()
			if err == nil && resp.Succeeded {
				together.Store(true)
			}
			return err
		})
		if together.Load() {
			continue
		}
		for _, w := range chunk {
			kerr := err
			if kerr == nil {
				// A key no longer ours (or gone): each on its own.
				kerr = s.retry(ctx, func(c context.Context, via caller) error { return s.deleteOwn(c, via, w) })
			}
			if kerr != nil {
				s.l.background(func() { s.deleteUntilGone(w) })
				errs = append(errs, fmt.Errorf("etcd: delete %s: %w: %w", w.path, lock.ErrCleanupPending, kerr))
			}
		}
	}
	return errors.Join(errs...)
}
