package compare

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/report"
)

func TestCompareReportsStartFailure(t *testing.T) {
	// /bin/false exits at once: the backend is recorded as not run.
	cc := Config{Backends: []string{"redis"}, Instances: 2, Bin: "/bin/false", StartupTimeout: 5 * time.Second,
		Run: testConfig("http://127.0.0.1:1")}
	var stderr bytes.Buffer
	cr, err := Execute(context.Background(), cc, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cr.Pass || len(cr.Failures) != 1 || !strings.Contains(cr.Backends[0].Error, "exited during start") {
		t.Fatalf("pass %v failures %v error %q", cr.Pass, cr.Failures, cr.Backends[0].Error)
	}
	r := Report(cr)
	if r.Runs[0].Verdict.Status != report.StatusError {
		t.Errorf("report status %q", r.Runs[0].Verdict.Status)
	}
	var buf bytes.Buffer
	if err := report.Write(&buf, r); err != nil {
		t.Fatal(err)
	}
}
