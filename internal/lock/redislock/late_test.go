package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/redislock"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/stack"
)

// TestPausedServerAcquireLeavesNoKey: an Acquire whose deadline ends while
// the server is paused returns at its deadline (its attempt's node
// timeout, then its clean-up only until the deadline), says its clean-up
// is pending (lock.ErrCleanupPending), and once the server resumes and runs
// the attempt's lock write, the clean-up deletes it: the next Acquire gets
// the key at once, not after the TTL.
func TestPausedServerAcquireLeavesNoKey(t *testing.T) {
	t.Parallel()
	srv, err := stack.StartRedis(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	raw := rawClient(t, srv.Addr())
	l := newLocker(t, srv.Addr(), redislock.WithNodeTimeout(200*time.Millisecond))
	key := locktest.Key(t)
	// Load the script and leave an answered connection in the pool, so the
	// lock write gets as far as the paused server.
	locktest.MustRelease(t, locktest.MustAcquire(t, l, key+"-warm"))
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Cont() })
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = l.Acquire(ctx, key)
	took := time.Since(start)
	if err := srv.Cont(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrCleanupPending) {
		t.Errorf("Acquire with the server paused = %v; want its deadline with lock.ErrCleanupPending", err)
	}
	if took > 550*time.Millisecond {
		t.Errorf("Acquire with a 300 ms deadline returned after %v", took)
	}
	time.Sleep(50 * time.Millisecond) // the late SET runs
	for deadline := time.Now().Add(2 * time.Second); raw.Exists(t.Context(), redisnode.LockKey(key)).Val() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("2 s after the server resumed the attempt's key stands (PTTL %v)", raw.PTTL(t.Context(), redisnode.LockKey(key)).Val())
		}
	}
	next, err := newLocker(t, srv.Addr()).Acquire(t.Context(), key, lock.TryOnce())
	if err != nil {
		t.Fatalf("the next Acquire: %v", err)
	}
	locktest.MustRelease(t, next)
}
