package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stockguard/stockguard/internal/lock"
)

// waiter is one acquisition's key in its key's queue.
type waiter struct {
	key  string // the lock key (a SKU)
	path string // Root/<key>/<lease hex>-<lease uuid>
	id   uuid.UUID
	rev  int64 // create revision of path: place in line, and the token once held
}

// newWaiter names a waiter key after the session lease (so an operator sees
// whose it is) and the lease's uuid (so two acquisitions in one session never
// share a key, which concurrency.Mutex's lease-only name would make them do).
func (s *session) newWaiter(key string) *waiter {
	id := uuid.New()
	return &waiter{key: key, path: fmt.Sprintf("%s%x-%s", prefix(key), s.id, id), id: id}
}

// cleanupTimeout bounds how long a failed Acquire waits for its own key to
// be deleted before it returns; the deletion goes on in the background.
const cleanupTimeout = 2 * time.Second

// acquire runs the recipe once in this session.
func (s *session) acquire(ctx context.Context, key string, o lock.Options) (*lock.Lease, error) {
	w := s.newWaiter(key)
	if o.TryOnce {
		ok, err := s.tryFirst(ctx, w)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, lock.ErrNotAcquired
		}
		s.l.m.queueDepth.Observe(0)
	} else {
		first, err := s.enqueue(ctx, w)
		if err == nil && !first {
			err = s.wait(ctx, w)
		}
		if err != nil {
			return nil, pending(err, s.abandon(ctx, w))
		}
	}
	deadline, err := s.valid(ctx)
	if err != nil {
		return nil, pending(err, s.abandon(ctx, w))
	}
	return s.grant(w, deadline)
}

// tryFirst creates w's key only if the key has no waiter at all, in one
// transaction: the range compare over the prefix is the recipe's verdict
// ("lowest create revision") taken before writing, so a try on a held key
// writes nothing and leaves nothing to delete.
func (s *session) tryFirst(ctx context.Context, w *waiter) (bool, error) {
	resp, err := s.commitWrite(ctx, func(c context.Context) clientv3.Txn {
		return s.l.cli.Txn(c).If(freeCmp(w.key)).Then(clientv3.OpPut(w.path, "", clientv3.WithLease(s.id)))
	})
	if err != nil {
		// The put may have been applied, its answer lost or its caller gone.
		return false, pending(s.classify(err), s.abandon(ctx, w))
	}
	if !resp.Succeeded {
		return false, nil
	}
	w.rev = resp.Header.Revision
	return true, nil
}

// commitWrite commits a transaction that may put a waiter key (txn builds
// it on the context given) on the caller's values without its
// cancellation, bounded by cleanupTimeout, and only then looks at the
// caller's context: a put the caller's context abandoned in flight can
// still be applied after the clean-up's delete has run, and leave a waiter
// key nobody serves in the key's line until the session ends. Every error
// (the caller's end included, answered or not) means the put may stand and
// its key must be deleted. A transaction that outlives the bound is the
// servers' failure, not the caller's deadline.
func (s *session) commitWrite(ctx context.Context, txn func(context.Context) clientv3.Txn) (*clientv3.TxnResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	resp, err := txn(wctx).Commit()
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil && wctx.Err() != nil:
		return nil, fmt.Errorf("%w: no answer within %v: %w", lock.ErrUnavailable, cleanupTimeout, err)
	}
	return resp, err
}

// freeCmp holds when no key exists under key's prefix (a range compare: every
// key in the range must have create revision 0, and an empty range does).
func freeCmp(key string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(prefix(key)), "=", 0).WithPrefix()
}

// enqueue creates w's key and, in the same transaction, reads the key's
// oldest waiter: when that is w, the lock is ours in one round trip. The
// read's count is every waiter key, w's (the newest) included: the others
// are the waiters ahead of w.
func (s *session) enqueue(ctx context.Context, w *waiter) (bool, error) {
	resp, err := s.commitWrite(ctx, func(c context.Context) clientv3.Txn {
		return s.l.cli.Txn(c).Then(
			clientv3.OpPut(w.path, "", clientv3.WithLease(s.id)),
			clientv3.OpGet(prefix(w.key), append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...))
	})
	if err != nil {
		return false, s.classify(err) // the caller deletes w's key
	}
	w.rev = resp.Header.Revision
	oldest := resp.Responses[1].GetResponseRange()
	s.l.m.queueDepth.Observe(float64(max(oldest.Count-1, 0)))
	return len(oldest.Kvs) == 0 || oldest.Kvs[0].CreateRevision == w.rev, nil
}

// wait returns once w is the oldest waiter of its key. Each pass reads w's
// own key (gone: the session ended) and its predecessor, the waiter with the
// highest create revision below w's, in one read-only transaction, then
// watches only that predecessor's key for its deletion, from the revision
// just after the read, so no deletion in between is missed. A key with a
// lower create revision can only disappear, never appear, so when there is
// no predecessor left w is first.
func (s *session) wait(ctx context.Context, w *waiter) error {
	predOpts := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(w.rev-1), clientv3.WithKeysOnly())
	for {
		resp, err := s.l.cli.Txn(ctx).Then(
			clientv3.OpGet(w.path, clientv3.WithKeysOnly()),
			clientv3.OpGet(prefix(w.key), predOpts...),
		).Commit()
		if err != nil {
			return s.classify(err)
		}
		if len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
			return errSessionGone // only the session's end (or an operator) deletes our key
		}
		pred := resp.Responses[1].GetResponseRange().Kvs
		if len(pred) == 0 {
			return nil
		}
		if err := s.watchDelete(ctx, string(pred[0].Key), resp.Header.Revision+1); err != nil {
			return err
		}
	}
}

// watchDelete returns when key is deleted at or after rev, or when the
// watch ends for another reason (then the caller reads again). The watch
// requires a leader, so a member cut off from the quorum cancels it instead
// of keeping us waiting on a deletion it will never hear of.
func (s *session) watchDelete(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.l.cli.Watch(wctx, key, clientv3.WithRev(rev), clientv3.WithFilterPut())
	s.l.m.waiting.Inc()
	defer s.l.m.waiting.Dec()
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Canceled {
				if err := ctx.Err(); err != nil {
					return err
				}
				return nil // compacted, leader lost, stream broken: read again
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					s.l.m.wakeups.Inc()
					return nil
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-s.ctx.Done():
			return errSessionGone
		}
	}
}

// abandon deletes the key of an acquisition that failed or was cancelled, so
// no waiter stands in line that nobody serves. The caller's context may be
// the reason it failed: the delete runs on its own, and goes on in the
// background if it does not finish in time. A session that ended took the
// key along already.
func (s *session) abandon(ctx context.Context, w *waiter) error {
	if s.isGone() {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	err := s.deleteOwn(cctx, w)
	if err == nil {
		return nil
	}
	s.l.background(func() { s.deleteUntilGone(w) })
	return fmt.Errorf("etcd: delete %s: %w: %w", w.path, lock.ErrCleanupPending, err)
}

// pending adds to err, a failed call's, that its clean-up goes on in the
// background (cleanup, from abandon), if it does.
func pending(err, cleanup error) error {
	if cleanup == nil {
		return err
	}
	return fmt.Errorf("%w (%w)", err, cleanup)
}

// deleteRetry spaces the retries of a clean-up delete.
const deleteRetry = 200 * time.Millisecond

// deleteUntilGone retries deleting w's key until it succeeds, the session
// ends (its lease then deletes the key), or the servers refuse the delete
// for good; the key then goes with the session.
func (s *session) deleteUntilGone(w *waiter) {
	for {
		ctx, cancel := context.WithTimeout(s.l.life, cleanupTimeout)
		err := s.deleteOwn(ctx, w)
		cancel()
		if err == nil {
			return
		}
		if refused(err) {
			s.l.log.Warn("etcd: waiter key cannot be deleted; it goes when the session ends", "key", w.path, "err", err)
			return
		}
		s.l.log.Warn("etcd: waiter key not deleted yet", "key", w.path, "err", err)
		select {
		case <-s.ctx.Done():
			return
		case <-s.l.life.Done():
			return
		case <-time.After(deleteRetry):
		}
	}
}

// refused reports whether the servers refused a request in a way no retry
// can mend: malformed or too large (etcd's own InvalidArgument errors, such
// as rpctypes.ErrRequestTooLarge, and gRPC's message size limit, which it
// reports as ResourceExhausted). etcd's ResourceExhausted errors (too many
// requests, no space) pass, and are retried.
func refused(err error) bool {
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		return etcdErr.Code() == codes.InvalidArgument
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.ResourceExhausted:
		return true
	}
	return false
}

// grant wraps w, now the oldest waiter of its key, in a Lease whose token is
// w's create revision and whose deadline is the session's, from valid. The
// lease's keepalive takes the session's later deadlines (Extend) every
// TTL/3: whatever the options, since the session renews for every lease.
func (s *session) grant(w *waiter, deadline time.Time) (*lock.Lease, error) {
	h := &handle{s: s, w: w}
	// handed is false for a lease never handed out: its end is not a lease
	// lost (stockguard_lock_leases_lost_total, which the chaos runs read).
	var handed atomic.Bool
	handed.Store(true)
	lease, lose := lock.NewLease(lock.LeaseParams{
		Key:      w.key,
		Token:    lock.Token(w.rev),
		ID:       w.id,
		Deadline: deadline,
		TTL:      s.ttl,
		Watchdog: true,
		Handle:   h,
		OnLost: func(error) {
			if handed.Load() {
				s.l.m.Lost()
			}
		},
	})
	if !s.register(h, lose) {
		// The session ended between the verdict and now: the key went with
		// it, and a lease handed out now would be born lost. Its keepalive
		// ends now, not at its first extension.
		handed.Store(false)
		lose(errSessionGone)
		return nil, errSessionGone
	}
	return lease, nil
}
