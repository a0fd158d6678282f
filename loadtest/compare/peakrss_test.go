package compare

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/loadtest/fakeservice"
)

// TestCompareRecordsPeakRSS: compare reads each instance's VmHWM before
// stopping it and reports the largest as peak_rss_mb (fake serve instances,
// see TestMain).
func TestCompareRecordsPeakRSS(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc: peak RSS is not read on this system")
	}
	t.Setenv(fakeservice.Env, "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cc := Config{Backends: []string{"postgres"}, Instances: 2, Bin: exe, StartupTimeout: 20e9,
		LogDir: filepath.Join(t.TempDir(), "logs"), Run: testConfig("http://127.0.0.1:1")}
	var stderr bytes.Buffer
	cr, err := Execute(fakeservice.Context(t), cc, &stderr)
	if err != nil {
		t.Fatalf("compare: %v\n%s", err, stderr.String())
	}
	e := cr.Backends[0]
	if len(e.InstanceRSSMB) != 2 || e.PeakRSSMB <= 0 || e.PeakRSSMB != max(e.InstanceRSSMB[0], e.InstanceRSSMB[1]) {
		t.Fatalf("peak RSS %v MB, instances %v", e.PeakRSSMB, e.InstanceRSSMB)
	}
	var table bytes.Buffer
	PrintTable(&table, cr)
	if !strings.Contains(table.String(), "peak RSS MB") {
		t.Errorf("table lacks the peak RSS column:\n%s", table.String())
	}
}
