package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

func newNode(t *testing.T) (*redisnode.Node, string) {
	t.Helper()
	n := redisnode.New(stacktest.RequireRedis(t)[0], time.Second)
	t.Cleanup(func() { _ = n.Close() })
	key := fmt.Sprintf("node-test-%016x", rand.Uint64())
	t.Cleanup(func() { n.Client().Del(context.Background(), redisnode.LockKey(key), redisnode.FenceKey(key)) })
	return n, key
}

func TestKeyNames(t *testing.T) {
	if got := redisnode.LockKey("sku-1"); got != "stockguard:{sku-1}:lock" {
		t.Errorf("LockKey = %q", got)
	}
	if got := redisnode.FenceKey("sku-1"); got != "stockguard:{sku-1}:fence" {
		t.Errorf("FenceKey = %q", got)
	}
	if got := redisnode.WakeKey("sku-1"); got != "stockguard:{sku-1}:wake" {
		t.Errorf("WakeKey = %q", got)
	}
}

// TestReleaseWakes: a release wakes only when it deleted the holder's key
// and was asked to; a wake-up nobody took is kept to one, expires, and is
// popped by the next waiter at once.
func TestReleaseWakes(t *testing.T) {
	n, key := newNode(t)
	ctx := t.Context()
	wake := redisnode.WakeKey(key)
	t.Cleanup(func() { n.Client().Del(context.Background(), wake) })
	queued := func() int64 { return n.Client().LLen(ctx, wake).Val() }
	mustAcquire := func(id string) {
		t.Helper()
		if _, ok, err := n.AcquireIncr(ctx, key, id, time.Minute); err != nil || !ok {
			t.Fatalf("AcquireIncr(%s) = %v, %v", id, ok, err)
		}
	}

	mustAcquire("a")
	if deleted, _ := n.Release(ctx, key, "b", true); deleted || queued() != 0 {
		t.Fatalf("a non-holder's release: deleted %v, %d wake-ups; want none", deleted, queued())
	}
	if deleted, _ := n.Release(ctx, key, "a", false); !deleted || queued() != 0 {
		t.Fatalf("a release without wake: deleted %v, %d wake-ups; want none", deleted, queued())
	}
	for _, id := range []string{"a", "b"} {
		mustAcquire(id)
		if deleted, err := n.Release(ctx, key, id, true); err != nil || !deleted {
			t.Fatalf("Release(%s) = %v, %v", id, deleted, err)
		}
	}
	if q, ttl := queued(), n.Client().PTTL(ctx, wake).Val(); q != 1 || ttl <= 0 || ttl > time.Second {
		t.Fatalf("after two releases nobody awaited: %d wake-ups, TTL %v; want 1, at most 1s", q, ttl)
	}
	if err := n.AwaitRelease(ctx, key, time.Second); err != nil || queued() != 0 {
		t.Fatalf("AwaitRelease with a wake-up waiting = %v, %d left; want it popped", err, queued())
	}
}

// TestReleaseWakesOneWaiter: of two waiters blocked on a key, a release
// wakes one; the other waits out its time, which no release cut short.
func TestReleaseWakesOneWaiter(t *testing.T) {
	n, key := newNode(t)
	ctx := t.Context()
	t.Cleanup(func() { n.Client().Del(context.Background(), redisnode.WakeKey(key)) })
	if _, ok, err := n.AcquireIncr(ctx, key, "a", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireIncr = %v, %v", ok, err)
	}
	const wait = time.Second
	start := time.Now()
	returned := make(chan time.Duration, 2)
	for range 2 {
		go func() {
			if err := n.AwaitRelease(ctx, key, wait); err != nil {
				t.Errorf("AwaitRelease = %v", err)
			}
			returned <- time.Since(start)
		}()
	}
	time.Sleep(wait / 5) // both block (a late one would pop the wake-up at once: still one)
	if deleted, err := n.Release(ctx, key, "a", true); err != nil || !deleted {
		t.Fatalf("Release = %v, %v", deleted, err)
	}
	first, second := <-returned, <-returned
	// Wide margins: this checks which waiter a wake-up reached, not speed.
	if first >= wait*4/5 || second < wait*9/10 {
		t.Fatalf("waiters returned after %v and %v of %v; want one woken early, one at its time", first, second, wait)
	}
}

func TestAcquireIncr(t *testing.T) {
	n, key := newNode(t)
	ctx := t.Context()
	tok, ok, err := n.AcquireIncr(ctx, key, "a", time.Minute)
	if err != nil || !ok || tok != 1 {
		t.Fatalf("first AcquireIncr = %d, %v, %v; want 1, true", tok, ok, err)
	}
	if _, ok, err := n.AcquireIncr(ctx, key, "b", time.Minute); err != nil || ok {
		t.Fatalf("AcquireIncr on a held key = %v, %v; want not ok", ok, err)
	}
	if v, _ := n.Client().Get(ctx, redisnode.FenceKey(key)).Result(); v != "1" {
		t.Fatalf("a refused acquisition moved the counter to %s", v)
	}
	if deleted, err := n.Release(ctx, key, "b", false); err != nil || deleted {
		t.Fatalf("Release by a non-holder = %v, %v", deleted, err)
	}
	if err := n.Extend(ctx, key, "b", time.Minute); !errors.Is(err, redisnode.ErrNotHeld) {
		t.Fatalf("Extend by a non-holder = %v", err)
	}
	if err := n.Extend(ctx, key, "a", time.Minute); err != nil {
		t.Fatalf("Extend by the holder = %v", err)
	}
	if deleted, err := n.Release(ctx, key, "a", false); err != nil || !deleted {
		t.Fatalf("Release by the holder = %v, %v", deleted, err)
	}
	if tok, ok, _ := n.AcquireIncr(ctx, key, "b", time.Minute); !ok || tok != 2 {
		t.Fatalf("next AcquireIncr = %d, %v; want 2", tok, ok)
	}
}

// TestFence checks round 2's conditions: only the lock holder publishes, and
// only a token above the counter, compared exactly even past 2^53.
func TestFence(t *testing.T) {
	n, key := newNode(t)
	ctx := t.Context()
	ok, fence, err := n.AcquireRead(ctx, key, "a", time.Minute)
	if err != nil || !ok || fence != 0 {
		t.Fatalf("AcquireRead on a fresh key = %v, %d, %v", ok, fence, err)
	}
	if err := n.Fence(ctx, key, "b", 5); !errors.Is(err, redisnode.ErrNotHeld) {
		t.Fatalf("Fence by a non-holder = %v", err)
	}
	for _, c := range []struct {
		token uint64
		want  error
	}{
		{9, nil},
		{10, nil}, // "10" > "9": numbers, not strings
		{10, redisnode.ErrFenceAhead},
		{9, redisnode.ErrFenceAhead},
		{1<<53 + 1, nil},
		{1 << 53, redisnode.ErrFenceAhead}, // equal as doubles, not as integers
		{1<<64 - 1, nil},
	} {
		if err := n.Fence(ctx, key, "a", c.token); !errors.Is(err, c.want) {
			t.Fatalf("Fence(%d) = %v, want %v", c.token, err, c.want)
		}
	}
	ok, fence, err = n.AcquireRead(ctx, key, "b", time.Minute)
	if err != nil || ok || fence != 1<<64-1 {
		t.Fatalf("AcquireRead on a held key = %v, %d, %v; want false, %d", ok, fence, err, uint64(1<<64-1))
	}
	if got, _ := n.Client().Get(ctx, redisnode.FenceKey(key)).Result(); got != strconv.FormatUint(1<<64-1, 10) {
		t.Fatalf("counter %s", got)
	}
}

func TestTimeout(t *testing.T) {
	srv, err := stack.StartRedis(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	n := redisnode.New(srv.Addr(), 100*time.Millisecond)
	defer n.Close()
	if err := n.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	defer srv.Cont()
	start := time.Now()
	if _, _, err := n.AcquireIncr(t.Context(), "k", "a", time.Second); err == nil {
		t.Fatal("AcquireIncr on a paused server succeeded")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a paused server held the call for %v with a 100 ms node timeout", d)
	}
}
