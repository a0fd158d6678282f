package lockmetrics

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stockguard/stockguard/internal/lock"
)

func TestReason(t *testing.T) {
	held := fmt.Errorf("x: %w", lock.ErrNotAcquired)
	down := fmt.Errorf("x: %w", lock.ErrUnavailable)
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", lock.ErrInvalidKey), ReasonInvalidKey},
		{held, ReasonNotAcquired},
		{down, ReasonUnavailable},
		{fmt.Errorf("%w; last attempt: %w", context.DeadlineExceeded, down), ReasonUnavailable},
		{fmt.Errorf("%w; last attempt: %w", context.DeadlineExceeded, held), ReasonNotAcquired},
		{fmt.Errorf("x: %w", context.Canceled), ReasonCancelled},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), ReasonCancelled},
	} {
		if got := Reason(c.err); got != c.want {
			t.Errorf("Reason(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

// TestSeriesExistBeforeTheFirstFailure: a failure reason whose series
// appears with its first failure loses that failure to rate(), and the
// dashboard's panel over it reads No data on a healthy instance.
func TestSeriesExistBeforeTheFirstFailure(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if _, err := New(reg, "redlock"); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	want.WriteString("# HELP stockguard_lock_acquire_failures_total Acquire calls that returned an error, by reason (invalid_key, not_acquired, cancelled, unavailable).\n")
	want.WriteString("# TYPE stockguard_lock_acquire_failures_total counter\n")
	for _, r := range []string{ReasonCancelled, ReasonInvalidKey, ReasonNotAcquired, ReasonUnavailable} {
		fmt.Fprintf(&want, "stockguard_lock_acquire_failures_total{backend=\"redlock\",reason=%q} 0\n", r)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want.String()), "stockguard_lock_acquire_failures_total"); err != nil {
		t.Error(err)
	}
}

// Two backends, and two Lockers of one backend, may share a registry.
func TestSharedRegistry(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	for _, backend := range []string{"redis", "redlock", "redlock"} {
		m, err := New(reg, backend)
		if err != nil {
			t.Fatalf("New(%s): %v", backend, err)
		}
		m.Attempt()
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "stockguard_lock_acquire_attempts_total" {
			for _, m := range mf.GetMetric() {
				got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if got["redis"] != 1 || got["redlock"] != 2 {
		t.Fatalf("attempts by backend = %v, want redis 1, redlock 2", got)
	}
}

// The collectors every backend has are pglock's and zookeeper's to the
// letter, so a registry holding one of those too shares them.
func TestSharedWithOtherBackends(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(
		prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "stockguard_lock_acquire_seconds",
			Help:    "Time from Acquire to holding one key's lock, successful acquisitions only.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"backend"}),
		prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockguard_lock_acquire_failures_total",
			Help: "Acquire calls that returned an error, by reason (invalid_key, not_acquired, cancelled, unavailable).",
		}, []string{"backend", "reason"}),
		prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockguard_lock_leases_lost_total",
			Help: "Leases the backend saw end without Release (TTL passed, connection killed, locker closed).",
		}, []string{"backend"}),
	)
	if _, err := New(reg, "redlock"); err != nil {
		t.Fatalf("New next to the other backends' collectors: %v", err)
	}
}

// A collector of the same name but another shape is a real conflict.
func TestConflictingRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "stockguard_lock_leases_lost_total", Help: "other"}))
	if _, err := New(reg, "redis"); err == nil {
		t.Fatal("New registered over a conflicting collector")
	}
	var m *Metrics // nil records nothing
	m.Failed(ReasonNotAcquired)
	m.Lost()
}
