package metrics

import (
	"context"
	"errors"
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
	if h := p.Check(context.Background()); h != (LockHealth{Backend: "redlock", Healthy: true}) || gauge() != 1 {
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
