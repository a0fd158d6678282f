package memlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/memlock"
)

func TestConformance(t *testing.T) {
	locktest.Run(t, locktest.Config{
		New:       func(testing.TB) lock.Locker { return memlock.New() },
		Exclusive: true,
		FIFO:      true,
	})
}

// TestCloseEndsWaiters: Close answers an Acquire waiting for a held key,
// and every later one, with lock.ErrUnavailable; Ping says so too.
func TestCloseEndsWaiters(t *testing.T) {
	l := memlock.New()
	held := locktest.MustAcquire(t, l, "k")
	waiter := make(chan error, 1)
	go func() {
		_, err := l.Acquire(context.Background(), "k")
		waiter <- err
	}()
	time.Sleep(20 * time.Millisecond) // the waiter is in line
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waiter:
		if !errors.Is(err, lock.ErrUnavailable) {
			t.Fatalf("waiter after Close = %v, want ErrUnavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter still waiting 5 s after Close")
	}
	if _, err := l.Acquire(context.Background(), "other"); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Acquire after Close = %v, want ErrUnavailable", err)
	}
	if err := l.Ping(context.Background()); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Ping after Close = %v, want ErrUnavailable", err)
	}
	if !errors.Is(held.Err(), lock.ErrLeaseLost) {
		t.Errorf("held lease after Close: %v, want ErrLeaseLost", held.Err())
	}
	_ = held.Release(context.Background())
}
