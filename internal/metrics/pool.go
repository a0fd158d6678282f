package metrics

import (
	"database/sql"

	"github.com/prometheus/client_golang/prometheus"
)

// Pool is the database handle whose connection pool is reported: the
// store's *sql.DB (gorm and the pgx hot path share it).
type Pool interface {
	Stats() sql.DBStats
}

// poolCollector reads the pool's statistics at every scrape, so the figures
// are the pool's own, never a copy that could drift.
type poolCollector struct {
	pool                                       Pool
	maxOpen, open, inUse, idle                 *prometheus.Desc
	waits, waitSeconds, closedIdle, closedLife *prometheus.Desc
}

// RegisterPool registers the stockguard_db_pool_* metrics of p on reg.
// Saturation shows as in_use reaching max_open while waits_total grows.
func RegisterPool(reg prometheus.Registerer, p Pool) {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("stockguard_db_pool_"+name, help, nil, nil)
	}
	reg.MustRegister(&poolCollector{pool: p,
		maxOpen:     d("max_open_connections", "Most connections the pool may open (--db-max-conns)."),
		open:        d("open_connections", "Connections open, in use or idle."),
		inUse:       d("in_use_connections", "Connections in use."),
		idle:        d("idle_connections", "Idle connections."),
		waits:       d("waits_total", "Times a statement waited for a free connection."),
		waitSeconds: d("wait_seconds_total", "Time statements spent waiting for a free connection."),
		closedIdle:  d("closed_max_idle_total", "Connections closed because the idle pool was full or they idled too long."),
		closedLife:  d("closed_max_lifetime_total", "Connections closed because they reached their lifetime."),
	})
}

// Describe implements prometheus.Collector.
func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.maxOpen, c.open, c.inUse, c.idle, c.waits, c.waitSeconds, c.closedIdle, c.closedLife} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stats()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(c.maxOpen, float64(s.MaxOpenConnections))
	gauge(c.open, float64(s.OpenConnections))
	gauge(c.inUse, float64(s.InUse))
	gauge(c.idle, float64(s.Idle))
	counter(c.waits, float64(s.WaitCount))
	counter(c.waitSeconds, s.WaitDuration.Seconds())
	counter(c.closedIdle, float64(s.MaxIdleClosed+s.MaxIdleTimeClosed))
	counter(c.closedLife, float64(s.MaxLifetimeClosed))
}
