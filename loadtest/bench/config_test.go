package bench

import (
	"testing"

	"github.com/stockguard/stockguard/loadtest/compare"
)

// TestBenchConfigValidate covers the bench command's own checks.
func TestBenchConfigValidate(t *testing.T) {
	ok := Config{Backends: compare.AllBackends(), Instances: 3, Clients: 64, SpreadSKUs: 1000, Duration: 8e9, MaxRate: 15000,
		CeilingDuration: 3e9, CeilingConns: 16, Bin: "/bin/true", StartupTimeout: 30e9, Rounds: 1}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if n := ok.ordersPerRun(); n != 120_000 {
		t.Errorf("orders per run %d, want 120000", n)
	}
	for name, mut := range map[string]func(*Config){
		"unknown backend": func(c *Config) { c.Backends = []string{"memcached"} },
		"no clients":      func(c *Config) { c.Clients = 0 },
		"one spread SKU":  func(c *Config) { c.SpreadSKUs = 1 },
		"no duration":     func(c *Config) { c.Duration = 0 },
		"too many orders": func(c *Config) { c.MaxRate = 1e9 },
		"no bin":          func(c *Config) { c.Bin = "" },
		"no rounds":       func(c *Config) { c.Rounds = 0 },
		"ten rounds":      func(c *Config) { c.Rounds = 10 },
	} {
		c := ok
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
