package seedtable

import (
	"context"
	"io"
	"time"

	"github.com/stockguard/stockguard/loadtest/progress"
	"github.com/stockguard/stockguard/loadtest/run"
)

// ThroughputConfig sizes the two throughput cells.
type ThroughputConfig struct {
	Orders      int           // closed-loop orders of each run
	Concurrency int           // closed-loop clients
	Timeout     time.Duration // bound on each sending phase
	ManySKUs    int           // SKUs of the spread run (the article's 1,000)
	Seed        uint64
}

// MeasureThroughput runs one-line, one-unit orders on one hot SKU and
// spread evenly over tc.ManySKUs, against instances that are up; base
// carries their URLs, the admin token and what the result records.
func MeasureThroughput(ctx context.Context, base run.Config, tc ThroughputConfig, stderr io.Writer) (hot, many Throughput) {
	return throughputRun(ctx, base, tc, 1, stderr), throughputRun(ctx, base, tc, tc.ManySKUs, stderr)
}

func throughputRun(ctx context.Context, base run.Config, tc ThroughputConfig, skus int, stderr io.Writer) Throughput {
	cfg := base
	// Stock for every order on the hot SKU, and a few times the mean on each
	// of many: no order fails for stock, so the figure is the lock's.
	stock := tc.Orders + 1
	if skus > 1 {
		stock = 4*tc.Orders/skus + 4
	}
	cfg.Workload = run.Workload{SKUs: skus, Stock: stock, Lines: run.Range{Min: 1, Max: 1}, Qty: run.Range{Min: 1, Max: 1}, Seed: tc.Seed}
	cfg.Orders, cfg.Concurrency, cfg.Timeout = tc.Orders, tc.Concurrency, tc.Timeout
	cfg.Rate, cfg.Duration, cfg.Progress = 0, 0, progress.Off
	out := Throughput{SKUs: skus}
	res, err := run.Execute(ctx, cfg, stderr)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.Orders = res.Orders.Sent
	out.OrdersPerS, out.P99Ms, out.Safe, out.Damaged = res.ThroughputPerS, res.LatencyMs.P99, res.Safe, res.Damaged()
	return out
}
