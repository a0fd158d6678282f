// Package lockmetrics holds the Prometheus collectors of a lock backend:
// how long acquisitions take, how many attempts they need, why they fail, how
// extensions go and how many leases are lost.
//
// The names carry a stockguard_lock_ prefix and a backend label. They differ
// on purpose from the service's stockguard_lock_wait_seconds and
// stockguard_leases_lost_total (internal/metrics), which measure the same
// events from the caller's side (all SKU locks of one operation, leases found
// lost while in use) and are registered on the same registry.
package lockmetrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock"
)

// Failure reasons, the values of the reason label.
const (
	// ReasonHeld: a majority of nodes answered but the key was held.
	ReasonHeld = "held"
	// ReasonNoQuorum: fewer than a majority of nodes answered, or the
	// acquisition took so long that no validity was left.
	ReasonNoQuorum = "no_quorum"
	// ReasonTimeout: the caller's deadline passed while waiting.
	ReasonTimeout = "timeout"
	// ReasonCancelled: the caller cancelled while waiting.
	ReasonCancelled = "cancelled"
)

// Reason is the reason label for an error Acquire returned. The caller's
// context comes first: an acquisition that timed out while the nodes were
// down is a timeout, its error also wrapping the last attempt's.
func Reason(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, context.Canceled):
		return ReasonCancelled
	case errors.Is(err, lock.ErrUnavailable):
		return ReasonNoQuorum
	default:
		return ReasonHeld
	}
}

// Metrics records one backend's lock events. A nil *Metrics records nothing.
type Metrics struct {
	acquire  prometheus.Observer
	attempts prometheus.Counter
	failures *prometheus.CounterVec
	extendOK prometheus.Counter
	extendNo prometheus.Counter
	lost     prometheus.Counter
}

// New creates the collectors for backend and registers them on reg (nil: not
// registered, as in tests). Several Lockers may share one registry: a
// collector that is already registered is reused, each Locker adding to the
// series of its backend label.
func New(reg prometheus.Registerer, backend string) (*Metrics, error) {
	acquire := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "stockguard_lock_acquire_duration_seconds",
		Help: "Time from the start of a successful lock acquisition until the lease was granted, retries included.",
		// 100 µs .. ~6.5 s: one local Redlock round is ~0.2 ms, a contended
		// wait can take seconds.
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 17),
	}, []string{"backend"})
	attempts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stockguard_lock_acquire_attempts_total",
		Help: "Acquisition attempts (one per round of requests to the nodes), retries included.",
	}, []string{"backend"})
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stockguard_lock_acquire_failures_total",
		Help: "Acquisitions that returned an error, by reason: held, no_quorum, timeout, cancelled.",
	}, []string{"backend", "reason"})
	extends := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stockguard_lock_extends_total",
		Help: "Lease extensions by result (ok, failed).",
	}, []string{"backend", "result"})
	lost := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stockguard_lock_leases_lost_total",
		Help: "Leases that ended without Release: TTL passed without extension or the extension failed.",
	}, []string{"backend"})

	if reg != nil {
		var err error
		acquire = register(reg, acquire, &err)
		attempts = register(reg, attempts, &err)
		failures = register(reg, failures, &err)
		extends = register(reg, extends, &err)
		lost = register(reg, lost, &err)
		if err != nil {
			return nil, err
		}
	}
	return &Metrics{
		acquire:  acquire.WithLabelValues(backend),
		attempts: attempts.WithLabelValues(backend),
		failures: failures.MustCurryWith(prometheus.Labels{"backend": backend}),
		extendOK: extends.WithLabelValues(backend, "ok"),
		extendNo: extends.WithLabelValues(backend, "failed"),
		lost:     lost.WithLabelValues(backend),
	}, nil
}

// register registers c, or returns the identical collector registered
// before; the first error is kept in *errp.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	if *errp == nil {
		*errp = err
	}
	return c
}

// Acquired records a successful acquisition that took d.
func (m *Metrics) Acquired(d time.Duration) {
	if m != nil {
		m.acquire.Observe(d.Seconds())
	}
}

// Attempt records one attempt.
func (m *Metrics) Attempt() {
	if m != nil {
		m.attempts.Inc()
	}
}

// Failed records an acquisition that returned an error for reason.
func (m *Metrics) Failed(reason string) {
	if m != nil {
		m.failures.WithLabelValues(reason).Inc()
	}
}

// Extended records one extension and whether it succeeded.
func (m *Metrics) Extended(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.extendOK.Inc()
	} else {
		m.extendNo.Inc()
	}
}

// Lost records a lease lost without Release.
func (m *Metrics) Lost() {
	if m != nil {
		m.lost.Inc()
	}
}
