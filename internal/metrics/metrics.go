// Package metrics holds the service's Prometheus collectors. Each service
// owns its registry: nothing here is global.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics implements reservation.Observer and records HTTP and order outcomes.
type Metrics struct {
	backend     string
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	orders      *prometheus.CounterVec
	lockWait    *prometheus.HistogramVec
	staleFences prometheus.Counter
	leasesLost  *prometheus.CounterVec
}

// New registers the collectors on reg for a service using the named backend.
func New(reg prometheus.Registerer, backend string) *Metrics {
	m := &Metrics{
		backend: backend,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockguard_http_requests_total", Help: "HTTP requests by method, route and status.",
		}, []string{"method", "route", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stockguard_http_request_duration_seconds", Help: "HTTP request latency by method and route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method", "route"}),
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockguard_orders_total", Help: "Order placements by outcome code (created, replayed, or the error code).",
		}, []string{"code"}),
		lockWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stockguard_lock_wait_seconds", Help: "Time spent acquiring the SKU locks of one operation.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"backend"}),
		staleFences: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stockguard_stale_fence_total", Help: "Writes the store rejected because a newer lease had claimed the row.",
		}),
		leasesLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockguard_leases_lost_total", Help: "Leases found lost while an operation held them.",
		}, []string{"backend"}),
	}
	reg.MustRegister(m.requests, m.latency, m.orders, m.lockWait, m.staleFences, m.leasesLost)
	return m
}

// HTTP records one served request.
func (m *Metrics) HTTP(method, route string, status int, d time.Duration) {
	m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(method, route).Observe(d.Seconds())
}

// Order records the outcome of one order placement.
func (m *Metrics) Order(code string) { m.orders.WithLabelValues(code).Inc() }

// LockWait implements reservation.Observer.
func (m *Metrics) LockWait(d time.Duration) {
	m.lockWait.WithLabelValues(m.backend).Observe(d.Seconds())
}

// StaleFence implements reservation.Observer.
func (m *Metrics) StaleFence() { m.staleFences.Inc() }

// LeaseLost implements reservation.Observer.
func (m *Metrics) LeaseLost() { m.leasesLost.WithLabelValues(m.backend).Inc() }
