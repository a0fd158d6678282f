package loadtest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompareRecordsPeakRSS: compare reads each instance's VmHWM before
// stopping it and reports the largest as peak_rss_mb (fake serve instances,
// see TestMain).
func TestCompareRecordsPeakRSS(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc: peak RSS is not read on this system")
	}
	t.Setenv(fakeServeEnv, "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cc := CompareConfig{Backends: []string{"postgres"}, Instances: 2, Bin: exe, StartupTimeout: 20e9,
		LogDir: filepath.Join(t.TempDir(), "logs"), Run: testConfig("http://127.0.0.1:1")}
	var stderr bytes.Buffer
	cr, err := Compare(testCtx(t), cc, &stderr)
	if err != nil {
		t.Fatalf("compare: %v\n%s", err, stderr.String())
	}
	e := cr.Backends[0]
	if len(e.InstanceRSSMB) != 2 || e.PeakRSSMB <= 0 || e.PeakRSSMB != max(e.InstanceRSSMB[0], e.InstanceRSSMB[1]) {
		t.Fatalf("peak RSS %v MB, instances %v", e.PeakRSSMB, e.InstanceRSSMB)
	}
	var table bytes.Buffer
	PrintCompareTable(&table, cr)
	if !strings.Contains(table.String(), "peak RSS MB") {
		t.Errorf("table lacks the peak RSS column:\n%s", table.String())
	}
}

// TestCompareServeFlags: --serve-flag reaches the instances' command line,
// and a flag compare sets itself is refused before anything starts.
func TestCompareServeFlags(t *testing.T) {
	o := ServeOptions{Lock: "redlock", Fencing: "on", AdminToken: "t", Extra: []string{"--coalesce=off", "--coalesce-max-batch=8"}}
	if got := strings.Join(o.args("127.0.0.1:9"), " "); !strings.HasSuffix(got, " --coalesce=off --coalesce-max-batch=8") {
		t.Errorf("args: %s", got)
	}
	exe, _ := os.Executable()
	var stdout, stderr bytes.Buffer
	err := Main(testCtx(t), []string{"compare", "--bin=" + exe, "--backends=redis", "--serve-flag=--fencing=off", "--report=", "--json="},
		func(string) string { return "" }, &stdout, &stderr)
	if !errors.Is(err, ErrUsage) || !strings.Contains(stderr.String(), "sets --fencing itself") {
		t.Fatalf("err = %v, stderr %s", err, stderr.String())
	}
}

// TestBenchConfigValidate covers the bench command's own checks.
func TestBenchConfigValidate(t *testing.T) {
	ok := BenchConfig{Backends: AllBackends(), Instances: 3, Clients: 64, SpreadSKUs: 1000, Duration: 8e9, MaxRate: 15000,
		CeilingDuration: 3e9, CeilingConns: 16, Bin: "/bin/true", StartupTimeout: 30e9}
	if err := ok.validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if n := ok.ordersPerRun(); n != 120_000 {
		t.Errorf("orders per run %d, want 120000", n)
	}
	for name, mut := range map[string]func(*BenchConfig){
		"unknown backend": func(c *BenchConfig) { c.Backends = []string{"etcd"} },
		"no clients":      func(c *BenchConfig) { c.Clients = 0 },
		"one spread SKU":  func(c *BenchConfig) { c.SpreadSKUs = 1 },
		"no duration":     func(c *BenchConfig) { c.Duration = 0 },
		"too many orders": func(c *BenchConfig) { c.MaxRate = 1e9 },
		"no bin":          func(c *BenchConfig) { c.Bin = "" },
	} {
		c := ok
		mut(&c)
		if c.validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
