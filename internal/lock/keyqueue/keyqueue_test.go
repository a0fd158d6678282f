package keyqueue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestFIFOAndTryOnce(t *testing.T) {
	q := New()
	done, err := q.Wait(t.Context(), "k", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Wait(t.Context(), "k", true); !errors.Is(err, ErrBusy) {
		t.Fatalf("tryOnce on a busy key = %v, want ErrBusy", err)
	}
	if d, err := q.Wait(t.Context(), "other", true); err != nil {
		t.Fatalf("independent key: %v", err)
	} else {
		d()
	}

	// Waiters queue up one by one; they must get the head in that order.
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range 5 {
		wg.Go(func() {
			d, err := q.Wait(context.Background(), "k", false)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			d()
		})
		waitRefs(t, q, "k", i+2)
	}
	done()
	done() // idempotent
	wg.Wait()
	for i, v := range order {
		if v != i {
			t.Fatalf("order %v, want arrival order", order)
		}
	}
	if len(q.lines) != 0 {
		t.Fatalf("%d lines left", len(q.lines))
	}
}

func TestCancelledWaiterLeaves(t *testing.T) {
	q := New()
	done, _ := q.Wait(t.Context(), "k", false)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := q.Wait(ctx, "k", false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past deadline = %v", err)
	}
	done()
	if len(q.lines) != 0 {
		t.Fatal("a cancelled waiter stayed in line")
	}
}

func waitRefs(t *testing.T, q *Queue, key string, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		q.mu.Lock()
		l := q.lines[key]
		ok := l != nil && l.refs == n
		q.mu.Unlock()
		if ok {
			time.Sleep(2 * time.Millisecond) // let the goroutine block in its send
			return
		}
	}
	t.Fatalf("line %q never reached %d", key, n)
}
