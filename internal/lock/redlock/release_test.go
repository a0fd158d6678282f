package redlock_test

import (
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/redlock"
)

// TestReleaseWaitsForItsOwnDeletes: a lease granted by exactly a majority
// (the other nodes hold another value, as a straggling delete leaves it) is
// released once a majority of its own deletes is confirmed, not as soon as
// the nodes that refused it and one delete count as clear: the next try
// would meet our value still standing, split, and pause. A node of ours
// that does not answer holds the release up by a split's pause at most.
func TestReleaseWaitsForItsOwnDeletes(t *testing.T) {
	c := startCluster(t, 5)
	const retryDelay = 400 * time.Millisecond // a split's pause: a quarter, 100 ms
	l := newLocker(t, c.addrs, redlock.WithRetryDelay(retryDelay))
	warm(t, l)
	raw := rawClients(t, c.addrs)
	for _, tc := range []struct {
		name     string
		frozen   time.Duration // node 2, one of the lease's three, paused for
		min, max time.Duration // the release's time
	}{
		{"answers within the pause", 75 * time.Millisecond, 50 * time.Millisecond, time.Second},
		{"frozen past it", 2 * time.Second, 0, 700 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := locktest.Key(t)
			raw.holdElsewhere(t, key, 3, 4)
			lease := locktest.MustAcquire(t, l, key)
			if n := count(raw.lockValues(t, key), lease.ID().String()); n != 3 {
				t.Fatalf("the lease holds %d nodes, want 3", n)
			}
			c.pause(t, 2)
			resumed := make(chan struct{})
			go func() {
				defer close(resumed)
				time.Sleep(tc.frozen)
				_ = c.srv[2].Cont()
			}()
			start := time.Now()
			err := lease.Release(t.Context())
			took := time.Since(start)
			<-resumed
			if err != nil {
				t.Fatal(err)
			}
			if took < tc.min || took > tc.max {
				t.Fatalf("release took %v with node 2 frozen for %v, want %v..%v", took, tc.frozen, tc.min, tc.max)
			}
			waitValues(t, raw, key, []string{"", "", "", "other", "other"}, 2*time.Second)
		})
	}
}
