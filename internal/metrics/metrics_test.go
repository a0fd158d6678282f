package metrics_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/stockguard/stockguard/internal/metrics"
)

type pool struct{ s sql.DBStats }

func (p pool) Stats() sql.DBStats { return p.s }

// TestSeriesExistBeforeTheFirstEvent: increase() over a counter that
// appears with its first event misses that event.
func TestSeriesExistBeforeTheFirstEvent(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg, "redlock")
	for _, want := range []string{
		`stockguard_orders_total{code="created"} 0`,
		`stockguard_orders_total{code="lock_unavailable"} 0`,
		`stockguard_orders_total{code="client_closed_request"} 0`,
		`stockguard_orders_total{code="overloaded"} 0`,
		`stockguard_orders_total{code="internal"} 0`,
		`stockguard_reaper_orders_total{outcome="expired"} 0`,
		`stockguard_reaper_orders_total{outcome="failed"} 0`,
		`stockguard_leases_lost_total{backend="redlock"} 0`,
		`stockguard_lock_wait_seconds_count{backend="redlock"} 0`,
		`stockguard_lock_hold_seconds_count{backend="redlock"} 0`,
		`stockguard_store_call_seconds_count{call="claim"} 0`,
		`stockguard_store_call_seconds_count{call="write"} 0`,
		`stockguard_http_requests_in_flight 0`,
		// The readiness rules count the probe's answers, the first 503
		// included.
		`stockguard_http_requests_total{method="GET",route="/readyz",status="200"} 0`,
		`stockguard_http_requests_total{method="GET",route="/readyz",status="503"} 0`,
		`stockguard_http_request_duration_seconds_count{method="GET",route="/readyz"} 0`,
	} {
		if !strings.Contains(exposition(t, reg), want) {
			t.Errorf("no %s before any event", want)
		}
	}
}

func TestHooks(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "zookeeper")
	m.Batch(13)
	m.LockHeld(3 * time.Millisecond)
	m.StoreCall("write", 1500*time.Microsecond)
	m.Reaped(metrics.ReapExpired)
	m.Reaped(metrics.ReapExpired)
	metrics.RegisterBuildInfo(reg, metrics.BuildInfo{Version: "v1.2.3", Backend: "zookeeper", Fencing: true})
	metrics.RegisterPool(reg, pool{sql.DBStats{MaxOpenConnections: 16, InUse: 15, Idle: 1, OpenConnections: 16, WaitCount: 7}})
	out := exposition(t, reg)
	for _, want := range []string{
		`stockguard_batch_orders_sum 13`,
		`stockguard_batch_orders_bucket{le="16"} 1`,
		`stockguard_lock_hold_seconds_sum{backend="zookeeper"} 0.003`,
		`stockguard_store_call_seconds_sum{call="write"} 0.0015`,
		`stockguard_store_call_seconds_count{call="claim"} 0`,
		`stockguard_reaper_orders_total{outcome="expired"} 2`,
		`stockguard_build_info{backend="zookeeper",coalesce="off",fencing="on",version="v1.2.3"} 1`,
		`stockguard_db_pool_max_open_connections 16`,
		`stockguard_db_pool_in_use_connections 15`,
		`stockguard_db_pool_waits_total 7`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in\n%s", want, grep(out, "stockguard_"))
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func exposition(t *testing.T, g prometheus.Gatherer) string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func grep(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
