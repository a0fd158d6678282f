package pglock

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock"
)

// Failure reasons, the values of the reason label.
const (
	reasonInvalidKey  = "invalid_key"
	reasonNotAcquired = "not_acquired"
	reasonCancelled   = "cancelled"
	reasonUnavailable = "unavailable"
)

// metrics are per backend, named apart from the service-level
// stockguard_lock_wait_seconds and stockguard_leases_lost_total of
// internal/metrics: those count whole operations, these single keys, and a
// second registration of the same name with other help text would fail.
type metrics struct {
	acquire  prometheus.Observer
	failures *prometheus.CounterVec // by reason
	lost     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	acquire := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "stockguard_lock_acquire_seconds",
		Help:    "Time from Acquire to holding one key's lock, successful acquisitions only.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
	}, []string{"backend"})
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stockguard_lock_acquire_failures_total",
		Help: "Acquire calls that returned an error, by reason (invalid_key, not_acquired, cancelled, unavailable).",
	}, []string{"backend", "reason"})
	lost := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stockguard_lock_leases_lost_total",
		Help: "Leases the backend saw end without Release (TTL passed, connection killed, locker closed).",
	}, []string{"backend"})
	if reg != nil {
		var err error
		if acquire, err = register(reg, acquire); err != nil {
			return nil, err
		}
		if failures, err = register(reg, failures); err != nil {
			return nil, err
		}
		if lost, err = register(reg, lost); err != nil {
			return nil, err
		}
	}
	labels := prometheus.Labels{"backend": backendName}
	return &metrics{
		acquire:  acquire.With(labels),
		failures: failures.MustCurryWith(labels),
		lost:     lost.With(labels),
	}, nil
}

// register reuses the collector already registered under the same
// description, so several Lockers (a test's, or a service that reconnects) can
// share one registry.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

func (m *metrics) fail(err error) {
	reason := reasonUnavailable
	switch {
	case errors.Is(err, lock.ErrInvalidKey):
		reason = reasonInvalidKey
	case errors.Is(err, lock.ErrNotAcquired):
		reason = reasonNotAcquired
	case errors.Is(err, lock.ErrUnavailable):
		reason = reasonUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		reason = reasonCancelled
	}
	m.failures.WithLabelValues(reason).Inc()
}
