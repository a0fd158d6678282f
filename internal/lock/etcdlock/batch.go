package etcdlock

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockguard/stockguard/internal/lock"
)

// maxTxnOps is etcd's default --max-txn-ops (128). The servers count a
// transaction as the largest of its compare, success and failure lists
// (compares count), and check each nested transaction against what its
// parent leaves: 128 less the parent's count. (TestTxnShapesFitMaxTxnOps
// checks these bounds against the servers.) A transaction of deletes, with
// or without a compare per delete, and a clean-up's tombstone puts among
// them, takes up to maxTxnOps.
const maxTxnOps = 128

// batchKeys is how many keys one batch transaction tries: the outer
// transaction has one compare (the batch's tombstone guard) and one nested
// transaction per key, each of one compare and one put, so n keys need
// n <= 128 and 1 <= 128 - n. A larger batch takes one transaction per this
// many keys: 400 keys, four.
const batchKeys = maxTxnOps - 1

// batch tries every key once. Each key is one nested transaction of a single
// outer one (per batchKeys keys): if the key's prefix is empty (the recipe's
// "we would be the oldest waiter", taken before writing), put our waiter key
// with the session lease. So a batch is one round trip, a key held elsewhere
// costs no write and leaves no waiter to delete, and each obtained key's
// token is the create revision of its waiter key, the transaction's
// revision, exactly as if acquired alone (tokens increase per key; keys of
// one batch share a value). The outer transaction is guarded by one
// tombstone for the whole batch (see guardCmp): one clean-up stops every
// put of it still in flight.
func (s *session) batch(ctx context.Context, keys []string) (lock.Batch, error) {
	guard := tombstone(uuid.New())
	var b lock.Batch
	var got []*waiter
	for start := 0; start < len(keys); start += batchKeys {
		chunk := keys[start:min(start+batchKeys, len(keys))]
		ws := make([]*waiter, len(chunk))
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ws[i] = s.newWaiter(k, guard)
			ops[i] = clientv3.OpTxn(
				[]clientv3.Cmp{freeCmp(k)},
				[]clientv3.Op{clientv3.OpPut(ws[i].path, "", clientv3.WithLease(s.id))},
				nil)
		}
		resp, err := s.commitWrite(ctx, func(c context.Context) clientv3.Txn {
			return s.l.cli.Txn(c).If(guardCmp(guard)).Then(ops...)
		})
		if resp != nil && resp.Succeeded {
			for i, r := range resp.Responses {
				if r.GetResponseTxn().GetSucceeded() {
					s.created(ws[i], resp.Header.Revision)
					got = append(got, ws[i])
				} else {
					s.forget(ws[i])
					b.Held = append(b.Held, chunk[i])
				}
			}
			ws = nil // answered: got has what stands
		} else if err == nil {
			err = errAbandoned
		}
		if err != nil {
			// Unanswered, any of this chunk's puts may yet be applied
			// (abandon's tombstone stops them); answered, the caller is gone.
			return lock.Batch{}, pending(s.classify(err), s.abandon(ctx, append(got, ws...)...))
		}
	}
	if len(got) == 0 {
		return b, nil
	}
	deadline, err := s.valid(ctx)
	if err != nil {
		return lock.Batch{}, pending(err, s.abandon(ctx, got...))
	}
	for i, w := range got {
		lease, err := s.grant(w, deadline)
		if err != nil {
			// The session ended (every key went with it) or someone deleted
			// w's key: let go of the rest, and start over.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			released := b.Leases.Release(rctx)
			cancel()
			if released != nil {
				err = fmt.Errorf("%w (%w)", err, released)
			}
			return lock.Batch{}, pending(err, s.abandon(ctx, got[i:]...))
		}
		s.l.m.queueDepth.Observe(0)
		b.Leases = append(b.Leases, lease)
	}
	return b, nil
}
