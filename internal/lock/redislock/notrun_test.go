package redislock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/redislock"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/stack"
)

// startRedis starts a test-owned server, stopped when the test ends.
func startRedis(t *testing.T, dir string) *stack.Redis {
	t.Helper()
	srv, err := stack.StartRedis(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// busyFor runs a read-only script on srv that spins for d, and returns
// when the server is silent to every other client for threshold, then
// answers them -BUSY; the channel gets the script's outcome.
func busyFor(t *testing.T, addr string, threshold, d time.Duration) <-chan error {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true, ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.ConfigSet(t.Context(), "busy-reply-threshold", strconv.FormatInt(threshold.Milliseconds(), 10)).Err(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- c.Eval(context.Background(), `
local s = redis.call('TIME')
while true do
  local n = redis.call('TIME')
  if (n[1]-s[1])*1000000 + (n[2]-s[2]) > tonumber(ARGV[1]) then break end
end
return 1`, nil, d.Microseconds()).Err()
	}()
	return done
}

// waitKeyGone fails the test unless key's lock is gone within d.
func waitKeyGone(t *testing.T, raw *goredis.Client, key string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		n, err := raw.Exists(t.Context(), redisnode.LockKey(key)).Result()
		if err == nil && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after the server was free again the released key still stands (PTTL %v, err %v)",
				d, raw.PTTL(t.Context(), redisnode.LockKey(key)).Val(), err)
		}
	}
}

// TestReleaseOnBusyServerFreesKey: a release the server turns away with
// -BUSY (another client's script past busy-reply-threshold) did not run;
// it goes on in the background (lock.ErrCleanupPending) and lands once the
// server is free, instead of leaving the key held for its whole TTL.
func TestReleaseOnBusyServerFreesKey(t *testing.T) {
	srv := startRedis(t, t.TempDir())
	raw := rawClient(t, srv.Addr())
	l := newLocker(t, srv.Addr(), redislock.WithTTL(10*time.Second), redislock.WithNodeTimeout(200*time.Millisecond))
	key := locktest.Key(t)
	lease := locktest.MustAcquire(t, l, key)

	done := busyFor(t, srv.Addr(), 20*time.Millisecond, 300*time.Millisecond)
	time.Sleep(60 * time.Millisecond) // past the threshold: -BUSY now
	err := lease.Release(context.Background())
	if !errors.Is(err, lock.ErrCleanupPending) {
		t.Errorf("Release while the server answers -BUSY = %v, want lock.ErrCleanupPending", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("busy script: %v", err)
	}
	waitKeyGone(t, raw, key, time.Second)
}

// TestBackgroundDeleteOutlastsBusyReply: a delete handed to the background
// (the server silent past the node timeout) that then meets -BUSY keeps
// going, and lands once the server is free.
func TestBackgroundDeleteOutlastsBusyReply(t *testing.T) {
	srv := startRedis(t, t.TempDir())
	raw := rawClient(t, srv.Addr())
	l := newLocker(t, srv.Addr(), redislock.WithTTL(10*time.Second), redislock.WithNodeTimeout(100*time.Millisecond))
	key := locktest.Key(t)
	lease := locktest.MustAcquire(t, l, key)

	done := busyFor(t, srv.Addr(), 600*time.Millisecond, 1200*time.Millisecond)
	time.Sleep(30 * time.Millisecond) // the script runs: silence for 600 ms, then -BUSY
	if err := lease.Release(context.Background()); !errors.Is(err, lock.ErrCleanupPending) {
		t.Fatalf("Release while the server is silent = %v, want lock.ErrCleanupPending", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("busy script: %v", err)
	}
	waitKeyGone(t, raw, key, time.Second)
}

// TestBackgroundDeleteOutlastsRestartLoading: a lease released while its
// server is down (persistence on: the key comes back from disk) goes on in
// the background, meets -LOADING while the restarted server reads its
// dataset, and lands once it is loaded.
func TestBackgroundDeleteOutlastsRestartLoading(t *testing.T) {
	srv := startRedis(t, t.TempDir())
	raw := rawClient(t, srv.Addr())
	ctx := t.Context()
	// Enough data that loading takes longer than the background's longest
	// pause, so that it meets -LOADING.
	for c := range 8 {
		if err := raw.Eval(ctx, `for i = 1, 150000 do redis.call('ZADD', KEYS[1], i, i) end return 1`,
			[]string{"junk:" + string(rune('a'+c))}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	l := newLocker(t, srv.Addr(), redislock.WithTTL(10*time.Second))
	key := locktest.Key(t)
	lease := locktest.MustAcquire(t, l, key)
	if err := raw.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(context.Background()); !errors.Is(err, lock.ErrCleanupPending) {
		t.Fatalf("Release with the server down = %v, want lock.ErrCleanupPending", err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	loading := false
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := raw.Ping(ctx).Err()
		if err == nil {
			break
		}
		loading = loading || goredis.IsLoadingError(err)
		if time.Now().After(deadline) {
			t.Fatalf("restarted server not loaded after 20 s: %v", err)
		}
	}
	if !loading {
		t.Log("the restarted server never answered -LOADING: it loaded too quickly for this test")
	}
	waitKeyGone(t, raw, key, time.Second)
}

// TestAcquireOnBusyServerLeavesNothingPending: an attempt the server turns
// away with -BUSY did not run, so there is nothing to clean up: the error
// wraps lock.ErrUnavailable and not lock.ErrCleanupPending.
func TestAcquireOnBusyServerLeavesNothingPending(t *testing.T) {
	srv := startRedis(t, t.TempDir())
	raw := rawClient(t, srv.Addr())
	l := newLocker(t, srv.Addr(), redislock.WithNodeTimeout(200*time.Millisecond))
	key := locktest.Key(t)

	done := busyFor(t, srv.Addr(), 20*time.Millisecond, 300*time.Millisecond)
	time.Sleep(60 * time.Millisecond)
	_, err := l.Acquire(t.Context(), key, lock.TryOnce())
	if !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrCleanupPending) {
		t.Errorf("Acquire while the server answers -BUSY = %v, want lock.ErrUnavailable without lock.ErrCleanupPending", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("busy script: %v", err)
	}
	if n := raw.Exists(t.Context(), redisnode.LockKey(key)).Val(); n != 0 {
		t.Errorf("the refused attempt left its key")
	}
}

// TestPingWarnsOfEvictingPolicy: a server with maxmemory set and a policy
// that evicts (volatile-* picks the lock keys, which all have a TTL) gets
// one warning naming the node and the policy, at the first Ping; one that
// cannot evict gets none.
func TestPingWarnsOfEvictingPolicy(t *testing.T) {
	srv := startRedis(t, t.TempDir())
	raw := rawClient(t, srv.Addr())
	for _, c := range []struct {
		maxmemory, policy string
		warn              bool
	}{
		{"0", "noeviction", false},
		{"0", "allkeys-lru", false}, // no limit: nothing is evicted
		{"64mb", "noeviction", false},
		{"64mb", "volatile-lru", true},
		{"64mb", "allkeys-lru", true},
	} {
		if err := raw.ConfigSet(t.Context(), "maxmemory", c.maxmemory).Err(); err != nil {
			t.Fatal(err)
		}
		if err := raw.ConfigSet(t.Context(), "maxmemory-policy", c.policy).Err(); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		l := newLocker(t, srv.Addr(), redislock.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
		for range 2 {
			if err := l.Ping(t.Context()); err != nil {
				t.Fatalf("Ping: %v", err)
			}
		}
		warnings := strings.Count(buf.String(), "level=WARN")
		switch {
		case c.warn && (warnings != 1 || !strings.Contains(buf.String(), srv.Addr()) || !strings.Contains(buf.String(), c.policy)):
			t.Errorf("maxmemory %s, %s: two Pings logged %q; want one warning naming the node and the policy", c.maxmemory, c.policy, buf.String())
		case !c.warn && warnings != 0:
			t.Errorf("maxmemory %s, %s: Ping logged %q; want no warning", c.maxmemory, c.policy, buf.String())
		}
	}
}
