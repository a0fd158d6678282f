package redlock_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/lock/redlock"
)

// scriptCalls is how many scripts (EVALSHA and EVAL) each node has run: an
// EVALSHA refused with NOSCRIPT, then sent again as EVAL, counts once.
func (ns nodes) scriptCalls(tb testing.TB) []int {
	tb.Helper()
	out := make([]int, len(ns))
	for i, c := range ns {
		info, err := c.Info(context.Background(), "commandstats").Result()
		if err != nil {
			tb.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
				continue
			}
			for _, f := range strings.Split(strings.SplitN(line, ":", 2)[1], ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					n, _ := strconv.Atoi(v)
					out[i] += n
				} else if v, ok := strings.CutPrefix(f, "failed_calls="); ok {
					n, _ := strconv.Atoi(v)
					out[i] -= n
				}
			}
		}
	}
	return out
}

// TestBatchOneCallPerNodePerRound: a batch of 16 free keys costs each node
// one script call for round 1 and one for the release of all 16 leases: the
// counters agree, so round 1's increments publish the tokens. Once one
// node's counter of one key is ahead, that key takes round 2, one more call
// per node for the batch.
func TestBatchOneCallPerNodePerRound(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 5)
	raw := rawClients(t, c.addrs)
	l := newLocker(t, c.addrs)
	base := locktest.Key(t)
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = base + "-" + strconv.Itoa(i)
	}
	// Loads the scripts (a first EVALSHA answers NOSCRIPT, then EVAL runs).
	warm := locktest.MustBatch(t, l, keys)
	if err := warm.Leases.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the release's stragglers
	batch := func(want int) []*lock.Lease {
		t.Helper()
		before := raw.scriptCalls(t)
		b := locktest.MustBatch(t, l, keys)
		if len(b.Leases) != len(keys) {
			t.Fatalf("batch got %d of %d keys, held %q", len(b.Leases), len(keys), b.Held)
		}
		if err := b.Leases.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the stragglers of both rounds
		after := raw.scriptCalls(t)
		for i := range after {
			if d := after[i] - before[i]; d != want {
				t.Errorf("node %d ran %d script calls for a batch of %d keys, want %d", i, d, len(keys), want)
			}
		}
		return b.Leases
	}
	tokens := func(leases []*lock.Lease) map[string]lock.Token {
		m := make(map[string]lock.Token, len(leases))
		for _, lease := range leases {
			m[lease.Key()] = lease.Token()
		}
		return m
	}
	first, even := tokens(warm.Leases), tokens(batch(2))
	for _, k := range keys {
		if even[k] != first[k]+1 {
			t.Errorf("%s: token %d after %d", k, even[k], first[k])
		}
	}
	// Counters that differ on a majority of nodes: whichever majority
	// answers first, one key needs round 2, on every node.
	ahead := keys[5]
	for i, v := range []int{100, 200, 300} {
		if err := raw[i].Set(t.Context(), redisnode.FenceKey(ahead), v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	uneven := tokens(batch(3))
	for _, k := range keys {
		if k != ahead && uneven[k] != even[k]+1 {
			t.Errorf("%s: token %d after %d", k, uneven[k], even[k])
		}
	}
	tok, at := uneven[ahead], 0
	if tok < 102 {
		t.Errorf("%s: token %d with counters at 100, 200 and 300 on three nodes", ahead, tok)
	}
	for i, r := range raw {
		v, _ := r.Get(t.Context(), redisnode.FenceKey(ahead)).Uint64()
		if v < uint64(tok) {
			t.Errorf("node %d: counter %d after round 2 of token %d", i, v, tok)
		}
		if v == uint64(tok) {
			at++
		}
	}
	if at < 3 {
		t.Errorf("token %d on %d nodes, want a majority", tok, at)
	}
}

// TestLateNodeLearnsToken: a key obtained in round 1 (the first majority to
// answer bumped its counter to one value) is taught to a node that answers
// after that, when its counter is another.
func TestLateNodeLearnsToken(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 5)
	raw := rawClients(t, c.addrs)
	l := newLocker(t, c.addrs)
	key := locktest.Key(t)
	locktest.MustRelease(t, locktest.MustAcquire(t, l, key))
	// Node 4 restarted empty, in effect, and is slow.
	if err := raw[4].Del(t.Context(), redisnode.FenceKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.srv[4].Stop(); err != nil {
		t.Fatal(err)
	}
	lease := locktest.MustAcquire(t, l, key)
	if lease.Token() != 2 {
		t.Fatalf("token %d, want 2: nodes 0-3 bumped their counters from 1", lease.Token())
	}
	if err := c.srv[4].Cont(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		v, _ := raw[4].Get(t.Context(), redisnode.FenceKey(key)).Result()
		if v == "2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 4's counter %q 2 s after it answered; want the token, 2", v)
		}
	}
	locktest.MustRelease(t, lease)
}

// TestBatchPartialGrants: a key another holder has on a majority is
// reported held and our lock writes for it are deleted on the nodes that
// granted them; a key held on a minority is obtained; every lease has its
// own id and token.
func TestBatchPartialGrants(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 5)
	raw := rawClients(t, c.addrs)
	l := newLocker(t, c.addrs)
	base := locktest.Key(t)
	major, minor, free := base+"-major", base+"-minor", base+"-free"
	raw.holdElsewhere(t, major, 0, 1, 2)
	raw.holdElsewhere(t, minor, 3, 4)
	b := locktest.MustBatch(t, l, []string{free, major, minor})
	if !slices.Equal(b.Held, []string{major}) || len(b.Leases) != 2 {
		t.Fatalf("batch got %d leases, held %q; want free and minor, major held", len(b.Leases), b.Held)
	}
	// Deleted in the background once a majority is clear (the nodes that
	// refused us count as clear): poll.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		got := raw.lockValues(t, major)
		if strings.Join(got, ",") == "other,other,other,," {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("2 s after the batch the nodes hold %q for the key held on a majority; want ours deleted", got)
		}
	}
	for _, lease := range b.Leases {
		if vals := raw.lockValues(t, lease.Key()); count(vals, lease.ID().String()) < 3 {
			t.Errorf("%s: lease id %s on %d nodes: %q", lease.Key(), lease.ID(), count(vals, lease.ID().String()), vals)
		}
	}
	if b.Leases[0].ID() == b.Leases[1].ID() {
		t.Error("two leases of one batch share an id")
	}
	if err := b.Leases.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitNoKey(t, raw, free)
}

// TestBatchRespectsLocalLine: a key whose line in this Locker is busy counts
// as held even when it is free on every node: a batch never takes a key
// from under a goroutine of its own Locker.
func TestBatchRespectsLocalLine(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	raw := rawClients(t, c.addrs)
	l := newLocker(t, c.addrs, redlock.WithTTL(30*time.Second))
	base := locktest.Key(t)
	holder := locktest.MustAcquire(t, l, base+"-a")
	for _, r := range raw { // the key is free on the nodes; the line is not
		if err := r.Del(t.Context(), redisnode.LockKey(base+"-a")).Err(); err != nil {
			t.Fatal(err)
		}
	}
	b := locktest.MustBatch(t, l, []string{base + "-a", base + "-b"})
	if !slices.Equal(b.Held, []string{base + "-a"}) || len(b.Leases) != 1 || b.Leases[0].Key() != base+"-b" {
		t.Fatalf("batch got %d leases, held %q; want b, a held (busy line)", len(b.Leases), b.Held)
	}
	locktest.MustRelease(t, holder)
	again := locktest.MustBatch(t, l, []string{base + "-a"}, lock.TryOnce())
	if len(again.Leases) != 1 {
		t.Fatalf("after the holder released: held %q", again.Held)
	}
	_ = lock.Set(append(b.Leases, again.Leases...)).Release(t.Context())
}
