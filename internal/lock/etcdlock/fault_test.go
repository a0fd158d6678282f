package etcdlock

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

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
