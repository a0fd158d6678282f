package zklock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
)

// TestParentsAreContainers checks that a key's parent is left to the
// servers: emptied once everyone has left, whoever left last; and that
// Lockers whose hints still say "present" create it again once reaped.
func TestParentsAreContainers(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	a, b, c := mustLocker(t, servers), mustLocker(t, servers), mustLocker(t, servers)
	var used []string
	emptied := func(t *testing.T, k string) {
		t.Helper()
		if names := children(t, insp, k); len(names) > 0 {
			t.Fatalf("nodes left under %s: %v", k, names)
		}
		used = append(used, k)
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
		emptied(t, k)
	})

	t.Run("WaitersGiveUpAfterHolder", func(t *testing.T) {
		k := key(t)
		holder := mustAcquire(t, a, k)
		w1, w2 := giveUpAfter(b, k, 300*time.Millisecond), giveUpAfter(c, k, 300*time.Millisecond)
		for _, errc := range []chan error{w1, w2} {
			if err := <-errc; !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("waiter past its deadline = %v", err)
			}
		}
		mustRelease(t, holder)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := b.Acquire(ctx, k); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Acquire = %v", err)
		}
		emptied(t, k)
	})

	t.Run("Batch", func(t *testing.T) {
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
			emptied(t, k)
		}
	})

	if t.Failed() {
		return
	}
	// Reap the emptied parents as the servers' container manager does
	// (a delete that fails on a parent with children), at once rather than
	// within a minute; TestNodeFailures/Reaped sees the servers do it.
	for _, k := range used {
		if err := insp.Delete(testRoot+"/"+k, -1); err != nil {
			t.Fatalf("reap %s: %v", k, err)
		}
	}

	// a, b and c still hint every parent present: their creates fail with
	// ErrNoNode, and must recreate the parent, alone and in a batch.
	for _, k := range used[:2] {
		mustRelease(t, mustAcquire(t, a, k))
	}
	batch, err := b.AcquireBatch(context.Background(), used[2:])
	if err != nil {
		t.Fatalf("batch over reaped parents: %v", err)
	}
	if len(batch.Leases) != len(used)-2 {
		t.Fatalf("batch over reaped parents: %d leases, held %v", len(batch.Leases), batch.Held)
	}
	if err := batch.Leases.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
