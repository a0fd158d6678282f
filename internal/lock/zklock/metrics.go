package zklock

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
)

// Why a session was given up, the values of stockguard_zk_sessions_lost_total's
// reason label.
const (
	lostExpired = "expired" // the server said so on reconnection
	lostTimeout = "timeout" // disconnected for as long as the server might have waited
)

// metrics are the collectors every backend shares plus the recipe's own:
// queue depth and watch wake-ups show the absence of a herd effect.
type metrics struct {
	*lockmetrics.Metrics
	queueDepth   prometheus.Observer
	wakeups      prometheus.Counter
	waiting      prometheus.Gauge
	sessionsLost *prometheus.CounterVec // by reason
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	shared, err := lockmetrics.New(reg, backendName)
	if err != nil {
		return nil, err
	}
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
