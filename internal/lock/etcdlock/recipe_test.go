package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// N waiters queue behind a holder; each release wakes exactly one of them
// (the one whose predecessor was deleted), never the whole queue. The
// session's TTL keeps the waits (about half a second for the last) under
// the silence bound (TTL/4, less up to TTL/16), past which a waiter reads
// again and may find its turn by that read, not by a watch event.
func TestReleaseWakesOnlyTheSuccessor(t *testing.T) {
	const n = 5
	l := mustLocker(t, WithRegisterer(prometheus.NewRegistry()), WithSessionTTL(10*time.Second))
	key := locktest.Key(t)
	holder := locktest.MustAcquire(t, l, key)

	got := make(chan *lock.Lease, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lease, err := l.Acquire(ctx, key)
			if err != nil {
				t.Errorf("waiter: %v", err)
				return
			}
			got <- lease
		})
	}
	if !eventually(10*time.Second, func() bool { return testutil.ToFloat64(l.m.waiting) == n }) {
		t.Fatalf("%v waiters watching, want %d", testutil.ToFloat64(l.m.waiting), n)
	}
	next := holder
	for i := range n {
		before := testutil.ToFloat64(l.m.wakeups)
		locktest.MustRelease(t, next)
		select {
		case next = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("release %d woke no waiter", i)
		}
		// Give any other watcher time to fire if the release had woken it.
		time.Sleep(100 * time.Millisecond)
		if woke := testutil.ToFloat64(l.m.wakeups) - before; woke != 1 {
			t.Fatalf("release %d woke %v waiters, want 1", i, woke)
		}
		if w := testutil.ToFloat64(l.m.waiting); w != float64(n-1-i) {
			t.Fatalf("after release %d: %v still watching, want %d", i, w, n-1-i)
		}
		select {
		case extra := <-got:
			t.Fatalf("two waiters hold %s at once (tokens %d and %d)", key, next.Token(), extra.Token())
		default:
		}
	}
	locktest.MustRelease(t, next)
	wg.Wait()
}

// A release deletes its key only while the key's create revision is the
// lease's token: a key re-created at the same name after the session ended
// is someone else's, and survives the stale holder's release.
func TestReleaseComparesCreateRevision(t *testing.T) {
	insp := inspector(t)
	l := mustLocker(t)
	key := locktest.Key(t)
	lease := locktest.MustAcquire(t, l, key)
	name := waiters(t, insp, key)
	if len(name) != 1 {
		t.Fatalf("waiter keys %q, want the holder's only", name)
	}
	h := &handle{s: l.cur, w: &waiter{key: key, path: name[0], rev: int64(lease.Token())}}

	// The same name, written again by someone else after a delete: a new
	// create revision.
	ctx := context.Background()
	if _, err := insp.Delete(ctx, name[0]); err != nil {
		t.Fatal(err)
	}
	put, err := insp.Put(ctx, name[0], "someone else")
	if err != nil {
		t.Fatal(err)
	}
	if put.Header.Revision <= int64(lease.Token()) {
		t.Fatalf("re-created key's revision %d not above the token %d", put.Header.Revision, lease.Token())
	}
	if err := l.cur.deleteOwn(ctx, l.cli, h.w); err != nil {
		t.Fatalf("stale release: %v", err)
	}
	if got := waiters(t, insp, key); len(got) != 1 {
		t.Fatalf("the stale holder's release deleted the newer key: left %q", got)
	}
	if _, err := insp.Delete(ctx, name[0]); err != nil {
		t.Fatal(err)
	}
	locktest.MustRelease(t, lease)
}

// Cancelled and timed-out waiters delete their own keys, so after the holder
// releases nothing is left under the key's prefix.
func TestCancelledWaitersLeaveNoKey(t *testing.T) {
	insp := inspector(t)
	l, other := mustLocker(t), mustLocker(t)
	key := locktest.Key(t)
	holder := locktest.MustAcquire(t, l, key)

	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			locker := l
			if i%2 == 1 {
				locker = other
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(100+50*i)*time.Millisecond)
			defer cancel()
			if _, err := locker.Acquire(ctx, key); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("waiter %d: %v, want DeadlineExceeded", i, err)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := other.Acquire(ctx, key)
		done <- err
	}()
	if !eventually(5*time.Second, func() bool { return len(waiters(t, insp, key)) >= 2 }) {
		t.Fatal("the cancelled waiter never queued")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
	}
	wg.Wait()
	if got := waiters(t, insp, key); len(got) != 1 {
		t.Fatalf("keys under the prefix after the waiters gave up: %q, want the holder's only", got)
	}
	locktest.MustRelease(t, holder)
	if got := waiters(t, insp, key); len(got) != 0 {
		t.Fatalf("keys left after the release: %q", got)
	}
}

// A batch writes nothing for a held key: the holder's key stays the only one
// under that prefix, and the free keys' tokens are the batch transaction's
// revision.
func TestBatchWritesNothingForHeldKeys(t *testing.T) {
	insp := inspector(t)
	holder, l := mustLocker(t), mustLocker(t)
	base := locktest.Key(t)
	held := locktest.MustAcquire(t, holder, base+"-b")
	b := locktest.MustBatch(t, l, []string{base + "-a", base + "-b", base + "-c"})
	if len(b.Held) != 1 || len(b.Leases) != 2 {
		t.Fatalf("batch got %d leases, held %q", len(b.Leases), b.Held)
	}
	if got := waiters(t, insp, base+"-b"); len(got) != 1 {
		t.Fatalf("keys under the held key's prefix: %q, want the holder's only", got)
	}
	if b.Leases[0].Token() != b.Leases[1].Token() || b.Leases[0].Token() <= held.Token() {
		t.Fatalf("tokens %d, %d: want one transaction's revision, above the holder's %d",
			b.Leases[0].Token(), b.Leases[1].Token(), held.Token())
	}
	ctx := context.Background()
	resp, err := insp.Get(ctx, prefix(base+"-a"), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != int64(b.Leases[0].Token()) ||
		resp.Kvs[0].Lease != int64(sessionLease(l)) {
		t.Fatalf("batch key of -a: %v, %v; want one key at the token's revision on the session lease", resp, err)
	}
	for _, lease := range b.Leases {
		locktest.MustRelease(t, lease)
	}
	locktest.MustRelease(t, held)
}

// More keys than one transaction may carry take several, still one lease per key.
func TestBatchLargerThanOneTransaction(t *testing.T) {
	l := mustLocker(t)
	base := locktest.Key(t)
	keys := make([]string, 2*batchKeys+10)
	for i := range keys {
		keys[i] = base + "-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	b := locktest.MustBatch(t, l, keys)
	if len(b.Leases) != len(keys) || len(b.Held) != 0 {
		t.Fatalf("batch of %d got %d leases, held %d", len(keys), len(b.Leases), len(b.Held))
	}
	if b.Leases[0].Token() == b.Leases[len(keys)-1].Token() {
		t.Fatal("one token for all: the batch did not take several transactions")
	}
	if err := b.Leases.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A Set released together deletes its keys in one transaction per
// maxTxnOps keys: the watch sees every delete at one revision.
func TestBatchReleaseIsOneTransaction(t *testing.T) {
	l := mustLocker(t)
	insp := inspector(t)
	base := locktest.Key(t)
	keys := make([]string, 10)
	for i := range keys {
		keys[i] = base + "-" + string(rune('a'+i))
	}
	b := locktest.MustBatch(t, l, keys)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The watch starts after the batch's creates: it sees only the release.
	w := insp.Watch(ctx, Root+"/"+base+"-", clientv3.WithPrefix(), clientv3.WithRev(int64(b.Leases[0].Token())+1))
	if err := b.Leases.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	revs := map[int64]int{}
	for deleted := 0; deleted < len(keys); {
		select {
		case resp := <-w:
			if err := resp.Err(); err != nil {
				t.Fatal(err)
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					revs[ev.Kv.ModRevision]++
					deleted++
				}
			}
		case <-ctx.Done():
			t.Fatalf("saw %d of %d deletes", deleted, len(keys))
		}
	}
	if len(revs) != 1 {
		t.Fatalf("deletes at revisions %v, want one transaction", revs)
	}
}

// The queue depth of a new waiter is the waiters ahead of it: the holder
// and those who queued before, not itself or those who came after.
func TestQueueDepthCountsWaitersAhead(t *testing.T) {
	const n = 3
	reg := prometheus.NewRegistry()
	insp := inspector(t)
	l := mustLocker(t, WithRegisterer(reg))
	key := locktest.Key(t)
	holder := locktest.MustAcquire(t, l, key)
	got := make(chan *lock.Lease, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lease, err := l.Acquire(ctx, key)
			if err != nil {
				t.Errorf("waiter: %v", err)
				return
			}
			got <- lease
		})
		if !eventually(10*time.Second, func() bool { return len(waiters(t, insp, key)) == i+2 }) {
			t.Fatalf("waiter %d never queued", i)
		}
	}
	// A waiter's key shows on the cluster a moment before the waiter
	// records where it stood: wait for the samples, not just the keys.
	var count uint64
	var sum float64
	eventually(10*time.Second, func() bool {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "stockguard_etcd_queue_depth" {
				h := mf.GetMetric()[0].GetHistogram()
				count, sum = h.GetSampleCount(), h.GetSampleSum()
			}
		}
		return count >= n+1
	})
	if count != n+1 || sum != 0+1+2+3 {
		t.Errorf("queue depth: %d samples summing to %v; want %d summing to 6 (0, 1, 2 and 3 ahead)", count, sum, n+1)
	}
	next := holder
	for range n {
		locktest.MustRelease(t, next)
		next = <-got
	}
	locktest.MustRelease(t, next)
	wg.Wait()
}

// A key longer than maxKeyLen is invalid, however the servers would take
// it; a full transaction of keys of the largest length fits.
func TestKeyLengthBound(t *testing.T) {
	l := mustLocker(t)
	base := locktest.Key(t)
	for _, n := range []int{maxKeyLen + 1, 1600 << 10} {
		key := base + strings.Repeat("x", n-len(base))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := l.Acquire(ctx, key, lock.TryOnce())
		cancel()
		if !errors.Is(err, lock.ErrInvalidKey) {
			t.Errorf("Acquire of a %d-byte key = %.200v, want ErrInvalidKey", n, err)
		}
		if _, err := l.AcquireBatch(context.Background(), []string{base, key}); !errors.Is(err, lock.ErrInvalidKey) {
			t.Errorf("batch with a %d-byte key = %.200v, want ErrInvalidKey", n, err)
		}
	}
	keys := make([]string, batchKeys)
	for i := range keys {
		k := fmt.Sprintf("%s-%02d-", base, i)
		keys[i] = k + strings.Repeat("x", maxKeyLen-len(k))
	}
	b := locktest.MustBatch(t, l, keys)
	if len(b.Leases) != len(keys) {
		t.Fatalf("batch of %d keys of %d bytes: %d leases, held %d", len(keys), maxKeyLen, len(b.Leases), len(b.Held))
	}
	if err := b.Leases.Release(context.Background()); err != nil {
		t.Fatalf("release of %d keys of %d bytes: %v", len(keys), maxKeyLen, err)
	}
	locktest.MustRelease(t, locktest.MustAcquire(t, l, keys[0]))
}

// A clean-up the servers refuse for good (too large for them, or for gRPC)
// stops instead of retrying until the session ends.
func TestCleanupStopsWhenRefused(t *testing.T) {
	l := mustLocker(t)
	s, err := l.session(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1600 << 10, 2500 << 10} { // past --max-request-bytes; past gRPC's 2 MiB
		w := &waiter{key: "k", path: prefix(locktest.Key(t)) + strings.Repeat("y", n)}
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.deleteUntilGone(w)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("clean-up of a %d-byte key still retrying after 10 s", n)
		}
	}
}

func TestRefused(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{rpctypes.ErrRequestTooLarge, true},
		{fmt.Errorf("delete: %w", rpctypes.ErrTooManyOps), true},
		{status.Error(codes.ResourceExhausted, "grpc: trying to send message larger than max"), true},
		{status.Error(codes.InvalidArgument, "bad"), true},
		{rpctypes.ErrTooManyRequests, false},
		{rpctypes.ErrNoSpace, false},
		{rpctypes.ErrNoLeader, false},
		{status.Error(codes.Unavailable, "connection refused"), false},
		{context.DeadlineExceeded, false},
	} {
		if got := refused(c.err); got != c.want {
			t.Errorf("refused(%v) = %t, want %t", c.err, got, c.want)
		}
	}
}

// TestGrantAfterTheSessionEndedCountsNoLoss: a waiter granted just as its
// session ended gets no lease (it would be born lost), and the lease never
// handed out is not counted lost when its keepalive would have run
// (stockguard_lock_leases_lost_total, which the chaos runs read).
func TestGrantAfterTheSessionEndedCountsNoLoss(t *testing.T) {
	reg := prometheus.NewRegistry()
	l := mustLocker(t, WithRegisterer(reg))
	s, err := l.session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	l.giveUp(s, errClosed) // errClosed: no session counted lost either
	if _, err := s.grant(s.newWaiter(locktest.Key(t), ""), time.Now().Add(testTTL)); !errors.Is(err, errSessionGone) {
		t.Fatalf("grant in an ended session = %v, want errSessionGone", err)
	}
	time.Sleep(testTTL/3 + 300*time.Millisecond) // past the keepalive's first extension
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "stockguard_lock_leases_lost_total" {
			if n := mf.GetMetric()[0].GetCounter().GetValue(); n != 0 {
				t.Fatalf("%v leases counted lost; want 0", n)
			}
		}
	}
}

// A batch takes as few transactions as the servers' --max-txn-ops (128)
// allows: 127 keys in one, 400 in four.
func TestBatchChunksFillATransaction(t *testing.T) {
	l := mustLocker(t)
	for _, c := range []struct{ keys, txns int }{{127, 1}, {400, 4}} {
		base := locktest.Key(t)
		keys := make([]string, c.keys)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s-%03d", base, i)
		}
		b := locktest.MustBatch(t, l, keys)
		if len(b.Leases) != len(keys) {
			t.Fatalf("batch of %d: %d leases, held %d", len(keys), len(b.Leases), len(b.Held))
		}
		revs := map[lock.Token]bool{}
		for _, lease := range b.Leases {
			revs[lease.Token()] = true
		}
		if len(revs) != c.txns {
			t.Errorf("batch of %d keys took %d transactions, want %d", len(keys), len(revs), c.txns)
		}
		if err := b.Leases.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTxnShapesFitMaxTxnOps checks against the servers the bounds the
// transactions are built to (etcd's default --max-txn-ops, 128; compares
// count, and a nested transaction gets what its parent leaves): a batch of
// batchKeys keys, one more refused; a clean-up of maxTxnOps operations
// (tombstone puts and deletes); a batch release of maxTxnOps keys, each
// with its compare.
func TestTxnShapesFitMaxTxnOps(t *testing.T) {
	insp := inspector(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	grant, err := insp.Grant(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer insp.Revoke(context.Background(), grant.ID)
	base := locktest.Key(t)
	path := func(i int) string { return fmt.Sprintf("%s/%s-%03d/w", Root, base, i) }
	guard := tombstone(uuid.New())
	batch := func(n int) error {
		ops := make([]clientv3.Op, n)
		for i := range ops {
			k := fmt.Sprintf("%s-%03d", base, i)
			ops[i] = clientv3.OpTxn([]clientv3.Cmp{freeCmp(k)},
				[]clientv3.Op{clientv3.OpPut(path(i), "", clientv3.WithLease(grant.ID))}, nil)
		}
		_, err := insp.Txn(ctx).If(guardCmp(guard)).Then(ops...).Commit()
		return err
	}
	if err := batch(batchKeys + 1); !errors.Is(err, rpctypes.ErrTooManyOps) {
		t.Fatalf("batch transaction of %d keys: %v, want %v", batchKeys+1, err, rpctypes.ErrTooManyOps)
	}
	if err := batch(batchKeys); err != nil {
		t.Fatalf("batch transaction of %d keys: %v", batchKeys, err)
	}
	release := func(n int) error {
		cmps := make([]clientv3.Cmp, n)
		ops := make([]clientv3.Op, n)
		for i := range n {
			cmps[i] = clientv3.Compare(clientv3.CreateRevision(path(i)), ">", 0)
			ops[i] = clientv3.OpDelete(path(i))
		}
		_, err := insp.Txn(ctx).If(cmps...).Then(ops...).Commit()
		return err
	}
	if err := release(maxTxnOps + 1); !errors.Is(err, rpctypes.ErrTooManyOps) {
		t.Fatalf("release of %d keys: %v, want %v", maxTxnOps+1, err, rpctypes.ErrTooManyOps)
	}
	if err := release(maxTxnOps); err != nil {
		t.Fatalf("release of %d keys: %v", maxTxnOps, err)
	}
	cleanUp := func(n int) error {
		ops := []clientv3.Op{clientv3.OpPut(guard, "", clientv3.WithLease(grant.ID))}
		for i := range n - 1 {
			ops = append(ops, clientv3.OpDelete(path(i)))
		}
		_, err := insp.Txn(ctx).Then(ops...).Commit()
		return err
	}
	if err := cleanUp(maxTxnOps + 1); !errors.Is(err, rpctypes.ErrTooManyOps) {
		t.Fatalf("clean-up of %d operations: %v, want %v", maxTxnOps+1, err, rpctypes.ErrTooManyOps)
	}
	if err := cleanUp(maxTxnOps); err != nil {
		t.Fatalf("clean-up of %d operations: %v", maxTxnOps, err)
	}
	// And the tombstone stops the batch's puts.
	resp, err := insp.Txn(ctx).If(guardCmp(guard)).Then(clientv3.OpPut(path(0), "", clientv3.WithLease(grant.ID))).Commit()
	if err != nil || resp.Succeeded {
		t.Fatalf("put under a tombstone: succeeded %v, %v", resp != nil && resp.Succeeded, err)
	}
}

// TestRetryPairsReachTwoMembers: the two calls of a retry made after a call
// no member answered (see attempt) reach two members, whatever else the
// Locker has in flight. Through the balanced client, whose round robin
// counts every call of the client, 7-22 of 100 pairs made beside other
// callers went to one member; with that member frozen, the retry sat on
// it too, and a session could be lost.
func TestRetryPairsReachTwoMembers(t *testing.T) {
	l := mustLocker(t)
	stop := make(chan struct{})
	var others sync.WaitGroup
	for range 16 {
		others.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = l.cli.Get(context.Background(), Root+"/", clientv3.WithCountOnly(), clientv3.WithSerializable())
			}
		})
	}
	defer func() { close(stop); others.Wait() }()
	same := 0
	for range 100 {
		reached := make(chan string, 2)
		ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
		_, err := race(ctx, l.members.pair(), func(c context.Context, via caller) (string, error) {
			m, ok := via.(*member)
			if !ok {
				return "", fmt.Errorf("a retry through %T, not a member's connection", via)
			}
			var p peer.Peer
			// Not cancelled with the race: both calls must land to be counted.
			_, err := pb.NewKVClient(m.conn).Range(context.WithoutCancel(c),
				&pb.RangeRequest{Key: []byte(Root + "/"), CountOnly: true, Serializable: true}, grpc.Peer(&p))
			if err != nil {
				return "", err
			}
			reached <- p.Addr.String()
			return p.Addr.String(), nil
		})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		a, b := <-reached, <-reached
		cancel()
		if a == b {
			same++
		}
	}
	if same > 0 {
		t.Errorf("%d of 100 pairs of retried calls went to one member beside 16 other callers", same)
	}
}

// TestAttemptRetriesOnTwoMembersAfterNoAnswer: an attempt no member
// answered in time (a frozen member holds it) is followed at once by two
// calls on two members' own connections.
func TestAttemptRetriesOnTwoMembersAfterNoAnswer(t *testing.T) {
	l := mustLocker(t)
	s := &session{l: l, ctx: context.Background()}
	var mu sync.Mutex
	var retried []*member
	both := make(chan struct{})
	start := time.Now()
	_, err := attempt(context.Background(), s, func(c context.Context, via caller) (struct{}, error) {
		m, ok := via.(*member)
		if !ok { // the balanced client, on a frozen member
			<-c.Done()
			return struct{}{}, c.Err()
		}
		mu.Lock()
		if retried = append(retried, m); len(retried) == 2 {
			close(both)
		}
		mu.Unlock()
		select { // answer once both calls are out, to see them both
		case <-both:
			return struct{}{}, nil
		case <-c.Done():
			return struct{}{}, c.Err()
		}
	})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took > attemptTimeout+500*time.Millisecond {
		t.Errorf("retry answered %v after the attempt began, want about attemptTimeout (%v)", took.Round(time.Millisecond), attemptTimeout)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(retried) != 2 || retried[0] == retried[1] {
		t.Errorf("retry after no answer went to members %v, want two distinct ones", retried)
	}
}

// TestAttemptBacksOffOnAnsweredErrors: an error the servers answered, such
// as etcd's "too many requests" (an overloaded cluster), is retried with
// one call at a time after pauses that double: at most five calls in a
// second (0, then pauses of at least 50, 100, 200 and 400 ms). Every retry
// was two calls 100 ms apart: 19 calls in a second.
func TestAttemptBacksOffOnAnsweredErrors(t *testing.T) {
	s := &session{l: &Locker{log: slog.New(slog.DiscardHandler)}, ctx: context.Background()}
	var calls, inFlight atomic.Int64
	var together atomic.Bool
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := attempt(ctx, s, func(context.Context, caller) (struct{}, error) {
		calls.Add(1)
		if inFlight.Add(1) > 1 {
			together.Store(true)
		}
		defer inFlight.Add(-1)
		return struct{}{}, rpctypes.ErrTooManyRequests
	})
	if !errors.Is(err, rpctypes.ErrTooManyRequests) {
		t.Fatalf("attempt: %v, want the last answer", err)
	}
	if n := calls.Load(); n > 5 {
		t.Errorf("%d calls in 1 s answered 'too many requests', want at most 5", n)
	}
	if together.Load() {
		t.Error("two calls at once after answered errors, want one at a time")
	}
}

// TestAttemptPauseEndsWithItsSession: a session that ends while attempt
// pauses after an answered error ends the attempt at once, as it ends one
// in flight: a wait or a release must not outlive its session by a pause.
// The pause took no notice, and the attempt went on until it was over: up
// to 1.2 s after the fourth answered error, 1.5 s later on.
func TestAttemptPauseEndsWithItsSession(t *testing.T) {
	sctx, end := context.WithCancel(context.Background())
	defer end()
	s := &session{l: &Locker{log: slog.New(slog.DiscardHandler)}, ctx: sctx}
	var calls atomic.Int64
	var ended atomic.Int64 // UnixNano of the session's end
	start := time.Now()
	_, err := attempt(context.Background(), s, func(context.Context, caller) (struct{}, error) {
		if calls.Add(1) == 4 { // its pause is drawn from [400 ms, 1.2 s)
			time.AfterFunc(20*time.Millisecond, func() {
				ended.Store(time.Now().UnixNano())
				end()
			})
		}
		return struct{}{}, rpctypes.ErrTooManyRequests
	})
	if !errors.Is(err, errSessionGone) {
		t.Fatalf("attempt: %v after %d calls, want errSessionGone", err, calls.Load())
	}
	late := time.Since(time.Unix(0, ended.Load()))
	t.Logf("%d calls in %v; returned %v after the session ended", calls.Load(),
		time.Since(start).Round(time.Millisecond), late.Round(time.Millisecond))
	if late > 200*time.Millisecond {
		t.Errorf("attempt returned %v after its session ended, in a pause", late.Round(time.Millisecond))
	}
}

// TestWaitEndsWithItsSession: a waiter whose read sits on a member that
// never answers (a silent listener, as a frozen member) returns as soon as
// its session ends, not when the read's attempt times out (900 ms later),
// and still within its own context.
func TestWaitEndsWithItsSession(t *testing.T) {
	l, err := New([]string{stacktest.Silent(t)}, WithSessionTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() }) // before the listener's: registered after it
	wait := func(d, endAfter time.Duration) (time.Duration, error) {
		sctx, end := context.WithCancel(l.life)
		defer end()
		s := &session{l: l, id: 0x7e57, ttl: testTTL, ctx: sctx, end: end, check: make(chan struct{}, 1),
			keys: map[string]*entry{}, deadline: time.Now().Add(time.Hour), renewed: make(chan struct{})}
		w := s.newWaiter(locktest.Key(t), "")
		w.rev = 10
		if endAfter > 0 {
			time.AfterFunc(endAfter, end) // as giveUp ends it
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		start := time.Now()
		err := s.wait(ctx, w)
		return time.Since(start), err
	}
	took, err := wait(5*time.Second, 100*time.Millisecond)
	t.Logf("session ended 100 ms into a held read: wait returned after %v: %v", took.Round(time.Millisecond), err)
	if !errors.Is(err, errSessionGone) {
		t.Errorf("wait: %v, want errSessionGone", err)
	}
	if took > 300*time.Millisecond {
		t.Errorf("wait went on %v after its session ended 100 ms in", took.Round(time.Millisecond))
	}
	took, err = wait(300*time.Millisecond, 0)
	if !errors.Is(err, context.DeadlineExceeded) || took > 500*time.Millisecond {
		t.Errorf("wait with a 300 ms context: %v after %v", err, took.Round(time.Millisecond))
	}
}

// TestAttemptAllocations: every wait read and release goes through attempt;
// its hook on the session's end costs two allocations over a bare bounded
// call (five, with a context of its own for the whole call).
func TestAttemptAllocations(t *testing.T) {
	sctx, end := context.WithCancel(context.Background())
	defer end()
	s := &session{l: &Locker{log: slog.New(slog.DiscardHandler)}, ctx: sctx}
	op := func(context.Context, caller) (int, error) { return 1, nil }
	if n := testing.AllocsPerRun(1000, func() { _, _ = attempt(context.Background(), s, op) }); n > 7 {
		t.Errorf("attempt: %.0f allocations a call, want at most 7", n)
	}
}
