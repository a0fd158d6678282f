package metrics

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestLockProbe(t *testing.T) {
	reg := prometheus.NewRegistry()
	var down atomic.Bool
	var pings atomic.Int64
	ping := func(ctx context.Context) error {
		pings.Add(1)
		if _, ok := ctx.Deadline(); !ok {
			t.Error("ping without a deadline")
		}
		if down.Load() {
			return errors.New("redlock: 0 of 5 nodes answered")
		}
		return nil
	}
	p := NewLockProbe(reg, "redlock", ping, time.Second)
	gauge := func() float64 {
		return testutil.ToFloat64(p.up)
	}
	if gauge() != 0 {
		t.Errorf("before the first check: %v, want 0", gauge())
	}
	if h := p.Check(context.Background()); h.Backend != "redlock" || !h.Healthy || h.Error != "" || h.CheckedAt.IsZero() || gauge() != 1 {
		t.Errorf("up: %+v, gauge %v", h, gauge())
	}
	down.Store(true)
	if h := p.Check(context.Background()); h.Healthy || h.Error == "" || gauge() != 0 {
		t.Errorf("down: %+v, gauge %v", h, gauge())
	}

	// Run checks at once and on every tick, and returns when ctx ends.
	down.Store(false)
	before := pings.Load()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx, 10*time.Millisecond)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for pings.Load() < before+3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if pings.Load() < before+3 || gauge() != 1 {
		t.Errorf("Run: %d pings, gauge %v", pings.Load()-before, gauge())
	}
	if n, err := testutil.GatherAndCount(reg, "stockguard_lock_backend_up"); err != nil || n != 1 {
		t.Errorf("registered series: %d, %v", n, err)
	}
}

// TestLockProbeSharesOnePing: callers that come while a ping is in flight
// share it, so a slow lock server holds none of them past one timeout,
// however many there are.
func TestLockProbeSharesOnePing(t *testing.T) {
	var pings atomic.Int64
	release := make(chan struct{})
	ping := func(ctx context.Context) error {
		pings.Add(1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	const timeout = 300 * time.Millisecond
	p := NewLockProbe(prometheus.NewRegistry(), "zookeeper", ping, timeout)
	const callers = 20
	start := time.Now()
	results := make(chan LockHealth, callers)
	for range callers {
		go func() { results <- p.Check(context.Background()) }()
	}
	for range callers {
		if h := <-results; h.Healthy || h.Error == "" {
			t.Errorf("a ping cut by its timeout reported %+v, want unhealthy with the reason", h)
		}
	}
	if took := time.Since(start); took > 3*timeout {
		t.Errorf("%d concurrent checks took %v, want about one timeout (%v)", callers, took, timeout)
	}
	if n := pings.Load(); n > 2 {
		t.Errorf("%d concurrent checks made %d pings, want them to share one", callers, n)
	}

	// The callers' timers and the ping's own timeout end together; let that
	// ping finish, or the checks below may join it and see its deadline
	// (its select finds both release and its context done).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		p.mu.Lock()
		idle := p.inflight == nil
		p.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the timed-out ping never ended")
		}
	}

	// A caller that leaves is answered at once; the ping goes on for the others.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if h := p.Check(ctx); h.Healthy || !strings.Contains(h.Error, "cut short") {
		t.Errorf("a cancelled caller got %+v, want unhealthy, cut short", h)
	}
	close(release)
	if h := p.Check(context.Background()); !h.Healthy {
		t.Errorf("after the server answers again: %+v, want healthy", h)
	}
}

// TestLockProbeLastDoesNotWait: Last answers with the last check at once,
// however long the ping now in flight hangs; before any check it checks.
func TestLockProbeLastDoesNotWait(t *testing.T) {
	release := make(chan struct{})
	var hang atomic.Bool
	ping := func(ctx context.Context) error {
		if hang.Load() {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return errors.New("zookeeper: no answer")
		}
		return nil
	}
	p := NewLockProbe(prometheus.NewRegistry(), "zookeeper", ping, 2*time.Second)
	if h := p.Last(context.Background()); !h.Healthy || h.CheckedAt.IsZero() {
		t.Fatalf("Last before any check: %+v, want a check made", h)
	}
	hang.Store(true)
	go p.Check(context.Background()) // the periodic probe, hanging
	defer close(release)
	start := time.Now()
	if h := p.Last(context.Background()); !h.Healthy || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("Last while a ping hangs: %+v after %v; want the last answer at once", h, time.Since(start))
	}
}
