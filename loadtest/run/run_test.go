package run

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/fakeservice"
	"github.com/stockguard/stockguard/loadtest/progress"
)

// testConfig is a small closed-loop run against urls.
func testConfig(urls ...string) Config {
	return Config{
		URLs:     urls,
		Workload: Workload{SKUs: 8, Stock: 60, Lines: Range{1, 3}, Qty: Range{1, 5}, Zipf: 1.1, RetryShare: 0.1, Seed: 7},
		Orders:   600, Concurrency: 16,
		Timeout: 30 * time.Second, RequestTimeout: 10 * time.Second, HoldSeconds: 900,
		AdminToken: "secret", Progress: progress.Off,
	}
}

func TestRunSafeService(t *testing.T) {
	f := fakeservice.New("secret", false)
	a, b := f.Server(t), f.Server(t)
	cfg := testConfig(a.URL, b.URL)
	res, err := Execute(fakeservice.Context(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Safe || res.Units.Oversold != 0 || res.Units.Lost != 0 || res.Verification.DisagreementCount != 0 {
		t.Fatalf("safe service reported damage: %s %v", res.Verdict, res.Verification.Disagreements)
	}
	o := res.Orders
	if o.Sent != 600 || o.Reserved+o.Insufficient+o.StaleFence+o.LockUnavailable+o.Errors != o.Sent {
		t.Errorf("counts do not add up: %+v", o)
	}
	// 8 SKUs × 60 units against ~3,600 units of demand: stock runs out.
	if o.Insufficient == 0 || o.Reserved == 0 {
		t.Errorf("want both reservations and insufficient_stock: %+v", o)
	}
	if o.Retries < 30 || o.RetryReplayed != o.Retries || o.RetryMismatch != 0 {
		t.Errorf("retries: %+v", o)
	}
	if res.Units.Reserved != res.Verification.Sources.Audit.Held || res.Units.Reserved > res.Units.Stock {
		t.Errorf("units %+v vs audit held %d", res.Units, res.Verification.Sources.Audit.Held)
	}
	if res.Instances != 2 || res.LatencyMs.Count != 600 || res.ThroughputPerS <= 0 || res.LatencyFrom != "send" {
		t.Errorf("result: instances %d latency %+v throughput %v from %s", res.Instances, res.LatencyMs, res.ThroughputPerS, res.LatencyFrom)
	}
	if f.SKUCount() != 8 || !strings.HasPrefix(res.RunID, "lt") {
		t.Errorf("skus %d run id %q", f.SKUCount(), res.RunID)
	}
}

func TestRunLossyServiceShowsDamage(t *testing.T) {
	f := fakeservice.New("secret", true)
	s := f.Server(t)
	cfg := testConfig(s.URL, s.URL, s.URL)
	cfg.Workload.SKUs, cfg.Workload.Zipf, cfg.Concurrency = 3, 0, 32
	res, err := Execute(fakeservice.Context(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Safe || res.Units.Lost == 0 {
		t.Fatalf("lossy service looked safe: %s", res.Verdict)
	}
	// The client's ledger and the audit both saw every 201.
	if src := res.Verification.Sources; src.Ledger.Units != src.Audit.Held {
		t.Errorf("ledger %d units, audit held %d", src.Ledger.Units, src.Audit.Held)
	}
	if !strings.HasPrefix(res.Verdict, "UNSAFE: ") {
		t.Errorf("verdict %q", res.Verdict)
	}
}

func TestRunCountsLockFailures(t *testing.T) {
	f := fakeservice.New("secret", false)
	f.FailEvery = 10
	s := f.Server(t)
	cfg := testConfig(s.URL)
	cfg.Workload.RetryShare = 0
	res, err := Execute(fakeservice.Context(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Orders.LockUnavailable != 60 || !res.Safe {
		t.Errorf("lock_unavailable %d (want 60), safe %v", res.Orders.LockUnavailable, res.Safe)
	}
}

func TestRunOpenLoop(t *testing.T) {
	f := fakeservice.New("secret", false)
	s := f.Server(t)
	cfg := testConfig(s.URL)
	cfg.Orders, cfg.Rate, cfg.Duration, cfg.Concurrency = 0, 400, 500*time.Millisecond, 64
	start := time.Now()
	res, err := Execute(fakeservice.Context(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Orders.Sent != 200 || res.Workload.Mode != "open" || res.LatencyFrom != "intended_send" {
		t.Errorf("sent %d mode %s from %s", res.Orders.Sent, res.Workload.Mode, res.LatencyFrom)
	}
	// 200 orders due over 0.5 s cannot finish much sooner.
	if el := time.Since(start); el < 450*time.Millisecond {
		t.Errorf("open loop finished in %v, before the orders were due", el)
	}
}

// TestRunOpenLoopChargesQueueing checks that latency counts from the due
// time: with one request in flight at a time and a slow service, later
// orders wait, and their latency must include that wait.
func TestRunOpenLoopChargesQueueing(t *testing.T) {
	f := fakeservice.New("secret", false)
	s := f.Server(t)
	slow := fakeservice.SlowProxy(t, s.URL, 20*time.Millisecond)
	cfg := testConfig(slow)
	cfg.Orders, cfg.Rate, cfg.Duration, cfg.Concurrency = 0, 200, 100*time.Millisecond, 1
	cfg.Workload.RetryShare = 0
	res, err := Execute(fakeservice.Context(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 20 orders due within 100 ms, served one at a time at ≥ 20 ms each: the
	// last waits ≈ 400 ms. A closed-loop measurement would say ≈ 20 ms.
	if res.LatencyMs.Max < 300 {
		t.Errorf("max latency %.1f ms: queueing behind a slow service was not charged", res.LatencyMs.Max)
	}
}

func TestRunTimeoutSkipsOrders(t *testing.T) {
	f := fakeservice.New("secret", false)
	s := f.Server(t)
	slow := fakeservice.SlowProxy(t, s.URL, 30*time.Millisecond)
	cfg := testConfig(slow)
	cfg.Concurrency, cfg.Timeout = 2, 300*time.Millisecond
	res, err := Execute(fakeservice.Context(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.Orders.Unsent == 0 || res.Orders.Sent+res.Orders.Unsent != 600 {
		t.Errorf("timed out %v, sent %d, unsent %d", res.TimedOut, res.Orders.Sent, res.Orders.Unsent)
	}
	if !res.Safe {
		t.Errorf("a partial run must still verify clean: %s", res.Verdict)
	}
}

func TestRunRejectsUnreachable(t *testing.T) {
	cfg := testConfig("http://127.0.0.1:1")
	if _, err := Execute(fakeservice.Context(t), cfg, nil); err == nil || !strings.Contains(err.Error(), "not up") {
		t.Fatalf("err = %v", err)
	}
}

func TestRunRejectsWrongAdminToken(t *testing.T) {
	s := fakeservice.New("secret", false).Server(t)
	cfg := testConfig(s.URL)
	cfg.AdminToken = "wrong"
	_, err := Execute(fakeservice.Context(t), cfg, nil)
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != "unauthorized" {
		t.Fatalf("err = %v, want an unauthorized APIError", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{"no urls", func(c *Config) { c.URLs = nil }},
		{"bad url", func(c *Config) { c.URLs = []string{"127.0.0.1:8080"} }},
		{"no orders", func(c *Config) { c.Orders = 0 }},
		{"rate without duration", func(c *Config) { c.Rate = 10 }},
		{"duration without rate", func(c *Config) { c.Duration = time.Second }},
		{"negative duration", func(c *Config) { c.Duration = -time.Second }},
		{"zero concurrency", func(c *Config) { c.Concurrency = 0 }},
		{"too many orders", func(c *Config) { c.Orders, c.Rate, c.Duration = 0, 1e6, time.Hour }},
		{"hold seconds", func(c *Config) { c.HoldSeconds = 0 }},
		// Sending 30 s, reconciling 30 s + 3 × 10 s: a 2-minute hold expires first.
		{"hold shorter than the run", func(c *Config) { c.HoldSeconds = 120 }},
		{"open-loop hold shorter than the run", func(c *Config) {
			c.Orders, c.Rate, c.Duration, c.Timeout, c.HoldSeconds = 0, 1, 10*time.Minute, 11*time.Minute, 600
		}},
		{"open-loop timeout shorter than the duration", func(c *Config) {
			c.Orders, c.Rate, c.Duration, c.Timeout = 0, 10, 3*time.Minute, 2*time.Minute
		}},
	}
	for _, tt := range tests {
		c := testConfig("http://127.0.0.1:8080")
		tt.mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate() = nil", tt.name)
		}
	}
	ok := testConfig("http://127.0.0.1:8080")
	ok.Orders, ok.Rate, ok.Duration, ok.Timeout = 0, 1, 5*time.Minute, 6*time.Minute
	if err := ok.Validate(); err != nil {
		t.Errorf("a 900 s hold outlasts a 6-minute open loop: %v", err)
	}
}

// TestConfigValidateRunTooLongForAnyHold: a run that not even the longest
// hold outlasts is refused as such, not with a --hold-seconds the flag
// itself would refuse.
func TestConfigValidateRunTooLongForAnyHold(t *testing.T) {
	c := testConfig("http://127.0.0.1:8080")
	c.Orders, c.Rate, c.Duration, c.Timeout = 0, 5, 87600*time.Hour, 87601*time.Hour
	err := c.Validate()
	if err == nil || strings.Contains(err.Error(), "want at least") ||
		!strings.Contains(err.Error(), "shorten --duration to at most 23h56m50s and --timeout to at most 23h57m50s, 1m0s longer") {
		t.Fatalf("Validate() = %v", err)
	}
	c = testConfig("http://127.0.0.1:8080")
	c.Timeout = 25 * time.Hour
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "shorten --timeout to at most 23h57m50s") {
		t.Fatalf("closed loop: Validate() = %v", err)
	}
}

// TestConfigValidateTooLongOpenLoopBlamesTheRightFlag: an open loop whose
// --duration and its grace fit the longest hold is told to shorten
// --timeout, not --duration, which could not help; one whose --duration
// does not leave the grace is told to shorten both.
func TestConfigValidateTooLongOpenLoopBlamesTheRightFlag(t *testing.T) {
	for _, tc := range []struct {
		duration time.Duration
		want     string
	}{
		{time.Minute, ": shorten --timeout to at most 23h57m50s"},
		{23*time.Hour + 56*time.Minute + 50*time.Second, ": shorten --timeout to at most 23h57m50s"},
		{23*time.Hour + 56*time.Minute + 51*time.Second, ": shorten --duration to at most 23h56m50s and --timeout to at most 23h57m50s"},
	} {
		c := testConfig("http://127.0.0.1:8080")
		c.Orders, c.Rate, c.Duration, c.Timeout = 0, 5, tc.duration, 25*time.Hour
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--duration=%v --timeout=25h: Validate() = %v, want %q", tc.duration, err, tc.want)
		}
	}
}

// TestConfigValidateBoundsOrderLines: setup keeps every order and its
// encoded body, so Validate bounds orders × lines, not orders alone. The
// largest shapes it accepts fit in memory, extrapolated from what a sample
// of each keeps, and the command lines of the README, the Makefile and
// bench (MaxOrders one-line orders) pass.
func TestConfigValidateBoundsOrderLines(t *testing.T) {
	huge := testConfig("http://127.0.0.1:8080")
	huge.Orders, huge.Workload.SKUs, huge.Workload.Lines = MaxOrders, 100_000, Range{100, 100}
	if err := huge.Validate(); err == nil || !strings.Contains(err.Error(), "lower --orders or --lines") {
		t.Errorf("%d orders of 100 lines: Validate() = %v", MaxOrders, err)
	}
	open := huge
	open.Orders, open.Rate, open.Duration, open.Timeout = 0, 10_000, 100*time.Second, 101*time.Second
	if err := open.Validate(); err == nil || !strings.Contains(err.Error(), "lower --rate × --duration or --lines") {
		t.Errorf("open loop, 1,000,000 orders of 100 lines: Validate() = %v", err)
	}
	for _, tc := range []struct {
		name          string
		orders, lines int
	}{
		{"README run", 5000, 3}, {"README compare", 3000, 3}, {"make demo", 600, 1},
		{"bench", MaxOrders, 1}, {"default lines", MaxOrders, 3}, {"most lines", MaxOrderLines / 100, 100},
	} {
		c := testConfig("http://127.0.0.1:8080")
		c.Orders, c.Workload.SKUs, c.Workload.Lines = tc.orders, 100_000, Range{1, tc.lines}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// Generate gives an order no more lines than there are SKUs, so the
	// bound counts those, whatever --lines allows.
	oneSKU := testConfig("http://127.0.0.1:8080")
	oneSKU.Orders, oneSKU.Workload.SKUs, oneSKU.Workload.Lines = 1_000_000, 1, Range{1, 100}
	if err := oneSKU.Validate(); err != nil {
		t.Errorf("1,000,000 orders on 1 SKU (each of 1 line): %v", err)
	}
	fewSKUs := testConfig("http://127.0.0.1:8080")
	fewSKUs.Orders, fewSKUs.Workload.SKUs, fewSKUs.Workload.Lines = MaxOrders, 5, Range{1, 100}
	if err := fewSKUs.Validate(); err == nil ||
		!strings.Contains(err.Error(), "of up to 5 lines (--lines=1..100, --skus=5) are 25000000 order lines") ||
		!strings.Contains(err.Error(), "lower --orders or --skus") {
		t.Errorf("%d orders on 5 SKUs: Validate() = %v", MaxOrders, err)
	}

	// What prepare keeps for n orders of the given lines: the SKU names,
	// a fixed cost, plus so much an order.
	kept := func(n, lines int) float64 {
		c := testConfig("http://127.0.0.1:8080")
		c.Orders, c.Workload = n, Workload{SKUs: 100_000, Stock: 1_000_000_000, Lines: Range{lines, lines}, Qty: Range{1_000_000, 1_000_000}, Seed: 1}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r := &runner{cfg: c, runID: NewRunID()}
		if err := r.prepare(); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(r)
		return float64(after.HeapAlloc) - float64(before.HeapAlloc)
	}
	const sample, limit = 5000, 3 << 30
	for _, lines := range []int{1, 3, 100} {
		one, two := kept(sample, lines), kept(2*sample, lines)
		perOrder := (two - one) / sample
		accepted := min(MaxOrders, MaxOrderLines/lines)
		if total := one + perOrder*float64(accepted-sample); total > limit {
			t.Errorf("%d orders of %d lines are accepted and keep ≈ %.1f GiB (%.0f bytes an order) before the first is sent",
				accepted, lines, total/(1<<30), perOrder)
		}
	}
}
