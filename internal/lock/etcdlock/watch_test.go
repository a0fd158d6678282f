package etcdlock

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// lostWithin fails unless lease is lost, with ErrLeaseLost, within d of now.
func lostWithin(t *testing.T, lease *lock.Lease, d time.Duration, what string) {
	t.Helper()
	start := time.Now()
	select {
	case <-lease.Done():
	case <-time.After(d):
		t.Fatalf("%s: lease still held %v later (Err %v)", what, d, lease.Err())
	}
	if !errors.Is(lease.Err(), lock.ErrLeaseLost) {
		t.Fatalf("%s: Err() = %v, want ErrLeaseLost", what, lease.Err())
	}
	t.Logf("%s: lost after %v", what, time.Since(start).Round(time.Millisecond))
}

// renewed waits for l's session to answer a renewal, so that its next one
// is a whole TTL/3 away.
func renewed(t *testing.T, l *Locker) {
	t.Helper()
	l.mu.Lock()
	ch := l.cur.renewed
	l.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal answered in 10 s")
	}
}

// TestRevokedSessionLosesLeasesAtOnce: a session lease revoked from outside
// takes its keys at once, and another Locker may take them; the holder is
// told then, not at its next renewal (TTL/3 later, 2 s here).
func TestRevokedSessionLosesLeasesAtOnce(t *testing.T) {
	insp := inspector(t)
	l := mustLocker(t, WithSessionTTL(6*time.Second))
	lease := locktest.MustAcquire(t, l, locktest.Key(t))
	renewed(t, l)
	old := sessionLease(l)
	revoke(t, insp, l)
	lostWithin(t, lease, 500*time.Millisecond, "session revoked")
	// The deletion had the session renew at once, which found the lease gone.
	if !eventually(500*time.Millisecond, func() bool { return sessionLease(l) != old }) {
		t.Fatal("the Locker kept the revoked session")
	}
}

// TestDeletedHolderKeyLosesLease: an operator deleting the holder's key
// (etcdctl del --prefix) hands the key on; the holder is told.
func TestDeletedHolderKeyLosesLease(t *testing.T) {
	insp := inspector(t)
	l := mustLocker(t)
	key := locktest.Key(t)
	lease := locktest.MustAcquire(t, l, key)
	other := locktest.MustAcquire(t, l, locktest.Key(t))
	if _, err := insp.Delete(context.Background(), prefix(key), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	lostWithin(t, lease, 2*time.Second, "holder key deleted")
	if err := other.Err(); err != nil {
		t.Fatalf("a lease whose key stands was lost too: %v", err)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatalf("release of the lost lease: %v", err)
	}
	locktest.MustRelease(t, other)
	// The session goes on: the key can be taken again.
	locktest.MustRelease(t, locktest.MustAcquire(t, l, key, lock.TryOnce()))
}

// TestOwnReleasesAreNoLoss: the Locker's own deletions (a release, a batch
// release in one transaction, a cancelled waiter's clean-up) lose nothing.
func TestOwnReleasesAreNoLoss(t *testing.T) {
	reg := prometheus.NewRegistry()
	l := mustLocker(t, WithRegisterer(reg))
	base := locktest.Key(t)
	kept := locktest.MustAcquire(t, l, base+"-kept")
	one := locktest.MustAcquire(t, l, base+"-one")
	b := locktest.MustBatch(t, l, []string{base + "-a", base + "-b", base + "-c", base + "-d"})
	locktest.MustRelease(t, one)
	if err := b.Leases.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	if _, err := l.Acquire(ctx, base+"-kept"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiter behind a held key: %v", err)
	}
	cancel()
	time.Sleep(500 * time.Millisecond) // the session's watch hears every delete
	if err := kept.Err(); err != nil {
		t.Fatalf("kept lease: %v", err)
	}
	if n := lostCount(t, reg); n != 0 {
		t.Fatalf("%v leases counted lost", n)
	}
	locktest.MustRelease(t, kept)
}

// lostCount is stockguard_lock_leases_lost_total in reg.
func lostCount(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "stockguard_lock_leases_lost_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// TestDeletedWaiterQueuesAgain: a waiter whose own key someone deletes
// queues again at once (the session's watch tells it), and gets the key
// when the holder lets go.
func TestDeletedWaiterQueuesAgain(t *testing.T) {
	insp := inspector(t)
	h, l := mustLocker(t), mustLocker(t)
	key := locktest.Key(t)
	held := locktest.MustAcquire(t, h, key)
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		lease, err := l.Acquire(ctx, key)
		if err == nil {
			err = lease.Release(context.Background())
		}
		got <- err
	}()
	if !eventually(5*time.Second, func() bool { return len(waiters(t, insp, key)) == 2 }) {
		t.Fatal("the waiter never queued")
	}
	first := waiters(t, insp, key)[1]
	if _, err := insp.Delete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	if !eventually(2*time.Second, func() bool {
		w := waiters(t, insp, key)
		return len(w) == 2 && w[1] != first
	}) {
		t.Fatalf("the waiter did not queue again: %q", waiters(t, insp, key))
	}
	locktest.MustRelease(t, held)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestRecheck: after a compacted watch, recheck finds what the watch would
// have told: a granted key gone ends its lease; a key still being put that
// turns out created before the read that missed it counts as deleted; one
// created after does not.
func TestRecheck(t *testing.T) {
	l := mustLocker(t)
	s, err := l.session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	granted := s.newWaiter(locktest.Key(t), "")
	s.created(granted, 1) // no such key stands
	lease, err := s.grant(granted, time.Now().Add(testTTL/2))
	if err != nil {
		t.Fatal(err)
	}
	before, after := s.newWaiter(locktest.Key(t), ""), s.newWaiter(locktest.Key(t), "")
	// follow hands a compacted watch to recheck, and resumes after the
	// compaction.
	wch := make(chan clientv3.WatchResponse, 1)
	wch <- clientv3.WatchResponse{CompactRevision: 2, Canceled: true}
	close(wch)
	if from := s.follow(wch, 2, func() {}); from <= 2 {
		t.Fatalf("follow resumed from %d, compacted at 2", from)
	}
	lostWithin(t, lease, time.Second, "key gone at the recheck")
	read := before.e.absentAt // the revision of the read that found neither
	s.created(before, read)
	s.created(after, read+1)
	if !closed(before.e.gone) {
		t.Error("a key created before the read that found none is not marked deleted")
	}
	if closed(after.e.gone) {
		t.Error("a key created after the read is marked deleted")
	}
	s.forget(before, after)
}

// TestRecheckSparesKeysCreatedAfterItsRead: a put whose answer comes while
// a recheck reads (its revision past the read's) is not in what the read
// saw; taken as deleted, a good lease would be lost and its key left on the
// live session. Its deletion, if any, is the watch's to see.
func TestRecheckSparesKeysCreatedAfterItsRead(t *testing.T) {
	l := mustLocker(t)
	s, err := l.session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	late := s.newWaiter(locktest.Key(t), "")
	s.created(late, math.MaxInt64) // later than any read: the put's answer came meanwhile
	lease, err := s.grant(late, time.Now().Add(testTTL/2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.recheck(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
		t.Fatalf("a lease whose key was created after the recheck's read is lost: %v", lease.Err())
	case <-time.After(200 * time.Millisecond):
	}
	s.forget(late)
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestResumeWatchesKeysPutDuringTheRecheck: a key the session tracks once a
// recheck has listed its keys, put and then deleted (by an operator) before
// the recheck reads, is in neither the read nor, were the watch to resume
// just after the read, the watch. The watch resumes no later than just
// after the previous recheck's read instead, and the key's lease is lost.
// Before, it resumed after the read, and the lease stayed held on a key
// that was gone.
func TestResumeWatchesKeysPutDuringTheRecheck(t *testing.T) {
	insp := inspector(t)
	var armed atomic.Bool
	reading, proceed := make(chan struct{}), make(chan struct{})
	hold := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if armed.CompareAndSwap(true, false) {
			close(reading)
			<-proceed
		}
		return inv(ctx, method, req, reply, cc, opts...)
	}
	l := mustLocker(t)
	eps := stacktest.RequireEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(hold)}})
	if err != nil {
		t.Fatal(err)
	}
	_ = l.cli.Close()
	l.cli, l.members = cli, newMembers(cli, eps)

	// A session with no watch of its own: the test plays it.
	ctx := t.Context()
	grant, err := insp.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = insp.Revoke(context.Background(), grant.ID) })
	sctx, end := context.WithCancel(l.life)
	t.Cleanup(end)
	s := &session{l: l, id: grant.ID, ttl: testTTL, ctx: sctx, end: end, check: make(chan struct{}, 1),
		keys: map[string]*entry{}, deadline: time.Now().Add(time.Minute), renewed: make(chan struct{}),
		lastRead: grant.Revision}
	put := func(w *waiter) {
		t.Helper()
		resp, err := insp.Put(ctx, w.path, "", clientv3.WithLease(grant.ID))
		if err != nil {
			t.Fatal(err)
		}
		s.created(w, resp.Header.Revision)
	}
	listed := s.newWaiter(locktest.Key(t), "")
	put(listed)
	next := grant.Revision + 1 // no deletion seen: the watch is still where it began
	next = s.resume(next, next)

	armed.Store(true)
	resumed := make(chan int64, 1)
	go func() { resumed <- s.resume(next, next) }() // after a silence
	<-reading                                       // the recheck listed its keys
	late := s.newWaiter(locktest.Key(t), "")
	put(late)
	lease, err := s.grant(late, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := insp.Delete(ctx, late.path); err != nil {
		t.Fatal(err)
	}
	close(proceed)
	from := <-resumed
	t.Logf("the late key put at %d, the watch resumes from %d", late.rev, from)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	go s.follow(insp.Watch(wctx, Root+"/", clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithFilterPut()), from, func() {})
	lostWithin(t, lease, time.Second, "key put and deleted while the recheck read")
	s.forget(listed)
}
