// Package metrics holds the service's Prometheus collectors. Each service
// owns its registry: nothing here is global.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Reaper outcomes, the values of stockguard_reaper_orders_total's outcome.
const (
	// ReapExpired: the hold ran out and its units went back to stock.
	ReapExpired = "expired"
	// ReapSkipped: the order had moved on (confirmed, cancelled) first.
	ReapSkipped = "skipped"
	// ReapFailed: the expiry failed (locks, database) and will be retried.
	ReapFailed = "failed"
)

// orderCodes are the outcomes an order placement can have, created up front
// so that a rate over the first event of each is not lost.
var orderCodes = []string{"created", "replayed", "invalid_request", "unknown_sku", "insufficient_stock",
	"stale_fence", "idempotency_key_in_flight", "idempotency_key_reused", "body_too_large",
	"unsupported_media_type", "lock_unavailable", "store_unavailable", "overloaded", "timeout", "client_closed_request", "internal"}

// readyzRoute is the readiness probe's route label, httpapi's route
// pattern (metrics does not import the HTTP layer: it observes it).
const readyzRoute = "/readyz"

// storeCalls are the values of stockguard_store_call_seconds's call label,
// reservation.StoreClaim and reservation.StoreWrite (metrics does not
// import the service: the service's observer is this package's Metrics).
var storeCalls = []string{"claim", "write"}

// Metrics implements reservation.Observer and records HTTP and order outcomes.
type Metrics struct {
	backend     string
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	orders      *prometheus.CounterVec
	lockWait    *prometheus.HistogramVec
	staleFences prometheus.Counter
	leasesLost  *prometheus.CounterVec
	inFlight    prometheus.Gauge
	batchSize   prometheus.Histogram
	reaped      *prometheus.CounterVec
	lockHold    *prometheus.HistogramVec
	storeCall   *prometheus.HistogramVec
	clockOffset prometheus.Gauge
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
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stockguard_http_requests_in_flight", Help: "HTTP requests being served.",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "stockguard_batch_orders", Help: "Orders placed by one coalesced batch write.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9), // 1 .. 256, past the largest batch
		}),
		reaped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockguard_reaper_orders_total", Help: "Expired holds the reaper handled, by outcome (expired, skipped, failed).",
		}, []string{"outcome"}),
		// A hot SKU's rate is what fits in its key's holds end to end: the
		// sum of this histogram over a window, against the window, is the
		// share of it the key was held, and the rest went to hand-offs.
		lockHold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stockguard_lock_hold_seconds", Help: "Time one critical section held its SKU locks, from the acquisition to the release or hand-over.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"backend"}),
		storeCall: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stockguard_store_call_seconds", Help: "Latency of the store calls made under the locks, by call (claim, write).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"call"}),
		clockOffset: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stockguard_clock_offset_seconds", Help: "The database's clock minus this instance's, as last measured; holds are timed by the database's.",
		}),
	}
	reg.MustRegister(m.requests, m.latency, m.orders, m.lockWait, m.staleFences, m.leasesLost,
		m.inFlight, m.batchSize, m.reaped, m.lockHold, m.storeCall, m.clockOffset)
	// Every labelled series exists from the start at 0: rate() and
	// increase() need a sample before the first event to count it.
	for _, c := range orderCodes {
		m.orders.WithLabelValues(c)
	}
	for _, o := range []string{ReapExpired, ReapSkipped, ReapFailed} {
		m.reaped.WithLabelValues(o)
	}
	m.lockWait.WithLabelValues(backend)
	m.leasesLost.WithLabelValues(backend)
	m.lockHold.WithLabelValues(backend)
	for _, c := range storeCalls {
		m.storeCall.WithLabelValues(c)
	}
	// Of the HTTP series only the readiness probe's answers are known
	// before any client comes: the kubelet calls it on every instance, and
	// the readiness rules (stockguard:readyz_*) count its 200s and 503s.
	for _, status := range []int{http.StatusOK, http.StatusServiceUnavailable} {
		m.requests.WithLabelValues(http.MethodGet, readyzRoute, strconv.Itoa(status))
	}
	m.latency.WithLabelValues(http.MethodGet, readyzRoute)
	return m
}

// InFlight wraps h so that stockguard_http_requests_in_flight counts the
// requests it is serving.
func (m *Metrics) InFlight(h http.Handler) http.Handler {
	return promhttp.InstrumentHandlerInFlight(m.inFlight, h)
}

// Batch implements reservation.BatchObserver: the orders one coalesced batch
// wrote.
func (m *Metrics) Batch(orders int) { m.batchSize.Observe(float64(orders)) }

// LockHeld implements reservation.SectionObserver: how long one critical
// section held its leases.
func (m *Metrics) LockHeld(d time.Duration) {
	m.lockHold.WithLabelValues(m.backend).Observe(d.Seconds())
}

// StoreCall implements reservation.SectionObserver: one store call made
// under the leases, by its name.
func (m *Metrics) StoreCall(call string, d time.Duration) {
	m.storeCall.WithLabelValues(call).Observe(d.Seconds())
}

// Reaped implements reservation.ReapObserver: it records the outcome of one expired hold the reaper handled:
// ReapExpired, ReapSkipped or ReapFailed.
func (m *Metrics) Reaped(outcome string) { m.reaped.WithLabelValues(outcome).Inc() }

// ClockOffset records the offset of the database's clock from this
// instance's, measured by postgres.Clock.
func (m *Metrics) ClockOffset(d time.Duration) { m.clockOffset.Set(d.Seconds()) }

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
