package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stockguard/stockguard/internal/lock"
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

// TestLockProbeHungPingCountsDown: once a ping outlives its timeout (a lock
// server that accepts and never replies, a client call that ignores its
// context), the gauge and Last, which /readyz shows, say down for as long
// as it hangs; when it returns at last, its own answer is the one kept.
func TestLockProbeHungPingCountsDown(t *testing.T) {
	var hang atomic.Bool
	block := make(chan struct{})
	ping := func(ctx context.Context) error {
		if hang.Load() {
			<-block // ignores ctx
		}
		return nil
	}
	p := NewLockProbe(prometheus.NewRegistry(), "zookeeper", ping, 50*time.Millisecond)
	if h := p.Check(context.Background()); !h.Healthy {
		t.Fatalf("first check: %+v", h)
	}
	first := p.Last(context.Background()).CheckedAt
	hang.Store(true)
	for i := range 3 {
		if h := p.Check(context.Background()); h.Healthy || h.CheckedAt.IsZero() {
			t.Fatalf("check %d while the ping hangs: %+v, want unhealthy, with when it gave up", i, h)
		}
	}
	if g := testutil.ToFloat64(p.up); g != 0 {
		t.Errorf("while the ping hangs: stockguard_lock_backend_up = %v, want 0", g)
	}
	if h := p.Last(context.Background()); h.Healthy || !strings.Contains(h.Reason, "unanswered") || !h.CheckedAt.After(first) {
		t.Errorf("while the ping hangs: Last() = %+v, want unhealthy, unanswered, checked after the first check", h)
	}

	hang.Store(false)
	close(block) // the hung ping returns: the server answered after all
	for deadline := time.Now().Add(5 * time.Second); !p.Last(context.Background()).Healthy; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the late ping's answer never replaced the timeout's: %+v", p.Last(context.Background()))
		}
	}
	if g := testutil.ToFloat64(p.up); g != 1 {
		t.Errorf("after the late ping answered: stockguard_lock_backend_up = %v, want 1", g)
	}
}

// TestLockHealthNamesNoServer: /readyz answers anyone, so the lock part of
// its body says why the ping failed without the error's text, which names
// every lock node and how dialing it failed; that text stays in Error, for
// the log.
func TestLockHealthNamesNoServer(t *testing.T) {
	nodeErr := fmt.Errorf("redlock: ping: no quorum (0/3): %w: %w", lock.ErrUnavailable,
		&lock.NodeError{Node: "10.0.0.7:6379", Err: errors.New("dial tcp 10.0.0.7:6379: connect: connection refused")})
	for _, tc := range []struct {
		name   string
		err    error
		reason string
	}{
		{"backend unavailable", nodeErr, "lock: backend unavailable"},
		{"ping's own deadline", fmt.Errorf("etcd: ping: %w", context.DeadlineExceeded), "health ping unanswered after 1s"},
		{"anything else", errors.New("zk: could not connect to 10.0.0.8:2181"), "health ping failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewLockProbe(prometheus.NewRegistry(), "redlock", func(context.Context) error { return tc.err }, time.Second)
			h := p.Check(context.Background())
			if h.Healthy || h.Reason != tc.reason || h.Error != tc.err.Error() {
				t.Errorf("Check = %+v, want reason %q and the error whole", h, tc.reason)
			}
			b, err := json.Marshal(p.Last(context.Background()))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "10.0.0.") || strings.Contains(string(b), "dial") || !strings.Contains(string(b), `"error":"`+tc.reason+`"`) {
				t.Errorf("what /readyz shows: %s, want error %q and no server named", b, tc.reason)
			}
		})
	}
}
