// Package lockmetrics holds the Prometheus collectors every lock backend
// shares: how long acquisitions take, how many attempts they need, why they
// fail, how extensions go and how many leases are lost, labelled by backend,
// so one dashboard reads them all. They differ on purpose from the service's
// stockguard_lock_wait_seconds and stockguard_leases_lost_total
// (internal/metrics), which count whole operations rather than single keys.
package lockmetrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock"
)

// Failure reasons, the values of the reason label, shared with the other
// backends.
const (
	// ReasonInvalidKey: the key was empty.
	ReasonInvalidKey = "invalid_key"
	// ReasonNotAcquired: a majority of nodes answered but the key was held
	// (TryOnce, or still held when the caller's context ended).
	ReasonNotAcquired = "not_acquired"
	// ReasonUnavailable: fewer than a majority of nodes answered (the last
	// attempt before giving up), or no validity was left after the rounds.
	ReasonUnavailable = "unavailable"
	// ReasonCancelled: the caller's context ended (cancelled or past its
	// deadline) before any attempt told more.
	ReasonCancelled = "cancelled"
)

// Reason is the reason label for an error Acquire returned. An acquisition
// ended by its context also wraps its last attempt's error, and that error
// says more: the key was held, or the nodes were down.
func Reason(err error) string {
	switch {
	case errors.Is(err, lock.ErrInvalidKey):
		return ReasonInvalidKey
	case errors.Is(err, lock.ErrUnavailable):
		return ReasonUnavailable
	case errors.Is(err, lock.ErrNotAcquired):
		return ReasonNotAcquired
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ReasonCancelled
	default:
		return ReasonUnavailable
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
		Name: "stockguard_lock_acquire_seconds",
		Help: "Time from Acquire to holding one key's lock, successful acquisitions only.",
		// 100 µs .. ~13 s: one local Redlock round is ~0.2 ms, a contended
		// wait can take seconds.
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
	}, []string{"backend"})
	attempts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stockguard_lock_acquire_attempts_total",
		Help: "Acquisition attempts (one per round of requests to the nodes), retries included.",
	}, []string{"backend"})
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stockguard_lock_acquire_failures_total",
		Help: "Acquire calls that returned an error, by reason (invalid_key, not_acquired, cancelled, unavailable).",
	}, []string{"backend", "reason"})
	extends := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stockguard_lock_extends_total",
		Help: "Lease extensions by result (ok, failed).",
	}, []string{"backend", "result"})
	lost := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stockguard_lock_leases_lost_total",
		Help: "Leases the backend saw end without Release (TTL passed, connection killed, locker closed).",
	}, []string{"backend"})

	if reg != nil {
		var err error
		if acquire, err = Register(reg, acquire); err != nil {
			return nil, err
		}
		if attempts, err = Register(reg, attempts); err != nil {
			return nil, err
		}
		if failures, err = Register(reg, failures); err != nil {
			return nil, err
		}
		if extends, err = Register(reg, extends); err != nil {
			return nil, err
		}
		if lost, err = Register(reg, lost); err != nil {
			return nil, err
		}
	}
	m := &Metrics{
		acquire:  acquire.WithLabelValues(backend),
		attempts: attempts.WithLabelValues(backend),
		failures: failures.MustCurryWith(prometheus.Labels{"backend": backend}),
		extendOK: extends.WithLabelValues(backend, "ok"),
		extendNo: extends.WithLabelValues(backend, "failed"),
		lost:     lost.WithLabelValues(backend),
	}
	// Every reason's series exists from the start at 0, as the others
	// above: rate() needs a sample before a reason's first failure to
	// count it, and the dashboard's panel would read No data until then.
	for _, r := range []string{ReasonInvalidKey, ReasonNotAcquired, ReasonUnavailable, ReasonCancelled} {
		m.failures.WithLabelValues(r)
	}
	return m, nil
}

// Register registers c on reg, or returns the identical collector registered
// before, so several Lockers (a test's, or one that reconnects) can share a
// registry. Backends use it for collectors of their own too.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
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
