package zookeeper

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock"
)

// Failure reasons, the values of the reason label; the same as pglock's so
// the backends can share stockguard_lock_acquire_failures_total.
const (
	reasonInvalidKey  = "invalid_key"
	reasonNotAcquired = "not_acquired"
	reasonCancelled   = "cancelled"
	reasonUnavailable = "unavailable"
)

// Why a session was given up, the values of stockguard_zk_sessions_lost_total's
// reason label.
const (
	lostExpired = "expired" // the server said so on reconnection
	lostTimeout = "timeout" // disconnected for as long as the server might have waited
)

// metrics are per key, unlike the service-level stockguard_lock_wait_seconds
// and stockguard_leases_lost_total of internal/metrics (whole operations). The
// stockguard_lock_* names, help texts and labels are exactly pglock's: a
// registry holding both then shares one collector instead of failing.
type metrics struct {
	acquire      prometheus.Observer
	failures     *prometheus.CounterVec // by reason
	lost         prometheus.Counter
	queueDepth   prometheus.Observer
	wakeups      prometheus.Counter
	waiting      prometheus.Gauge
	sessionsLost *prometheus.CounterVec // by reason
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
	queueDepth := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "stockguard_zk_queue_depth",
		Help:    "Waiters ahead of a new waiter node when it was created (0: the lock was free).",
		Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256},
	})
	wakeups := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stockguard_zk_watch_wakeups_total",
		Help: "Watch events that woke a waiter; each release should wake at most one (no herd).",
	})
	waiting := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "stockguard_zk_waiters",
		Help: "Acquisitions currently waiting on a watch of their predecessor.",
	})
	sessionsLost := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stockguard_zk_sessions_lost_total",
		Help: "ZooKeeper sessions given up, by reason (expired: the server said so; timeout: disconnected too long).",
	}, []string{"reason"})
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
		if queueDepth, err = register(reg, queueDepth); err != nil {
			return nil, err
		}
		if wakeups, err = register(reg, wakeups); err != nil {
			return nil, err
		}
		if waiting, err = register(reg, waiting); err != nil {
			return nil, err
		}
		if sessionsLost, err = register(reg, sessionsLost); err != nil {
			return nil, err
		}
	}
	labels := prometheus.Labels{"backend": backendName}
	return &metrics{
		acquire:      acquire.With(labels),
		failures:     failures.MustCurryWith(labels),
		lost:         lost.With(labels),
		queueDepth:   queueDepth,
		wakeups:      wakeups,
		waiting:      waiting,
		sessionsLost: sessionsLost,
	}, nil
}

// register reuses the collector already registered under the same
// description, so several Lockers (a test's, or several backends of one
// process) can share one registry.
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
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		reason = reasonCancelled
	}
	m.failures.WithLabelValues(reason).Inc()
}
