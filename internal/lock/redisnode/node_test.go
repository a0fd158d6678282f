package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

func newNode(t *testing.T) (*redisnode.Node, string) {
	t.Helper()
	n := redisnode.New(stacktest.RequireRedis(t)[0], time.Second)
	t.Cleanup(func() { _ = n.Close() })
	key := fmt.Sprintf("node-test-%016x", rand.Uint64())
	t.Cleanup(func() {
		n.Client().Del(context.Background(), redisnode.LockKey(key), redisnode.FenceKey(key), redisnode.WaitKey(key))
	})
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
	if got := redisnode.WaitKey("sku-1"); got != "stockguard:{sku-1}:waiting" {
		t.Errorf("WaitKey = %q", got)
	}
}

// TestReleaseWakes: a release wakes when asked to, WakeIfOurs only when it
// deleted the holder's key and a refused acquisition left the wait flag,
// WakeAnyway whether or not; a wake-up nobody took is kept to one, expires,
// and is popped by the next waiter at once.
func TestReleaseWakes(t *testing.T) {
	n, key := newNode(t)
	ctx := t.Context()
	wake, flag := redisnode.WakeKey(key), redisnode.WaitKey(key)
	t.Cleanup(func() { n.Client().Del(context.Background(), wake) })
	queued := func() int64 { return n.Client().LLen(ctx, wake).Val() }
	mustAcquire := func(id string) {
		t.Helper()
		if tok, err := acquire1(ctx, n, key, id); err != nil || tok == 0 {
			t.Fatalf("AcquireIncr(%s) = %d, %v", id, tok, err)
		}
	}
	mustRelease := func(id string, wantWoke bool) {
		t.Helper()
		deleted, woke, err := n.Release(ctx, []redisnode.Hold{{Key: key, ID: id}}, []redisnode.Wake{redisnode.WakeIfOurs}, nil, time.Minute)
		if err != nil || deleted != 1 || woke[0] != wantWoke {
			t.Fatalf("Release(%s) = %d, %v, %v; want deleted, woke %v", id, deleted, woke, err, wantWoke)
		}
	}

	mustAcquire("a")
	if deleted, _ := release1(ctx, n, key, "b", redisnode.WakeIfOurs); deleted || queued() != 0 {
		t.Fatalf("a non-holder's release: deleted %v, %d wake-ups; want none", deleted, queued())
	}
	// A quorum lease that held the key without this server wakes anyway,
	// and deletes nothing of a's.
	if deleted, _ := release1(ctx, n, key, "b", redisnode.WakeAnyway); deleted || queued() != 1 {
		t.Fatalf("a non-holder's release that wakes anyway: deleted %v, %d wake-ups; want one wake-up only", deleted, queued())
	}
	n.Client().Del(ctx, wake)
	if deleted, _ := release1(ctx, n, key, "a", redisnode.WakeNone); !deleted || queued() != 0 {
		t.Fatalf("a release without wake: deleted %v, %d wake-ups; want none", deleted, queued())
	}
	// Nobody was refused the key: nobody can be waiting, and the list is
	// not written.
	mustAcquire("a")
	mustRelease("a", false)
	if queued() != 0 || n.Client().Exists(ctx, flag).Val() != 0 {
		t.Fatalf("a release nobody was refused before: %d wake-ups, flag %d; want none", queued(), n.Client().Exists(ctx, flag).Val())
	}
	// b is refused: the flag outlasts b's longest wait (1s) and the node
	// timeout (1s), and the releases while it lasts wake.
	mustAcquire("a")
	if tok, err := acquire1(ctx, n, key, "b"); err != nil || tok != 0 {
		t.Fatalf("AcquireIncr(b) on a's key = %d, %v; want refused", tok, err)
	}
	if ttl := n.Client().PTTL(ctx, flag).Val(); ttl <= time.Second || ttl > 2*time.Second {
		t.Fatalf("wait flag TTL %v after a refusal; want the 1s longest wait and the 1s node timeout", ttl)
	}
	mustRelease("a", true)
	// a's wake-up is still in the list: nobody is blocked, so b's release
	// wakes nobody (and does not renew the flag).
	mustAcquire("b")
	mustRelease("b", false)
	if q, ttl := queued(), n.Client().PTTL(ctx, wake).Val(); q != 1 || ttl <= 0 || ttl > time.Second {
		t.Fatalf("after two releases nobody awaited: %d wake-ups, TTL %v; want 1, at most 1s", q, ttl)
	}
	if err := n.AwaitRelease(ctx, key, time.Second); err != nil || queued() != 0 {
		t.Fatalf("AwaitRelease with a wake-up waiting = %v, %d left; want it popped", err, queued())
	}
	// The wake-up was taken: the next release, while the flag lasts, wakes
	// again and renews the flag for its whole TTL, without a refusal.
	time.Sleep(200 * time.Millisecond)
	mustAcquire("c")
	mustRelease("c", true)
	if ttl := n.Client().PTTL(ctx, flag).Val(); ttl <= 1900*time.Millisecond {
		t.Fatalf("wait flag TTL %v after a release that woke; want it renewed to 2s", ttl)
	}
}

// TestReleaseWakesOneWaiter: of two waiters blocked on a key, a release
// wakes one; the other waits out its time, which no release cut short.
func TestReleaseWakesOneWaiter(t *testing.T) {
	n, key := newNode(t)
	ctx := t.Context()
	t.Cleanup(func() { n.Client().Del(context.Background(), redisnode.WakeKey(key)) })
	if tok, err := acquire1(ctx, n, key, "a"); err != nil || tok == 0 {
		t.Fatalf("AcquireIncr = %d, %v", tok, err)
	}
	// The waiters' refusal, which leaves the flag a release wakes by.
	if tok, err := acquire1(ctx, n, key, "b"); err != nil || tok != 0 {
		t.Fatalf("AcquireIncr on a held key = %d, %v; want refused", tok, err)
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
	if deleted, err := release1(ctx, n, key, "a", redisnode.WakeIfOurs); err != nil || !deleted {
		t.Fatalf("Release = %v, %v", deleted, err)
	}
	first, second := <-returned, <-returned
	// Wide margins: this checks which waiter a wake-up reached, not speed.
	if first >= wait*4/5 || second < wait*9/10 {
		t.Fatalf("waiters returned after %v and %v of %v; want one woken early, one at its time", first, second, wait)
	}
}

// TestCancelledWaiterPassesItsWakeUpOn: a waiter whose context is cancelled
// returns at once, though its pop stays blocked on the server (go-redis
// does not interrupt a blocking read for a cancellation); the wake-up that
// pop then takes, as the waiter blocked longest, is pushed back, and the
// other waiter is woken by it instead of sleeping out its wait. On a
// server of its own: the test counts the clients blocked on it.
func TestCancelledWaiterPassesItsWakeUpOn(t *testing.T) {
	ctx := t.Context()
	srv, err := stack.StartRedis(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	n := redisnode.New(srv.Addr(), time.Second)
	t.Cleanup(func() { _ = n.Close() })
	const key = "sku-1"
	if tok, err := acquire1(ctx, n, key, "a"); err != nil || tok == 0 {
		t.Fatalf("AcquireIncr = %d, %v", tok, err)
	}
	if tok, err := acquire1(ctx, n, key, "b"); err != nil || tok != 0 {
		t.Fatalf("AcquireIncr on a held key = %d, %v; want refused", tok, err)
	}
	const wait = time.Second
	cctx, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { left <- n.AwaitRelease(cctx, key, wait) }()
	blocked := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(wait / 2)
		for {
			info, err := n.Client().Info(ctx, "clients").Result()
			if err == nil && strings.Contains(info, fmt.Sprintf("blocked_clients:%d\r", want)) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %d blocked clients: %v\n%s", want, err, info)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	blocked(1) // the first waiter is the one blocked longest
	start := time.Now()
	woken := make(chan time.Duration, 1)
	go func() {
		if err := n.AwaitRelease(ctx, key, wait); err != nil {
			t.Errorf("second AwaitRelease = %v", err)
		}
		woken <- time.Since(start)
	}()
	blocked(2)
	cancel()
	select {
	case err := <-left:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled AwaitRelease = %v, want context.Canceled", err)
		}
	case <-time.After(wait / 4):
		t.Fatal("a cancelled AwaitRelease did not return at once")
	}
	if deleted, err := release1(ctx, n, key, "a", redisnode.WakeIfOurs); err != nil || !deleted {
		t.Fatalf("Release = %v, %v", deleted, err)
	}
	if d := <-woken; d >= wait*4/5 {
		t.Fatalf("the remaining waiter returned after %v of its %v: the wake-up went to the waiter that left", d, wait)
	}
}

// acquire1 is AcquireIncr of one key: its token, 0 when held.
func acquire1(ctx context.Context, n *redisnode.Node, key, id string) (uint64, error) {
	tokens, err := n.AcquireIncr(ctx, []redisnode.Hold{{Key: key, ID: id}}, time.Minute, time.Second)
	if err != nil {
		return 0, err
	}
	return tokens[0], nil
}

// release1 is Release of one key.
func release1(ctx context.Context, n *redisnode.Node, key, id string, wake redisnode.Wake) (bool, error) {
	d, _, err := n.Release(ctx, []redisnode.Hold{{Key: key, ID: id}}, []redisnode.Wake{wake}, nil, time.Minute)
	return d == 1, err
}

func TestAcquireIncr(t *testing.T) {
	n, key := newNode(t)
	ctx := t.Context()
	tok, err := acquire1(ctx, n, key, "a")
	if err != nil || tok != 1 {
		t.Fatalf("first AcquireIncr = %d, %v; want 1", tok, err)
	}
	if tok, err := acquire1(ctx, n, key, "b"); err != nil || tok != 0 {
		t.Fatalf("AcquireIncr on a held key = %d, %v; want 0", tok, err)
	}
	if v, _ := n.Client().Get(ctx, redisnode.FenceKey(key)).Result(); v != "1" {
		t.Fatalf("a refused acquisition moved the counter to %s", v)
	}
	if deleted, err := release1(ctx, n, key, "b", redisnode.WakeNone); err != nil || deleted {
		t.Fatalf("Release by a non-holder = %v, %v", deleted, err)
	}
	if err := n.Extend(ctx, key, "b", time.Minute); !errors.Is(err, redisnode.ErrNotHeld) {
		t.Fatalf("Extend by a non-holder = %v", err)
	}
	if err := n.Extend(ctx, key, "a", time.Minute); err != nil {
		t.Fatalf("Extend by the holder = %v", err)
	}
	if deleted, err := release1(ctx, n, key, "a", redisnode.WakeNone); err != nil || !deleted {
		t.Fatalf("Release by the holder = %v, %v", deleted, err)
	}
	if tok, _ := acquire1(ctx, n, key, "b"); tok != 2 {
		t.Fatalf("next AcquireIncr = %d; want 2", tok)
	}
}

// TestBatchCalls: one call per phase carries many keys, each with its own
// lease id and outcome; a held key in the batch does not affect the others.
func TestBatchCalls(t *testing.T) {
	n, base := newNode(t)
	ctx := t.Context()
	holds := []redisnode.Hold{{Key: base + "-a", ID: "a"}, {Key: base + "-b", ID: "b"}, {Key: base + "-c", ID: "c"}}
	t.Cleanup(func() {
		for _, h := range holds {
			n.Client().Del(context.Background(), redisnode.LockKey(h.Key), redisnode.FenceKey(h.Key),
				redisnode.WakeKey(h.Key), redisnode.WaitKey(h.Key))
		}
	})
	if err := n.Client().Set(ctx, redisnode.LockKey(base+"-b"), "other", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	grants, err := n.AcquireBump(ctx, redisnode.AcquireCall(holds, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !grants[0].Acquired || grants[1].Acquired || !grants[2].Acquired {
		t.Fatalf("AcquireBump = %+v; want a and c acquired, b held", grants)
	}
	for i, h := range holds {
		want := h.ID
		if i == 1 {
			want = "other"
		}
		if v, _ := n.Client().Get(ctx, redisnode.LockKey(h.Key)).Result(); v != want {
			t.Errorf("%s holds %q, want %q", h.Key, v, want)
		}
	}
	res, err := n.Fence(ctx, mustFenceCall(t, holds, []uint64{7, 8, 9}))
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != nil || !errors.Is(res[1], redisnode.ErrNotHeld) || res[2] != nil {
		t.Fatalf("Fence = %v; want nil, ErrNotHeld, nil", res)
	}
	ok, err := n.SetNX(ctx, holds, time.Minute)
	if err != nil || ok[0].Acquired || ok[1].Acquired || ok[2].Acquired || ok[0].Holder != "a" || ok[1].Holder != "other" {
		t.Fatalf("SetNX on held keys = %+v, %v; want all held, by a, other, c", ok, err)
	}
	// Refused on every key, which flags them all as waited for.
	refused := []redisnode.Hold{{Key: holds[0].Key, ID: "x"}, {Key: holds[1].Key, ID: "x"}, {Key: holds[2].Key, ID: "x"}}
	if tokens, err := n.AcquireIncr(ctx, refused, time.Minute, time.Second); err != nil || tokens[0] != 0 || tokens[1] != 0 || tokens[2] != 0 {
		t.Fatalf("AcquireIncr on held keys = %v, %v; want all refused", tokens, err)
	}
	deleted, woke, err := n.Release(ctx, holds, []redisnode.Wake{redisnode.WakeIfOurs, redisnode.WakeIfOurs, redisnode.WakeNone}, nil, time.Minute)
	if err != nil || deleted != 2 || !woke[0] || woke[1] || woke[2] {
		t.Fatalf("Release = %d, %v, %v; want a and c deleted, a's waiter woken", deleted, woke, err)
	}
	for i, want := range []int64{1, 0, 0} { // b was not ours, c was not asked to wake
		if got := n.Client().LLen(ctx, redisnode.WakeKey(holds[i].Key)).Val(); got != want {
			t.Errorf("%s: %d wake-ups, want %d", holds[i].Key, got, want)
		}
	}
}

// TestFence checks round 2's conditions: the counter is raised on every node
// that answers, but the raise counts only under our lock and only for a
// token above the counter, compared exactly even past 2^53.
func TestFence(t *testing.T) {
	n, key := newNode(t)
	ctx := t.Context()
	fence1 := func(id string, token uint64) error {
		t.Helper()
		res, err := n.Fence(ctx, mustFenceCall(t, []redisnode.Hold{{Key: key, ID: id}}, []uint64{token}))
		if err != nil {
			t.Fatalf("Fence(%s, %d): %v", id, token, err)
		}
		return res[0]
	}
	counter := func() string {
		v, _ := n.Client().Get(ctx, redisnode.FenceKey(key)).Result()
		return v
	}
	read := func(id string) redisnode.Grant {
		t.Helper()
		g, err := n.AcquireBump(ctx, redisnode.AcquireCall([]redisnode.Hold{{Key: key, ID: id}}, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return g[0]
	}
	if g := read("a"); g != (redisnode.Grant{Acquired: true, Bumped: true, Fence: 1}) {
		t.Fatalf("AcquireBump on a fresh key = %+v; want acquired and the counter bumped to 1", g)
	}
	if err := fence1("b", 5); !errors.Is(err, redisnode.ErrNotHeld) || counter() != "5" {
		t.Fatalf("Fence by a non-holder = %v, counter %s; want ErrNotHeld and the counter raised to 5", err, counter())
	}
	if err := fence1("b", 3); !errors.Is(err, redisnode.ErrNotHeld) || counter() != "5" {
		t.Fatalf("Fence by a non-holder below the counter = %v, counter %s; want it left at 5", err, counter())
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
		if err := fence1("a", c.token); !errors.Is(err, c.want) {
			t.Fatalf("Fence(%d) = %v, want %v", c.token, err, c.want)
		}
	}
	if g := read("b"); g.Acquired || g.Bumped || g.Fence != 1<<64-1 {
		t.Fatalf("AcquireBump on a held key = %+v; want not acquired, %d", g, uint64(1<<64-1))
	}
	if got := counter(); got != strconv.FormatUint(1<<64-1, 10) {
		t.Fatalf("counter %s", got)
	}
}

// TestAcquireBumpIncrements: round 1 increments the counter of each key it
// takes, and returns the counter exactly at any size: integers while Lua's
// doubles are exact, the counter read back past 2^53, and, where INCR
// refuses (at 2^63 − 1 and beyond, which round 2 may write), the counter
// read and left alone.
func TestAcquireBumpIncrements(t *testing.T) {
	n, key := newNode(t)
	ctx := t.Context()
	for _, c := range []struct {
		counter string // "" for none
		want    redisnode.Grant
		after   string
	}{
		{"", redisnode.Grant{Acquired: true, Bumped: true, Fence: 1}, "1"},
		{"41", redisnode.Grant{Acquired: true, Bumped: true, Fence: 42}, "42"},
		{"9007199254740991", redisnode.Grant{Acquired: true, Bumped: true, Fence: 1 << 53}, "9007199254740992"},
		{"9007199254740992", redisnode.Grant{Acquired: true, Bumped: true, Fence: 1<<53 + 1}, "9007199254740993"},
		{"9223372036854775807", redisnode.Grant{Acquired: true, Fence: 1<<63 - 1}, "9223372036854775807"},
		{"18446744073709551615", redisnode.Grant{Acquired: true, Fence: 1<<64 - 1}, "18446744073709551615"},
	} {
		n.Client().Del(ctx, redisnode.LockKey(key), redisnode.FenceKey(key))
		if c.counter != "" {
			n.Client().Set(ctx, redisnode.FenceKey(key), c.counter, 0)
		}
		g, err := n.AcquireBump(ctx, redisnode.AcquireCall([]redisnode.Hold{{Key: key, ID: "a"}}, time.Minute))
		if err != nil {
			t.Fatalf("counter %q: %v", c.counter, err)
		}
		if g[0] != c.want {
			t.Errorf("counter %q: AcquireBump = %+v, want %+v", c.counter, g[0], c.want)
		}
		if got, _ := n.Client().Get(ctx, redisnode.FenceKey(key)).Result(); got != c.after {
			t.Errorf("counter %q: %q after AcquireBump, want %q", c.counter, got, c.after)
		}
		// Held: the counter is read, not bumped.
		g, err = n.AcquireBump(ctx, redisnode.AcquireCall([]redisnode.Hold{{Key: key, ID: "b"}}, time.Minute))
		if err != nil || g[0].Acquired || g[0].Bumped || g[0].Holder != "a" || strconv.FormatUint(g[0].Fence, 10) != c.after {
			t.Errorf("counter %q: AcquireBump of the held key = %+v, %v; want held by a, %s", c.counter, g, err, c.after)
		}
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
	if _, err := n.AcquireIncr(t.Context(), []redisnode.Hold{{Key: "k", ID: "a"}}, time.Second, time.Second); err == nil {
		t.Fatal("AcquireIncr on a paused server succeeded")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a paused server held the call for %v with a 100 ms node timeout", d)
	}
}

// mustFenceCall is redisnode.FenceCall, failing the test on its error.
func mustFenceCall(tb testing.TB, holds []redisnode.Hold, tokens []uint64) redisnode.Call {
	tb.Helper()
	c, err := redisnode.FenceCall(holds, tokens)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// TestWakesChainWithoutRefusals: on a hot key the holders hand it on by
// wake-ups, and a Locker that wants the key back awaits one without being
// refused (retry's yield), so after the first refusal nobody is refused
// again. Each release that wakes renews the wait flag, so every release in
// the chain still wakes the one blocked, long after the refusal's flag
// would have run out.
func TestWakesChainWithoutRefusals(t *testing.T) {
	const timeout = 100 * time.Millisecond // the flag: 100ms await + 100ms node timeout
	n := redisnode.New(stacktest.RequireRedis(t)[0], timeout)
	t.Cleanup(func() { _ = n.Close() })
	key := fmt.Sprintf("node-test-%016x", rand.Uint64())
	t.Cleanup(func() {
		n.Client().Del(context.Background(), redisnode.LockKey(key), redisnode.FenceKey(key),
			redisnode.WakeKey(key), redisnode.WaitKey(key))
	})
	ctx := t.Context()
	acquire := func(id string) uint64 {
		t.Helper()
		tokens, err := n.AcquireIncr(ctx, []redisnode.Hold{{Key: key, ID: id}}, time.Minute, timeout)
		if err != nil {
			t.Fatal(err)
		}
		return tokens[0]
	}
	// Each hold under a lease id of its own, as Lockers give them: a hold
	// wakes at most once (its wake marker).
	holder, waiter := "a0", "b0"
	t.Cleanup(func() {
		for i := range 7 {
			n.Client().Del(context.Background(), redisnode.WokeKey(key, fmt.Sprintf("a%d", i)), redisnode.WokeKey(key, fmt.Sprintf("b%d", i)))
		}
	})
	if acquire(holder) == 0 || acquire(waiter) != 0 {
		t.Fatal("want a to hold and b to be refused")
	}
	for i := range 6 { // 6 × 100ms: three times the flag's TTL
		woken := make(chan error, 1)
		go func() { woken <- n.AwaitRelease(ctx, key, time.Second) }()
		time.Sleep(timeout) // the holder's hold; the waiter blocks
		deleted, woke, err := n.Release(ctx, []redisnode.Hold{{Key: key, ID: holder}}, []redisnode.Wake{redisnode.WakeIfOurs}, nil, time.Minute)
		if err != nil || deleted != 1 || !woke[0] {
			t.Fatalf("hand-off %d: Release = %d, %v, %v; want deleted and a waiter woken", i, deleted, woke, err)
		}
		start := time.Now()
		if err := <-woken; err != nil || time.Since(start) > time.Second/2 {
			t.Fatalf("hand-off %d: AwaitRelease = %v after %v; want woken at once", i, err, time.Since(start))
		}
		if acquire(waiter) == 0 {
			t.Fatalf("hand-off %d: the woken waiter was refused", i)
		}
		// The old holder now awaits the key back, as a new lease.
		holder, waiter = waiter, fmt.Sprintf("%c%d", holder[0], i+1)
	}
}

// TestConfirmingReleaseWakesOnce: a release whose call must be followed by
// one more (a write of unknown fate) wakes each key once: the second call
// confirms the deletes and wakes nobody, or a waiter would be sent into
// the lock with no release behind it.
func TestConfirmingReleaseWakesOnce(t *testing.T) {
	n, key := newNode(t)
	ctx := t.Context()
	other := key + "-late"
	t.Cleanup(func() {
		n.Client().Del(context.Background(), redisnode.WakeKey(key), redisnode.WakeKey(other), redisnode.LockKey(other))
	})
	holds := []redisnode.Hold{{Key: key, ID: "ours"}, {Key: other, ID: "ours-late"}}
	if _, err := n.AcquireIncr(ctx, holds[:1], time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	// A waiter blocked on each key takes the first wake-up; a second would
	// stay in the list.
	woken := make(chan error, 2)
	for _, k := range []string{key, other} {
		go func() { woken <- n.Client().BLPop(ctx, 5*time.Second, redisnode.WakeKey(k)).Err() }()
	}
	for deadline := time.Now().Add(5 * time.Second); blocked(t, n) < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiters never blocked")
		}
	}
	wake := []redisnode.Wake{redisnode.WakeAnyway, redisnode.WakeAnyway}
	written := []redisnode.Written{redisnode.Landed, redisnode.Unknown}
	if _, _, err := n.Release(ctx, holds, wake, written, time.Minute); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-woken; err != nil {
			t.Fatalf("a waiter was not woken: %v", err)
		}
	}
	for _, k := range []string{key, other} {
		if got := n.Client().LLen(ctx, redisnode.WakeKey(k)).Val(); got != 0 {
			t.Errorf("%s: %d wake-up(s) left after one release woke its waiter, want 0", k, got)
		}
	}
}

// blocked is the number of clients blocked on the node's server.
func blocked(t *testing.T, n *redisnode.Node) int {
	t.Helper()
	return int(infoField(t, n.Client(), "clients", "blocked_clients"))
}

// infoField is the numeric field of INFO section on c's server, -1 if absent.
func infoField(t *testing.T, c *goredis.Client, section, field string) int64 {
	t.Helper()
	info := c.Info(t.Context(), section).Val()
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			b, _ := strconv.ParseInt(v, 10, 64)
			return b
		}
	}
	return -1
}

// TestUnwokenWaitEndsCleanly: a wait that no release ends is ended by
// Redis's own BLPOP timeout (a nil reply, the connection kept), not by the
// client timing the read out. An idle Redis times blocked clients out only
// in its cron (hz 10, up to ~100 ms late); with Redlock's default node
// timeout (50 ms) a read deadline of d plus the node timeout fired first:
// the wait failed (its caller fell back to a slept pause), go-redis
// closed the connection, and the next wait dialled a new one.
func TestUnwokenWaitEndsCleanly(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	n := redisnode.New(srv.Addr(), 50*time.Millisecond)
	t.Cleanup(func() { _ = n.Close() })
	ctx := t.Context()
	key := "unwoken"
	_, _ = n.AwaitWake(ctx, key, 10*time.Millisecond) // dials the waits' connection
	before := infoField(t, n.Client(), "stats", "total_connections_received")
	const waits = 20
	var errs []string
	for i := range waits {
		d := 80*time.Millisecond + time.Duration(i)*8*time.Millisecond // 80–240 ms: retry.AwaitSpan × the default delay
		start := time.Now()
		woken, err := n.AwaitWake(ctx, key, d)
		if woken {
			t.Fatal("woken with no release")
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("%v after %v", err, time.Since(start).Round(time.Millisecond)))
		}
	}
	// The node's own client's connection is already counted; allow one
	// redial for a hiccup.
	dialled := infoField(t, n.Client(), "stats", "total_connections_received") - before
	if len(errs) > 0 || dialled > 1 {
		t.Errorf("%d of %d unwoken waits failed (%q); %d connections dialled", len(errs), waits, errs, dialled)
	}
	// A release still ends a wait at once.
	holds := []redisnode.Hold{{Key: key, ID: "ours"}}
	if _, err := n.AcquireIncr(ctx, holds, time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	time.AfterFunc(50*time.Millisecond, func() {
		_, _, err := n.Release(context.Background(), holds, []redisnode.Wake{redisnode.WakeAnyway}, nil, time.Minute)
		released <- err
	})
	start := time.Now()
	woken, err := n.AwaitWake(ctx, key, 800*time.Millisecond)
	if took := time.Since(start); !woken || err != nil || took > 400*time.Millisecond {
		t.Errorf("wait with a release after 50 ms: woken %v, err %v, after %v", woken, err, took)
	}
	if err := <-released; err != nil {
		t.Fatalf("Release: %v", err)
	}
}
