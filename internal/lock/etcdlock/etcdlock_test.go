package etcdlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
)

func TestConformance(t *testing.T) {
	insp := inspector(t)
	locktest.Run(t, locktest.Config{
		New:         func(tb testing.TB) lock.Locker { return mustLocker(tb) },
		Exclusive:   true,
		FIFO:        true,
		Distributed: true,
		Lose: func(t *testing.T, l lock.Locker, _ *lock.Lease) {
			revoke(t, insp, l.(*Locker))
		},
	})
}

// A session's end takes every lease on it, and the Locker goes on in a new
// session with tokens still increasing.
func TestSessionLossLosesEveryLease(t *testing.T) {
	insp := inspector(t)
	l := mustLocker(t)
	a := locktest.MustAcquire(t, l, locktest.Key(t))
	b := locktest.MustAcquire(t, l, locktest.Key(t))
	old := sessionLease(l)
	revoke(t, insp, l)
	for _, lease := range []*lock.Lease{a, b} {
		select {
		case <-lease.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Done not closed 10 s after its session was revoked", lease.Key())
		}
		if !errors.Is(lease.Err(), lock.ErrLeaseLost) {
			t.Fatalf("%s: Err() = %v, want ErrLeaseLost", lease.Key(), lease.Err())
		}
		if err := lease.Release(context.Background()); err != nil {
			t.Fatalf("release of a lost lease: %v", err)
		}
	}
	next := locktest.MustAcquire(t, l, a.Key(), lock.TryOnce())
	defer locktest.MustRelease(t, next)
	if sessionLease(l) == old {
		t.Fatal("the Locker kept the revoked session")
	}
	if next.Token() <= a.Token() {
		t.Fatalf("token %d in the new session after %d", next.Token(), a.Token())
	}
	if err := l.Ping(context.Background()); err != nil {
		t.Fatalf("Ping after a new session: %v", err)
	}
}

func TestInvalidKeys(t *testing.T) {
	l := mustLocker(t)
	for _, key := range []string{"", "a/b"} {
		if _, err := l.Acquire(context.Background(), key); !errors.Is(err, lock.ErrInvalidKey) {
			t.Errorf("Acquire(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
	if _, err := l.AcquireBatch(context.Background(), []string{"ok", "a/b"}); !errors.Is(err, lock.ErrInvalidKey) {
		t.Errorf("AcquireBatch with a slash = %v, want ErrInvalidKey", err)
	}
}

func TestUnavailableWithoutCluster(t *testing.T) {
	l, err := New([]string{"127.0.0.1:1"}, WithDialTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatalf("New returns at once, whatever the endpoints: %v", err)
	}
	defer l.Close()
	start := time.Now()
	if err := l.Ping(context.Background()); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Ping on a dead endpoint = %v, want ErrUnavailable", err)
	}
	if _, err := l.Acquire(context.Background(), "k", lock.TryOnce()); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Acquire on a dead endpoint = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v to give up; the dial timeout is 300 ms", d)
	}
}
