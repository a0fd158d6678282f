package etcdlock

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/stack"
)

// faultTTL is the session TTL of the private-cluster tests: long enough
// that a frozen member or a leader election ends no session.
const faultTTL = 5 * time.Second

// privateCluster starts a three-member cluster of the test's own (its
// members may be frozen and killed) and returns it with its leader's index.
func privateCluster(t *testing.T) (*stack.EtcdCluster, int) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a private etcd cluster and freezes or kills its members")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := stack.StartEtcdCluster(ctx, t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c, leader
}

// freeze SIGSTOPs m until the test ends (or an earlier Cont).
func freeze(t *testing.T, m *stack.EtcdMember) {
	t.Helper()
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Cont() })
}

// privateLocker is a Locker on the given members, closed when the test
// ends, with its session open.
func privateLocker(t *testing.T, ms ...*stack.EtcdMember) *Locker {
	t.Helper()
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.Addr())
	}
	l, err := New(eps, WithSessionTTL(faultTTL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if err := l.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	return l
}

// memberClient is a plain client on the given members only.
func memberClient(t *testing.T, ms ...*stack.EtcdMember) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.Addr())
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestLatePutLeavesNoWaiter: an Acquire whose waiter put is stuck on a
// frozen member gives up at its deadline; when the member thaws and
// applies the put, the put must do nothing. Before the tombstone guard the
// put landed after the clean-up's delete, on the still-renewed session
// lease, and stood in the key's line for the session's life: every other
// Locker's Acquire of the key waited behind it.
func TestLatePutLeavesNoWaiter(t *testing.T) {
	c, leader := privateCluster(t)
	frozen, live, other := c.Member((leader+1)%3), c.Member((leader+2)%3), c.Member(leader)
	l := privateLocker(t, frozen, live)
	insp := memberClient(t, live, other)
	// Each round freezes the member until an Acquire's put is stuck on it,
	// then thaws it at once: within the 10 s the client's keepalive takes
	// to drop the frozen member's connection, which would take the request
	// along.
	var stalled []string
	for round := range 6 {
		freeze(t, frozen)
		for i := 0; i < 8; i++ {
			key := locktest.Key(t)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			start := time.Now()
			lease, err := l.Acquire(ctx, key)
			cancel()
			if err == nil {
				// The delete may be stuck on the frozen member too: it
				// goes on in the background.
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = lease.Release(rctx)
				cancel()
				continue
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Acquire of a free key with a frozen member: %v", err)
			}
			t.Logf("round %d: %v after %v", round, err, time.Since(start).Round(time.Millisecond))
			stalled = append(stalled, key)
			break
		}
		if err := frozen.Cont(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(stalled) == 0 {
		t.Fatal("no Acquire was sent to the frozen member")
	}
	time.Sleep(3 * time.Second) // the thawed member forwards and applies what it held
	for _, key := range stalled {
		if got := waiters(t, insp, key); len(got) != 0 {
			t.Errorf("%s: waiter keys %q stand in line after the Acquire gave up", key, got)
		}
	}
	if t.Failed() {
		return
	}
	// And another Locker gets each key at once.
	l2 := privateLocker(t, live, other)
	for _, key := range stalled {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		lease, err := l2.Acquire(ctx, key)
		cancel()
		if err != nil {
			t.Fatalf("%s: another Locker's Acquire: %v", key, err)
		}
		locktest.MustRelease(t, lease)
	}
}

// TestAcquireReturnsAtItsDeadline: an Acquire whose requests are stuck on
// a frozen member, or on a frozen cluster, returns about when its context
// ends (the clean-up goes on in the background), not seconds later.
func TestAcquireReturnsAtItsDeadline(t *testing.T) {
	const wait, slack = 300 * time.Millisecond, 400 * time.Millisecond
	c, leader := privateCluster(t)
	follower := c.Member((leader + 1) % 3)
	l := privateLocker(t, follower, c.Member(leader), c.Member((leader+2)%3))
	acquire := func(what string) (stalled bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		start := time.Now()
		lease, err := l.Acquire(ctx, locktest.Key(t))
		took := time.Since(start)
		if err == nil {
			locktest.MustRelease(t, lease)
			return false
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want DeadlineExceeded", what, err)
		}
		t.Logf("%s: %v after %v", what, err, took.Round(time.Millisecond))
		if took > wait+slack {
			t.Errorf("%s: returned after %v, its context ended after %v (%v)", what, took.Round(time.Millisecond), wait, err)
		}
		return true
	}
	freeze(t, follower)
	n := 0
	for i := 0; i < 12 && n < 3; i++ {
		if acquire("one member of three frozen") {
			n++
		}
	}
	if n == 0 {
		t.Fatal("no Acquire was sent to the frozen member")
	}
	freeze(t, c.Member(leader))
	freeze(t, c.Member((leader+2)%3))
	acquire("every member frozen")
}

// TestFrozenMemberStallsNoWatch: a frozen member keeps its connection
// open and cancels nothing; gRPC's keepalive drops it only some 11 s on.
// Waiters whose predecessor watch (and their Locker's one watch stream)
// sit on it must still get their keys, freed through a live member, within
// the watches' silence bound (TTL/4) and a retried read, and a lease whose
// key an operator deletes meanwhile must be lost as soon. Before the
// bound, the waiters stuck on it waited out their context (8 s here),
// though every key was free within milliseconds, and those leases stayed
// held.
func TestFrozenMemberStallsNoWatch(t *testing.T) {
	const n = 6
	const ttl = frozenTTL                           // as TestFrozenMembers: a TTL of freeze within seconds
	bound := ttl/4 + attemptTimeout + 2*time.Second // silence, a read on the frozen member, slack
	c, leader := privateCluster(t)
	frozen, live := c.Member((leader+1)%3), c.Member((leader+2)%3)
	holder := privateLocker(t, c.Member(leader))
	insp := memberClient(t, c.Member(leader))
	type result struct {
		lease *lock.Lease
		err   error
		at    time.Time
	}
	var keys []string
	var held, kept []*lock.Lease
	var l *Locker // the last of the waiters' Lockers
	results := make([]chan result, n)
	for i := range n {
		key := locktest.Key(t)
		keys = append(keys, key)
		held = append(held, locktest.MustAcquire(t, holder, key))
		// The frozen member first: most Lockers open their watch stream on
		// it, the first connection up.
		w, err := New([]string{frozen.Addr(), live.Addr()}, WithSessionTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close() })
		kept = append(kept, locktest.MustAcquire(t, w, locktest.Key(t)))
		results[i] = make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
			defer cancel()
			lease, err := w.Acquire(ctx, key)
			results[i] <- result{lease, err, time.Now()}
		}()
		l = w
	}
	for _, k := range keys {
		if !eventually(5*time.Second, func() bool { return len(waiters(t, insp, k)) == 2 }) {
			t.Fatalf("%s: waiter not queued", k)
		}
	}
	time.Sleep(300 * time.Millisecond) // the waiters' watches are set up
	freeze(t, frozen)
	freed := time.Now()
	for _, lease := range held {
		locktest.MustRelease(t, lease)
	}
	for _, lease := range kept {
		if _, err := insp.Delete(context.Background(), prefix(lease.Key()), clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
	}
	var got []*lock.Lease
	for i, ch := range results {
		r := <-ch
		took := r.at.Sub(freed)
		t.Logf("waiter %d: %v after its key was freed (%v)", i, took.Round(time.Millisecond), r.err)
		switch {
		case r.err != nil:
			t.Errorf("waiter %d: %v, %v after its key was freed with one member of three frozen", i, r.err, took.Round(time.Millisecond))
		case took > bound:
			t.Errorf("waiter %d got its key %v after it was freed, want within %v", i, took.Round(time.Millisecond), bound)
		}
		if r.lease != nil {
			got = append(got, r.lease)
		}
	}
	for i, lease := range kept {
		select {
		case <-lease.Done():
		case <-time.After(time.Until(freed.Add(bound))):
			t.Errorf("lease %d still held %v after an operator deleted its key with one member of three frozen",
				i, time.Since(freed).Round(time.Millisecond))
		}
	}
	// A retry after a call no member answered goes to two members at once
	// (see members): the retries of the waiters' reads and of the sessions'
	// renewals are made so. One call alone through the balanced client
	// lands on the frozen member every other turn, or every turn.
	for i := range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
		_, err := race(ctx, l.members.pair(), func(c context.Context, via caller) (*clientv3.GetResponse, error) {
			return via.Get(c, Root+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		})
		cancel()
		if err != nil {
			t.Errorf("two reads at once, round %d: %v", i, err)
		}
	}
	if err := frozen.Cont(); err != nil {
		t.Fatal(err)
	}
	for _, lease := range got {
		locktest.MustRelease(t, lease)
	}
}

// TestReleaseRetriesAfterLeaderKill: a Release sent just after the leader
// died reaches a follower that forwards it to the dead leader and answers
// only at its request timeout (some 6 s); each delete attempt is bounded
// and retried, so the Release lands once a new leader is elected.
func TestReleaseRetriesAfterLeaderKill(t *testing.T) {
	c, leader := privateCluster(t)
	l := privateLocker(t, c.Member(0), c.Member(1), c.Member(2))
	key := locktest.Key(t)
	lease := locktest.MustAcquire(t, l, key)
	if err := c.Member(leader).Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost 300 ms after the leader died: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	err := lease.Release(ctx)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Release: %v after %v", err, took)
	}
	t.Logf("Release took %v", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("Release took %v after the leader died", took.Round(time.Millisecond))
	}
	live := c.Member((leader + 1) % 3)
	if got := waiters(t, memberClient(t, live), key); len(got) != 0 {
		t.Errorf("keys left after the Release: %q", got)
	}
}
