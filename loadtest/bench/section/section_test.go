package section

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stockguard/stockguard/internal/metrics"
)

// instance serves a real service's collectors, as /metrics does.
func instance(t *testing.T) (*metrics.Metrics, string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "redlock")
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return m, srv.URL
}

// TestBetween: two instances' holds on one key, added, and what they
// leave of the window is the hand-offs.
func TestBetween(t *testing.T) {
	a, ua := instance(t)
	b, ub := instance(t)
	a.LockHeld(time.Second) // before the window: not counted
	meter := NewMeter([]string{ua, ub}, http.DefaultClient)
	ctx := context.Background()
	before, err := meter.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*metrics.Metrics{a, b, a, b} {
		m.LockHeld(1500 * time.Millisecond)
		m.StoreCall("claim", 100*time.Millisecond)
		m.StoreCall("write", 300*time.Millisecond)
		m.StoreCall("write", 500*time.Millisecond)
		m.Batch(10)
		m.Batch(20)
	}
	after, err := meter.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := Between(before, after, 1, 8*time.Second)
	want := Window{DurationS: 8, Holds: 4, HeldShare: 0.75, HoldMs: 1500, Claims: 4, ClaimMs: 100,
		Writes: 8, WriteMs: 400, OrdersPerHold: 30, HandOffMs: 500}
	if got != want {
		t.Fatalf("Between = %+v\nwant      %+v", got, want)
	}
	if w := Between(before, after, 1000, 8*time.Second); w.HandOffMs != 0 || w.HeldShare != 0.75 {
		t.Fatalf("over many keys: %+v; want no hand-off, the same share", w)
	}
}

// TestAcross: a window in two turns counts the holds within them, and
// the hand-offs are what the holds left of the turns' load (two turns of
// 2 s), not of the gap between them.
func TestAcross(t *testing.T) {
	a, ua := instance(t)
	meter := NewMeter([]string{ua}, http.DefaultClient)
	ctx := context.Background()
	snap := func() Snapshot {
		s, err := meter.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s0 := snap()
	a.LockHeld(1500 * time.Millisecond)
	a.Batch(10)
	s1 := snap()
	a.LockHeld(time.Hour) // between the turns: not counted
	s2 := snap()
	a.LockHeld(1500 * time.Millisecond)
	a.Batch(30)
	s3 := snap()
	got := Across([]Span{{s0, s1}, {s2, s3}}, 1, 4*time.Second)
	want := Window{DurationS: 4, Holds: 2, HeldShare: 0.75, HoldMs: 1500, OrdersPerHold: 20, HandOffMs: 500}
	if got != want {
		t.Fatalf("Across = %+v\nwant     %+v", got, want)
	}
}

// TestInstanceWithoutTheSeries: a /metrics without the hold series fails
// the snapshot rather than read as a key never held.
func TestInstanceWithoutTheSeries(t *testing.T) {
	srv := httptest.NewServer(promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{}))
	defer srv.Close()
	if _, err := NewMeter([]string{srv.URL}, http.DefaultClient).Snapshot(context.Background()); !errors.Is(err, ErrNoSeries) {
		t.Fatalf("err = %v, want ErrNoSeries", err)
	}
}

// TestHostileInstance: an endless /metrics fails the snapshot at the bound
// instead of being summed cut short, and one that never answers fails it
// at the client's timeout.
func TestHostileInstance(t *testing.T) {
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line := []byte("# HELP x y\n")
		for range maxBody/len(line) + 2 {
			if _, err := w.Write(line); err != nil {
				return
			}
		}
	}))
	defer endless.Close()
	if _, err := NewMeter([]string{endless.URL}, http.DefaultClient).Snapshot(context.Background()); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("endless body: err = %v, want ErrTooLarge", err)
	}
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(hang)
	began := time.Now()
	_, err := NewMeter([]string{slow.URL}, &http.Client{Timeout: 200 * time.Millisecond}).Snapshot(context.Background())
	if err == nil || time.Since(began) > 5*time.Second {
		t.Fatalf("silent instance: err = %v after %v, want a timeout", err, time.Since(began))
	}
}
