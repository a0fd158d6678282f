package etcdlock

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockguard/stockguard/internal/lock"
)

// maxTxnOps is etcd's default --max-txn-ops (128), the most operations one
// transaction may carry. A nested transaction may use only what its parent
// leaves, so a transaction of n nested ones of two operations each must keep
// n + 2 within it; half is a round bound with room to spare. A larger batch
// takes one transaction per this many keys.
const maxTxnOps = 64

// batch tries every key once. Each key is one nested transaction of a single
// outer one (per maxTxnOps keys): if the key's prefix is empty (the recipe's "we would be the
// oldest waiter", taken before writing), put our waiter key with the session
// lease. So a batch is one round trip, a key held elsewhere costs no write
// and leaves no waiter to delete, and each obtained key's token is the create
// revision of its waiter key, the transaction's revision, exactly as if
// acquired alone (tokens increase per key; keys of one batch share a value).
func (s *session) batch(ctx context.Context, keys []string) (lock.Batch, error) {
	var b lock.Batch
	var got []*waiter
	for start := 0; start < len(keys); start += maxTxnOps {
		chunk := keys[start:min(start+maxTxnOps, len(keys))]
		ws := make([]*waiter, len(chunk))
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ws[i] = s.newWaiter(k)
			ops[i] = clientv3.OpTxn(
				[]clientv3.Cmp{freeCmp(k)},
				[]clientv3.Op{clientv3.OpPut(ws[i].path, "", clientv3.WithLease(s.id))},
				nil)
		}
		resp, err := s.commitWrite(ctx, func(c context.Context) clientv3.Txn { return s.l.cli.Txn(c).Then(ops...) })
		if err != nil {
			// Any of this chunk's puts may have been applied, the answer
			// lost or the caller gone (commitWrite).
			return lock.Batch{}, pending(s.classify(err), s.abandonAll(ctx, append(got, ws...)))
		}
		for i, r := range resp.Responses {
			if r.GetResponseTxn().GetSucceeded() {
				ws[i].rev = resp.Header.Revision
				got = append(got, ws[i])
			} else {
				b.Held = append(b.Held, chunk[i])
			}
		}
	}
	if len(got) == 0 {
		return b, nil
	}
	deadline, err := s.valid(ctx)
	if err != nil {
		return lock.Batch{}, pending(err, s.abandonAll(ctx, got))
	}
	for _, w := range got {
		lease, err := s.grant(w, deadline)
		if err != nil {
			// The session ended: every key went with it, granted or not.
			_ = b.Leases.Release(context.WithoutCancel(ctx))
			return lock.Batch{}, err
		}
		s.l.m.queueDepth.Observe(0)
		b.Leases = append(b.Leases, lease)
	}
	return b, nil
}

// abandonAll deletes the keys of a failed batch in one transaction (etcd
// refuses duplicate keys in one, which ours never are), falling back to one
// clean-up per key if that fails.
func (s *session) abandonAll(ctx context.Context, ws []*waiter) error {
	if len(ws) == 0 || s.isGone() {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var errs []error
	for start := 0; start < len(ws); start += maxTxnOps {
		chunk := ws[start:min(start+maxTxnOps, len(ws))]
		ops := make([]clientv3.Op, len(chunk))
		for i, w := range chunk {
			ops[i] = clientv3.OpDelete(w.path)
		}
		if _, err := s.l.cli.Txn(cctx).Then(ops...).Commit(); err != nil {
			errs = append(errs, err)
			for _, w := range chunk {
				s.l.background(func() { s.deleteUntilGone(w) })
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.l.log.Info("etcd: batch clean-up goes on in the background", "keys", len(ws), "err", fmt.Sprint(err))
		return fmt.Errorf("etcd: delete %d keys: %w: %w", len(ws), lock.ErrCleanupPending, err)
	}
	return nil
}
