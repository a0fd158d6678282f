package zklock

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/internal/lock"
)

// TestBatchRounds checks that a batch of many keys costs a fixed number of
// write transactions, whatever its size: one multi creates every node, the
// tokens are the nodes' czxids, and releasing the leases as a Set is one
// multi again.
func TestBatchRounds(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	l := mustLocker(t, servers)
	base := key(t)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = base + "-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
	}
	b, err := l.AcquireBatch(context.Background(), keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Leases) != len(keys) || len(b.Held) != 0 {
		t.Fatalf("got %d leases, %d held; want %d and none", len(b.Leases), len(b.Held), len(keys))
	}
	zxid := b.Leases[0].Token()
	for _, lease := range b.Leases {
		if lease.Token() != zxid {
			t.Fatalf("%s: token %d, want the multi's zxid %d", lease.Key(), lease.Token(), zxid)
		}
	}
	names := children(t, insp, b.Leases[7].Key())
	if len(names) != 1 || !strings.Contains(names[0], b.Leases[7].ID().String()) {
		t.Fatalf("children = %v, want the lease's node only", names)
	}
	if _, st := exists(t, insp, testRoot+"/"+b.Leases[7].Key()+"/"+names[0]); lock.Token(st.Czxid) != zxid {
		t.Fatalf("czxid %d, token %d", st.Czxid, zxid)
	}
	if err := b.Leases.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	var pzxid int64
	for i, k := range keys {
		if names := children(t, insp, k); len(names) > 0 {
			t.Fatalf("nodes of %s left after release: %v", k, names)
		}
		// A parent's pzxid is the transaction that last changed its
		// children: one for every key, so the release was one multi.
		_, st := exists(t, insp, testRoot+"/"+k)
		if i > 0 && st.Pzxid != pzxid {
			t.Fatalf("%s's node deleted in transaction %#x, %s's in %#x: want one multi", k, st.Pzxid, keys[0], pzxid)
		}
		pzxid = st.Pzxid
	}
}

// TestLostBatchReply loses the reply to a batch's multi: the Locker finds
// every node again by its uuid instead of creating a second set.
func TestLostBatchReply(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	var logs syncBuffer
	d := &replyDropper{}
	l := mustLocker(t, servers, WithDialer(d.dial), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	base := key(t)
	mustRelease(t, mustAcquire(t, l, base+"-warm")) // connected, root exists
	keys := []string{base + "-a", base + "-b", base + "-c"}

	d.armed.Store(true)
	b, err := l.AcquireBatch(context.Background(), keys)
	if err != nil {
		t.Fatal(err)
	}
	if d.dropped.Load() != 1 {
		t.Fatal("no reply was dropped")
	}
	if len(b.Leases) != len(keys) {
		t.Fatalf("got %d leases, held %v", len(b.Leases), b.Held)
	}
	if n := strings.Count(logs.String(), "node found by its uuid"); n != len(keys) {
		t.Fatalf("%d nodes recovered, want %d; log:\n%s", n, len(keys), logs.String())
	}
	for _, lease := range b.Leases {
		names := children(t, insp, lease.Key())
		if len(names) != 1 || !strings.Contains(names[0], lease.ID().String()) {
			t.Fatalf("%s: children = %v, want only the lease's node", lease.Key(), names)
		}
	}
	if err := b.Leases.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if names := children(t, insp, k); len(names) != 0 {
			t.Fatalf("%s: left after release: %v", k, names)
		}
	}
}

// TestHandoverOneMulti: a handover deletes the earlier batch's nodes in the
// transaction that creates the new batch's: each old key's parent last
// changed its children in the new nodes' czxid, the new tokens.
func TestHandoverOneMulti(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	l := mustLocker(t, servers)
	base := key(t)
	first := []string{base + "-a", base + "-b", base + "-c"}
	b, err := l.AcquireBatch(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	next, released, err := lock.HandoverBatch(context.Background(), l, b.Leases, []string{base + "-d", base + "-e"})
	if err != nil || released != nil || len(next.Leases) != 2 {
		t.Fatalf("handover = %d leases, %v, released: %v", len(next.Leases), err, released)
	}
	zxid := next.Leases[0].Token()
	for _, k := range first {
		if names := children(t, insp, k); len(names) > 0 {
			t.Fatalf("nodes of %s left after the handover: %v", k, names)
		}
		if _, st := exists(t, insp, testRoot+"/"+k); lock.Token(st.Pzxid) != zxid {
			t.Fatalf("%s's node deleted in transaction %#x, the new nodes created in %#x: want one multi", k, st.Pzxid, zxid)
		}
	}
	if err := next.Leases.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestLostHandoverReply loses the reply to a handover's multi: the new
// nodes are found by their uuids, and the old ones, deleted by the same
// multi, are gone.
func TestLostHandoverReply(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	d := &replyDropper{}
	l := mustLocker(t, servers, WithDialer(d.dial))
	base := key(t)
	first := []string{base + "-a", base + "-b"}
	b, err := l.AcquireBatch(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	d.armed.Store(true)
	next, released, err := lock.HandoverBatch(context.Background(), l, b.Leases, []string{base + "-c", base + "-d"})
	if err != nil || released != nil || len(next.Leases) != 2 {
		t.Fatalf("handover = %d leases, held %v, %v, released: %v", len(next.Leases), next.Held, err, released)
	}
	if d.dropped.Load() != 1 {
		t.Fatal("no reply was dropped")
	}
	for _, k := range first {
		if names := children(t, insp, k); len(names) > 0 {
			t.Fatalf("nodes of %s left after the handover: %v", k, names)
		}
	}
	for _, lease := range next.Leases {
		if names := children(t, insp, lease.Key()); len(names) != 1 || !strings.Contains(names[0], lease.ID().String()) {
			t.Fatalf("%s: children = %v, want only the lease's node", lease.Key(), names)
		}
	}
	if err := next.Leases.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
