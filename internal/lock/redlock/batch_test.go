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

// scriptCalls is how many script calls (EVALSHA and EVAL) each node has run.
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
			f := strings.Split(strings.SplitN(line, ":", 2)[1], ",")[0] // calls=N
			n, _ := strconv.Atoi(strings.TrimPrefix(f, "calls="))
			out[i] += n
		}
	}
	return out
}

// TestBatchOneCallPerNodePerRound: a batch of 16 free keys costs each node
// one script call for round 1, one for round 2 and one for the release of
// all 16 leases.
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
	before := raw.scriptCalls(t)
	b := locktest.MustBatch(t, l, keys)
	if len(b.Leases) != len(keys) {
		t.Fatalf("batch got %d of %d keys, held %q", len(b.Leases), len(keys), b.Held)
	}
	if err := b.Leases.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil { // waits for the stragglers
		t.Fatal(err)
	}
	after := raw.scriptCalls(t)
	for i := range after {
		if d := after[i] - before[i]; d != 3 {
			t.Errorf("node %d ran %d script calls for a batch of %d keys, want 3 (round 1, round 2, release)", i, d, len(keys))
		}
	}
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
	for key, on := range map[string][]int{major: {0, 1, 2}, minor: {3, 4}} {
		for _, i := range on {
			if err := raw[i].Set(t.Context(), redisnode.LockKey(key), "other", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
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
