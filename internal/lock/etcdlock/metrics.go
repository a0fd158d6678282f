package etcdlock

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
)

// metrics are the collectors every backend shares plus the recipe's own:
// queue depth and watch wake-ups show the absence of a herd effect.
type metrics struct {
	*lockmetrics.Metrics
	queueDepth   prometheus.Observer
	wakeups      prometheus.Counter
	waiting      prometheus.Gauge
	sessionsLost prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	shared, err := lockmetrics.New(reg, backendName)
	if err != nil {
		return nil, err
	}
	queueDepth := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "stockguard_etcd_queue_depth",
		Help:    "Waiters ahead of a new waiter key when it was created (0: the lock was free).",
		Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256},
	})
	wakeups := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stockguard_etcd_watch_wakeups_total",
		Help: "Deletions of a predecessor's key that woke a waiter; each release should wake at most one (no herd).",
	})
	waiting := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "stockguard_etcd_waiters",
		Help: "Acquisitions currently watching their predecessor's key.",
	})
	sessionsLost := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stockguard_etcd_sessions_lost_total",
		Help: "etcd sessions whose lease expired or was revoked while the Locker was open; each took all its leases along.",
	})
	if reg != nil {
		if queueDepth, err = lockmetrics.Register(reg, queueDepth); err != nil {
			return nil, err
		}
		if wakeups, err = lockmetrics.Register(reg, wakeups); err != nil {
			return nil, err
		}
		if waiting, err = lockmetrics.Register(reg, waiting); err != nil {
			return nil, err
		}
		if sessionsLost, err = lockmetrics.Register(reg, sessionsLost); err != nil {
			return nil, err
		}
	}
	return &metrics{Metrics: shared, queueDepth: queueDepth, wakeups: wakeups, waiting: waiting,
		sessionsLost: sessionsLost}, nil
}
