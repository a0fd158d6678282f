package zklock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
)

// TestParentRemovedByLastToLeave checks that a key's parent goes with the
// last node under it, whoever leaves last.
func TestParentRemovedByLastToLeave(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	a, b, c := mustLocker(t, servers), mustLocker(t, servers), mustLocker(t, servers)
	parentGone := func(t *testing.T, k string) {
		t.Helper()
		if ok, _ := exists(t, insp, testRoot+"/"+k); ok {
			t.Fatalf("parent of %s left: %v", k, children(t, insp, k))
		}
	}
	giveUpAfter := func(l *Locker, k string, d time.Duration) chan error {
		errc := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			_, err := l.Acquire(ctx, k)
			errc <- err
		}()
		return errc
	}

	t.Run("HolderAfterWaitersGaveUp", func(t *testing.T) {
		// The holder was granted with a waiter behind it, which then gave
		// up: the holder, released last, must remove the parent.
		k := key(t)
		first := mustAcquire(t, a, k)
		granted := make(chan *lock.Lease, 1)
		go func() { granted <- mustAcquire(t, b, k) }()
		waitFor(t, 5*time.Second, "b queued", func() bool { return len(children(t, insp, k)) == 2 })
		gaveUp := giveUpAfter(c, k, 500*time.Millisecond)
		waitFor(t, 5*time.Second, "c queued", func() bool { return len(children(t, insp, k)) == 3 })
		mustRelease(t, first)
		holder := <-granted // granted with c behind it
		if err := <-gaveUp; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiter past its deadline = %v", err)
		}
		mustRelease(t, holder)
		parentGone(t, k)
	})

	t.Run("WaitersGiveUpAfterHolder", func(t *testing.T) {
		// Waiters behind a holder give up; the holder leaves; a cancelled
		// acquisition that comes and goes on the free key leaves nothing.
		k := key(t)
		holder := mustAcquire(t, a, k)
		w1, w2 := giveUpAfter(b, k, 300*time.Millisecond), giveUpAfter(c, k, 300*time.Millisecond)
		for _, errc := range []chan error{w1, w2} {
			if err := <-errc; !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("waiter past its deadline = %v", err)
			}
		}
		mustRelease(t, holder)
		parentGone(t, k)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := b.Acquire(ctx, k); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Acquire = %v", err)
		}
		parentGone(t, k)
	})

	t.Run("Batch", func(t *testing.T) {
		// A batch's nodes for held keys go at once; its leases and the
		// holders remove every parent when they go.
		base := key(t)
		keys := []string{base + "-a", base + "-b", base + "-c"}
		held := mustAcquire(t, a, keys[1])
		batch, err := b.AcquireBatch(context.Background(), keys)
		if err != nil {
			t.Fatal(err)
		}
		if len(batch.Held) != 1 || batch.Held[0] != keys[1] {
			t.Fatalf("held = %v, want %s", batch.Held, keys[1])
		}
		if names := children(t, insp, keys[1]); len(names) != 1 {
			t.Fatalf("held key's queue after the batch: %v, want the holder only", names)
		}
		mustRelease(t, held)
		if err := batch.Leases.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			parentGone(t, k)
		}
	})
}
