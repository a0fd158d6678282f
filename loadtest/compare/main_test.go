package compare

import (
	"os"
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/fakeservice"
	"github.com/stockguard/stockguard/loadtest/progress"
	"github.com/stockguard/stockguard/loadtest/run"
)

// TestMain lets this test binary act as `stockguard serve` (the fake) when
// compare starts it as an instance.
func TestMain(m *testing.M) {
	if os.Getenv(fakeservice.Env) == "1" {
		os.Exit(fakeservice.ServeMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// testConfig is a small closed-loop workload; compare sets the URLs.
func testConfig(urls ...string) run.Config {
	return run.Config{
		URLs:     urls,
		Workload: run.Workload{SKUs: 8, Stock: 60, Lines: run.Range{Min: 1, Max: 3}, Qty: run.Range{Min: 1, Max: 5}, Zipf: 1.1, RetryShare: 0.1, Seed: 7},
		Orders:   600, Concurrency: 16,
		Timeout: 30 * time.Second, RequestTimeout: 10 * time.Second, HoldSeconds: 900,
		AdminToken: "secret", Progress: progress.Off,
	}
}
