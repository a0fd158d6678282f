package bench

import (
	"slices"
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
		// One backend's ratios would divide its runs by the other entry's limits.
		"backend twice":   func(c *Config) { c.Backends = []string{"redlock", "zookeeper", "redlock"} },
		"no clients":      func(c *Config) { c.Clients = 0 },
		"one spread SKU":  func(c *Config) { c.SpreadSKUs = 1 },
		"no duration":     func(c *Config) { c.Duration = 0 },
		"too many orders": func(c *Config) { c.MaxRate = 1e9 },
		"no bin":          func(c *Config) { c.Bin = "" },
		"no rounds":       func(c *Config) { c.Rounds = 0 },
		"ten rounds":      func(c *Config) { c.Rounds = 10 },
		// The suite runs every backend coalesced and not: a --coalesce of
		// the caller's would make the two halves one.
		"coalesce serve flag":  func(c *Config) { c.ServeFlags = []string{"--coalesce=off"} },
		"lock serve flag":      func(c *Config) { c.ServeFlags = []string{"--lock=none"} },
		"malformed serve flag": func(c *Config) { c.ServeFlags = []string{"coalesce-max-batches=1"} },
	} {
		c := ok
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestServeFlagsFollowTheSuites: a caller's serve flags reach every run's
// instances after the suite's own --coalesce, and the result records them.
func TestServeFlagsFollowTheSuites(t *testing.T) {
	c := Config{Backends: []string{"redlock"}, Instances: 3, Clients: 64, SpreadSKUs: 1000, Duration: 8e9, MaxRate: 15000,
		CeilingDuration: 3e9, CeilingConns: 16, Bin: "/bin/true", StartupTimeout: 30e9, Rounds: 1,
		ServeFlags: []string{"--coalesce-max-batches=1", "--coalesce-window=0"}}
	if err := c.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, mode := range []string{"on", "off"} {
		got := c.compareConfig("redlock", benchHot, mode).ServeFlags
		want := []string{"--coalesce=" + mode, "--coalesce-max-batches=1", "--coalesce-window=0"}
		if !slices.Equal(got, want) {
			t.Errorf("coalesce %s: serve flags %q, want %q", mode, got, want)
		}
	}
	if got := c.settings().ServeFlags; !slices.Equal(got, c.ServeFlags) {
		t.Errorf("settings record %q, want %q", got, c.ServeFlags)
	}
}
