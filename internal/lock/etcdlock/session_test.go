package etcdlock

import (
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/retry"
	"github.com/stockguard/stockguard/internal/stack"
)

// A lease's deadline is the session's, validUntil its last answered
// renewal: never further than the TTL less the drift from now, still ahead
// while the session is renewed, and moving on with each renewal. How far
// ahead depends on how promptly the cluster answers: a loaded machine
// (CI's packages in parallel beside the stack) answered one renewal late
// and left 639 ms of a 2 s TTL, under the keepalive step (TTL/3) this test
// once asked for. Punctuality is not what it checks.
func TestLeaseDeadlineFollowsRenewals(t *testing.T) {
	l := mustLocker(t)
	lease := locktest.MustAcquire(t, l, locktest.Key(t))
	defer locktest.MustRelease(t, lease)
	first := lease.Deadline()
	for range 3 {
		d := lease.Deadline()
		if left := time.Until(d); left > testTTL-retry.Drift(testTTL) || left <= 0 {
			t.Fatalf("deadline %v away with a %v TTL: want (0, TTL - drift]", left, testTTL)
		}
		time.Sleep(testTTL / 2)
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost while its session was renewed: %v", err)
	}
	if !lease.Deadline().After(first) {
		t.Fatalf("deadline still %v after %v of renewals", first, 3*testTTL/2)
	}
}

// frozenTTL is the session TTL of the frozen-member test: long enough that
// the leader elections of a loaded machine do not end sessions, short
// enough to keep the test within seconds.
const frozenTTL = 3 * time.Second

// TestFrozenMembers freezes members of a private three-member cluster.
// One frozen follower, for longer than the TTL, costs no session: a
// renewal stuck on it gives way to the next, placed on another member.
// All frozen: every session ends at its deadline, no later than the TTL
// (less the drift) after the last renewal could be answered, before the
// cluster could expire it. (Freezing only the followers would not do: the
// stack's etcd, 3.4, lets a leader cut off from its quorum renew leases
// until it steps down.)
func TestFrozenMembers(t *testing.T) {
	c, leader := privateCluster(t)
	var leases []*lock.Lease
	for range 9 { // each Locker's renewals start on a member of its own picking
		l, err := New(c.Endpoints(), WithSessionTTL(frozenTTL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		leases = append(leases, locktest.MustAcquire(t, l, locktest.Key(t)))
	}
	follower := c.Member((leader + 1) % 3)

	freeze := func(m *stack.EtcdMember) {
		t.Helper()
		if err := m.Stop(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Cont() })
	}
	freeze(follower)
	time.Sleep(frozenTTL * 3 / 2)
	for i, lease := range leases {
		if err := lease.Err(); err != nil {
			t.Errorf("lease %d lost with one follower of three frozen: %v", i, err)
		}
	}
	if err := follower.Cont(); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return
	}

	// Let every session renew on the whole cluster again, then freeze it.
	time.Sleep(frozenTTL / 3)
	frozen := time.Now()
	for i := range 3 {
		freeze(c.Member(i))
	}
	var wg sync.WaitGroup
	for i, lease := range leases {
		wg.Go(func() {
			select {
			case <-lease.Done():
			case <-time.After(2 * frozenTTL):
				t.Errorf("lease %d still open %v after the cluster froze", i, 2*frozenTTL)
				return
			}
			lost, deadline := time.Now(), lease.Deadline()
			if lost.Before(deadline.Add(-10 * time.Millisecond)) {
				t.Errorf("lease %d lost %v before its deadline", i, deadline.Sub(lost))
			}
			if late := lost.Sub(deadline); late > 500*time.Millisecond {
				t.Errorf("lease %d lost %v after its deadline", i, late)
			}
			if limit := frozen.Add(frozenTTL - retry.Drift(frozenTTL)); deadline.After(limit) {
				t.Errorf("lease %d: deadline %v past the TTL less the drift after the last renewal could be answered",
					i, deadline.Sub(limit))
			}
		})
	}
	wg.Wait()
}

// TestSilenceIsJittered: waiters that queued together must not read their
// lines again together ever after; the bound stays within TTL/4, that of a
// renewal call, which the frozen-member tests count on.
func TestSilenceIsJittered(t *testing.T) {
	s := &session{ttl: DefaultSessionTTL}
	seen := map[time.Duration]bool{}
	for range 100 {
		d := s.silence()
		if d < 3*s.ttl/16 || d > s.ttl/4 {
			t.Fatalf("silence %v outside [3TTL/16, TTL/4] for a TTL of %v", d, s.ttl)
		}
		seen[d] = true
	}
	if len(seen) < 2 {
		t.Fatalf("silence always %v", s.silence())
	}
}
