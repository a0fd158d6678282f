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
	"github.com/stockguard/stockguard/internal/lock/retry"
)

// waiter is one acquisition's key in its key's queue.
type waiter struct {
	key  string // the lock key (a SKU)
	path string // Root/<key>/<lease hex>-<lease uuid>
	id   uuid.UUID
	// guard names the tombstone whose existence stops the put of path (see
	// guardCmp): an acquisition's own, shared by the waiters of one batch.
	guard string
	// rev is the create revision of path: place in line, and the token once
	// held; 0 while the put's answer has not come (it may yet land).
	rev int64
	e   *entry // the session's record of path (see entry)
}

// newWaiter names a waiter key after the session lease (so an operator sees
// whose it is) and the lease's uuid (so two acquisitions in one session never
// share a key, which concurrency.Mutex's lease-only name would make them do),
// and has the session follow the key before its put is sent. guard is the
// batch's tombstone; "" gives the waiter one of its own.
func (s *session) newWaiter(key, guard string) *waiter {
	id := uuid.New()
	if guard == "" {
		guard = tombstone(id)
	}
	w := &waiter{key: key, path: fmt.Sprintf("%s%x-%s", prefix(key), s.id, id), id: id, guard: guard}
	w.e = s.track(w.path)
	return w
}

// tombstoneDir holds the tombstones of abandoned puts, outside Root so that
// no tombstone is ever in a key's line (a SKU may be called "abandoned").
const tombstoneDir = "/stockguard/etcdlock/abandoned/"

func tombstone(id uuid.UUID) string { return tombstoneDir + id.String() }

// guardCmp holds while the tombstone guard does not exist. Every transaction
// that puts a waiter key carries it, and a clean-up that cannot know whether
// the put was applied writes the tombstone in the transaction that deletes
// the key (see cleanUp). The put and the clean-up are then ordered by the
// cluster's one log: a put applied before the clean-up is deleted by it, a
// put applied after (held by a frozen member, say, while the caller gave up
// and the clean-up went elsewhere) finds the tombstone and writes nothing.
// So a late put is harmless, and nobody has to out-wait it.
//
// Tombstones live on the session lease, like the keys they guard: a put
// that lands after the session ended fails for want of its lease, so the
// tombstone need not outlive it. They are written only by the clean-up of
// a put whose answer never came (the caller's context ended while it was in
// flight, or the servers did not answer): a put answered, succeeded or not,
// needs none. Their number per session is that of such abandonments, not
// that of acquisitions: a few per fault, kept (a late put may land any time
// while the session lives) until the session ends, a small key each.
func guardCmp(guard string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(guard), "=", 0)
}

// Bounds of the requests a failed acquisition or a release makes.
const (
	// writeTimeout bounds the put of a waiter key when the caller's context
	// allows longer: no answer by then is the servers' failure.
	writeTimeout = 2 * time.Second
	// attemptTimeout bounds each attempt of a clean-up, a release delete or
	// a waiter's read, which are retried: a member that lost its leader
	// answers a request it forwarded to the dead one only at its own request
	// timeout, some 6 s, while the next attempt reaches the new leader.
	attemptTimeout = time.Second
	// cleanupTimeout bounds how long a failed call whose caller's context
	// is still running waits for its clean-up.
	cleanupTimeout = 2 * time.Second
	// cleanupGrace is how long past the caller's context a failed call waits
	// for its clean-up: about a round trip, so that a healthy cluster
	// confirms it, and far less than the second or two a frozen member
	// holds a request. The clean-up goes on in the background after it.
	cleanupGrace = 200 * time.Millisecond
	// retryPause is the first pause after an attempt the servers answered
	// with an error, maxRetryPause the cap of its doubling (see attempt);
	// jittered, a pause is half to one and a half of either.
	retryPause    = 100 * time.Millisecond
	maxRetryPause = time.Second
)

// acquire runs the recipe once in this session.
func (s *session) acquire(ctx context.Context, key string, o lock.Options) (*lock.Lease, error) {
	w := s.newWaiter(key, "")
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
	lease, err := s.grant(w, deadline)
	if err != nil {
		return nil, pending(err, s.abandon(ctx, w))
	}
	return lease, nil
}

// tryFirst creates w's key only if the key has no waiter at all, in one
// transaction: the range compare over the prefix is the recipe's verdict
// ("lowest create revision") taken before writing, so a try on a held key
// writes nothing and leaves nothing to delete.
func (s *session) tryFirst(ctx context.Context, w *waiter) (bool, error) {
	resp, err := s.commitWrite(ctx, func(c context.Context) clientv3.Txn {
		return s.l.cli.Txn(c).If(freeCmp(w.key), guardCmp(w.guard)).Then(clientv3.OpPut(w.path, "", clientv3.WithLease(s.id)))
	})
	if resp != nil && !resp.Succeeded {
		s.forget(w) // held: nothing written
		return false, err
	}
	if resp != nil {
		s.created(w, resp.Header.Revision)
	}
	if err != nil {
		// Unanswered, the put may yet be applied (abandon's tombstone
		// stops it); answered, the caller is gone and w's key must go.
		return false, pending(s.classify(err), s.abandon(ctx, w))
	}
	return true, nil
}

// commitWrite commits a transaction that may put a waiter key (txn builds
// it on the context given) on the caller's context, bounded by writeTimeout.
// It returns the response whenever one came, with the caller's error if the
// caller's context ended meanwhile; an error without a response means the
// put may or may not be applied, now or later (the waiter's guard makes a
// later one harmless once abandoned).
func (s *session) commitWrite(ctx context.Context, txn func(context.Context) clientv3.Txn) (*clientv3.TxnResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	resp, err := txn(wctx).Commit()
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil && wctx.Err() != nil:
		return nil, fmt.Errorf("%w: no answer within %v: %w", lock.ErrUnavailable, writeTimeout, err)
	case err != nil:
		return nil, err
	case ctx.Err() != nil:
		return resp, ctx.Err()
	}
	return resp, nil
}

// errAbandoned is a put refused by its tombstone: the waiter was abandoned
// before its put was answered, which its caller never waits for.
var errAbandoned = errors.New("waiter abandoned")

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
		return s.l.cli.Txn(c).If(guardCmp(w.guard)).Then(
			clientv3.OpPut(w.path, "", clientv3.WithLease(s.id)),
			clientv3.OpGet(prefix(w.key), append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...))
	})
	if resp != nil && resp.Succeeded {
		s.created(w, resp.Header.Revision)
	}
	switch {
	case err != nil:
		return false, s.classify(err) // the caller deletes w's key
	case !resp.Succeeded:
		return false, errAbandoned
	}
	oldest := resp.Responses[1].GetResponseRange()
	s.l.m.queueDepth.Observe(float64(max(oldest.Count-1, 0)))
	return len(oldest.Kvs) == 0 || oldest.Kvs[0].CreateRevision == w.rev, nil
}

// wait returns once w is the oldest waiter of its key. Each pass reads w's
// own key (gone: the session ended, or someone deleted it) and its
// predecessor, the waiter with the highest create revision below w's, in
// one read-only transaction, then watches only that predecessor's key for
// its deletion, from the revision just after the read, so no deletion in
// between is missed. A key with a lower create revision can only disappear,
// never appear, so when there is no predecessor left w is first. The read
// is bounded and retried (see attempt): a frozen member holds one attempt,
// not the wait.
func (s *session) wait(ctx context.Context, w *waiter) error {
	s.l.m.waiting.Inc()
	defer s.l.m.waiting.Dec()
	predOpts := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(w.rev-1), clientv3.WithKeysOnly())
	for {
		resp, err := attempt(ctx, s, func(c context.Context, via caller) (*clientv3.TxnResponse, error) {
			return via.Txn(c).Then(
				clientv3.OpGet(w.path, clientv3.WithKeysOnly()),
				clientv3.OpGet(prefix(w.key), predOpts...),
			).Commit()
		})
		if err != nil {
			return err
		}
		if len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
			return s.classify(errKeyGone)
		}
		pred := resp.Responses[1].GetResponseRange().Kvs
		if len(pred) == 0 {
			return nil
		}
		if err := s.watchDelete(ctx, w, string(pred[0].Key), resp.Header.Revision+1); err != nil {
			return err
		}
	}
}

// watchDelete returns when key is deleted at or after rev, or when the
// watch ends for another reason (then the caller reads again), among them
// w's own key deleted (the session's watch tells) and s.silence() gone by.
// The watch requires a leader, so a member cut off from the quorum cancels
// it instead of keeping us waiting on a deletion it will never hear of. A
// frozen member cancels nothing, nor answers the watch's creation, which
// Watch waits for: the silence bound covers both, and the read that
// follows, retried, reaches a live member. The next watch may well sit on
// the frozen one again: the client carries the Locker's watches on one
// stream, kept on its member until gRPC's keepalive drops the connection.
func (s *session) watchDelete(ctx context.Context, w *waiter, key string, rev int64) error {
	wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), s.silence())
	defer cancel()
	wch := s.l.cli.Watch(wctx, key, clientv3.WithRev(rev), clientv3.WithFilterPut())
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Canceled {
				if err := ctx.Err(); err != nil {
					return err
				}
				return nil // silent, compacted, leader lost, stream broken: read again
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					s.l.m.wakeups.Inc()
					return nil
				}
			}
		case <-w.e.gone:
			return nil // our own key: the read says so
		case <-ctx.Done():
			return ctx.Err()
		case <-s.ctx.Done():
			return errSessionGone
		}
	}
}

// abandon undoes what a failed acquisition of ws may have left: the keys
// whose put was answered, and those whose put may yet land, stopped by
// their tombstone (see guardCmp). The clean-up runs in the background (see
// cleanUp); abandon waits for it while the caller's context runs, at most
// cleanupTimeout, and no more than cleanupGrace past that context's end, so
// a failed call returns about when its caller asked. Unconfirmed by then,
// the error wraps lock.ErrCleanupPending and the clean-up goes on. A
// session that ended took the keys along already.
func (s *session) abandon(ctx context.Context, ws ...*waiter) error {
	if len(ws) == 0 {
		return nil
	}
	s.forget(ws...) // their deletions are ours, not a loss
	if s.isGone() {
		return nil
	}
	done := make(chan error, 1)
	if !s.l.background(func() { done <- s.cleanUp(ws) }) {
		return nil // the Locker closed: its revoked session took every key
	}
	cctx, cancel := lock.CleanupContext(ctx, cleanupTimeout, cleanupGrace)
	defer cancel()
	var err error
	select {
	case err = <-done:
	case <-cctx.Done():
		err = lock.CleanupEnd(cctx)
	}
	if err == nil {
		return nil
	}
	return fmt.Errorf("etcd: delete %d waiter keys (%s…): %w: %w", len(ws), ws[0].path, lock.ErrCleanupPending, err)
}

// pending adds to err, a failed call's, that its clean-up goes on in the
// background (cleanup, from abandon), if it does.
func pending(err, cleanup error) error {
	if cleanup == nil {
		return err
	}
	return fmt.Errorf("%w (%w)", err, cleanup)
}

// cleanUp deletes the keys of ws, and first writes the tombstone of every
// waiter whose put was never answered, so that it can land no more: in the
// first transaction, which also carries the first deletions, so neither
// waits for the other. Each transaction is retried until it succeeds (they
// are all safe to repeat), the session ends (its lease takes every key), or
// the servers refuse it for good (the keys then go with the session); only
// the last returns an error.
func (s *session) cleanUp(ws []*waiter) error {
	var ops []clientv3.Op
	guards := map[string]bool{}
	for _, w := range ws {
		if w.rev == 0 && !guards[w.guard] {
			guards[w.guard] = true
			ops = append(ops, clientv3.OpPut(w.guard, "", clientv3.WithLease(s.id)))
		}
	}
	for _, w := range ws {
		// By name: unique to w, and with its tombstone in place no late put
		// can write it again.
		ops = append(ops, clientv3.OpDelete(w.path))
	}
	for start := 0; start < len(ops); start += maxTxnOps {
		chunk := ops[start:min(start+maxTxnOps, len(ops))]
		err := s.retry(s.ctx, func(ctx context.Context, via caller) error {
			_, err := via.Txn(ctx).Then(chunk...).Commit()
			return err
		})
		if err != nil {
			s.l.log.Warn("etcd: waiter keys cannot be deleted; they go when the session ends", "keys", len(ws), "err", err)
			return err
		}
	}
	return nil
}

// retry runs op, a request safe to repeat and to run twice at once, as
// attempt does, and takes the session's end for success: its lease takes
// the keys op would delete.
func (s *session) retry(ctx context.Context, op func(context.Context, caller) error) error {
	_, err := attempt(ctx, s, func(c context.Context, via caller) (struct{}, error) { return struct{}{}, op(c, via) })
	if errors.Is(err, errSessionGone) {
		return nil
	}
	return err
}

// attempt runs op, a request safe to repeat and to run twice at once, each
// attempt bounded by attemptTimeout, until it succeeds, ctx ends, the
// session ends (errSessionGone, at once: the attempt in flight is
// cancelled, a pause cut short) or the servers refuse it in a way no retry
// can mend; it returns the last attempt's error, classified.
//
// The first attempt is one call through the balanced client. An attempt
// no member answered in time may have sat on a frozen member: the next
// goes out at once, as two calls on two members (see members). An answered
// error (no leader, too many requests) is the cluster's, not one member's:
// the next attempt is one call again, after a pause that doubles from
// retryPause up to maxRetryPause, jittered, so that an overloaded cluster
// gets fewer calls, not more.
func attempt[T any](ctx context.Context, s *session, op func(context.Context, caller) (T, error)) (T, error) {
	via := []caller{s.l.cli}
	pause := retryPause
	for {
		// The session's end ends the attempt at once (a wait must not
		// outlive its session by an attempt), hooked on the attempt's own
		// context: a context of its own for the whole call cost every wait
		// read and release five allocations more.
		actx, cancelAttempt := context.WithTimeout(ctx, attemptTimeout)
		stop := context.AfterFunc(s.ctx, cancelAttempt)
		v, err := race(actx, via, op)
		unanswered := actx.Err() != nil && s.ctx.Err() == nil
		stop()
		cancelAttempt()
		if err == nil {
			return v, nil
		}
		if err = s.classify(err); errors.Is(err, errSessionGone) || refused(err) || ctx.Err() != nil {
			return v, err
		}
		if unanswered {
			s.l.log.Debug("etcd: request not answered in time; trying two members at once", "err", err)
			via = s.l.members.pair()
			continue
		}
		s.l.log.Debug("etcd: request failed; trying again", "err", err, "pause", pause)
		via = []caller{s.l.cli}
		// The session's end cuts the pause short too, as it does an attempt.
		t := time.NewTimer(retry.Jitter(pause))
		select {
		case <-t.C:
		case <-ctx.Done():
		case <-s.ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil || s.ctx.Err() != nil {
			return v, s.classify(err)
		}
		pause = min(2*pause, maxRetryPause)
	}
}

// race makes one call of op through each of via at once and returns the
// first success, or the first error once every call failed; the calls
// still out are cancelled.
func race[T any](ctx context.Context, via []caller, op func(context.Context, caller) (T, error)) (T, error) {
	if len(via) == 1 {
		return op(ctx, via[0])
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		v   T
		err error
	}
	answers := make(chan answer, len(via))
	for _, c := range via {
		go func() {
			v, err := op(ctx, c)
			answers <- answer{v, err}
		}()
	}
	var first answer
	for i := range via {
		a := <-answers
		if a.err == nil {
			return a.v, nil
		}
		if i == 0 {
			first = a
		}
	}
	return first.v, first.err
}

// deleteUntilGone retries deleting w's key until it succeeds, the session
// ends (its lease then deletes the key), or the servers refuse the delete
// for good; the key then goes with the session.
func (s *session) deleteUntilGone(w *waiter) {
	if err := s.retry(s.ctx, func(ctx context.Context, via caller) error { return s.deleteOwn(ctx, via, w) }); err != nil {
		s.l.log.Warn("etcd: waiter key cannot be deleted; it goes when the session ends", "key", w.path, "err", err)
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
	if err := s.register(h, lose); err != nil {
		// The session ended between the verdict and now, taking the key,
		// or someone deleted the key: a lease handed out now would be born
		// lost. Its keepalive ends now, not at its first extension.
		handed.Store(false)
		lose(err)
		return nil, err
	}
	return lease, nil
}
