package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
	"github.com/stockguard/stockguard/loadtest/compare"
	"github.com/stockguard/stockguard/loadtest/procs"
)

// buildStockguard builds ./cmd/stockguard into a temporary directory.
func buildStockguard(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "stockguard")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/stockguard")
	cmd.Dir = ".." // the module root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/stockguard: %v\n%s", err, out)
	}
	return bin
}

// TestIntegrationCompareLocalAndPostgres runs `load compare` with the real
// binary over 3 instances per backend on the shared stack's Postgres (a
// fresh database): local must oversell or lose units, postgres must not.
func TestIntegrationCompareLocalAndPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test; -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn := stacktest.NewDatabase(t, ctx) // fails with the stack's up command if Postgres is down
	bin := buildStockguard(t)

	dir := t.TempDir()
	jsonPath, reportPath := filepath.Join(dir, "compare.json"), filepath.Join(dir, "report.html")
	args := []string{"compare", "--bin=" + bin, "--backends=local,postgres", "--instances=3",
		"--orders=1500", "--concurrency=48", "--skus=4", "--stock=100", "--zipf=0.5", "--seed=20250101",
		"--database-url=" + dsn, "--require-unsafe=local", "--startup-timeout=30s", "--timeout=40s",
		"--json=" + jsonPath, "--report=" + reportPath, "--seed-orders=600", "--progress=off", "--logs=" + filepath.Join(dir, "logs")}
	var stdout, stderr bytes.Buffer
	start := time.Now()
	err := Main(ctx, args, func(k string) string { return "" }, &stdout, &stderr)
	t.Logf("compare took %v\n%s\n%s", time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	var cr compare.Result
	b, rerr := os.ReadFile(jsonPath)
	if rerr == nil {
		rerr = json.Unmarshal(b, &cr)
	}
	for _, e := range cr.Backends {
		if e.Error == "" && (e.Result == nil || e.ExpectedUnsafe || e.Result.Safe) {
			continue
		}
		for _, l := range e.Logs {
			t.Logf("%s:\n%s", filepath.Base(l), procs.Tail(l, 20))
		}
	}
	if err != nil {
		t.Fatalf("compare: %v", err)
	}
	if rerr != nil {
		t.Fatalf("compare json: %v", rerr)
	}
	if len(cr.Backends) != 2 || cr.Backends[0].Result == nil || cr.Backends[1].Result == nil {
		t.Fatalf("backends: %+v", cr.Backends)
	}
	local, pg := cr.Backends[0].Result, cr.Backends[1].Result
	if local.Units.Oversold+local.Units.Lost == 0 {
		t.Errorf("local over 3 instances showed no damage: %s", local.Verdict)
	}
	if pg.Units.Oversold != 0 || pg.Units.Lost != 0 || !pg.Safe {
		t.Errorf("postgres: %s; disagreements %v", pg.Verdict, pg.Verification.Disagreements)
	}
	if pg.Orders.Reserved == 0 || pg.Orders.Insufficient == 0 {
		t.Errorf("postgres workload did not exhaust stock: %+v", pg.Orders)
	}
	if _, err := os.Stat(reportPath); err != nil {
		t.Errorf("report: %v", err)
	}
	// The seed table: local's fault cells do not apply; postgres's are measured.
	lt, pt := cr.Backends[0].SeedTable, cr.Backends[1].SeedTable
	if lt == nil || pt == nil {
		t.Fatalf("seed tables: local %v postgres %v", lt, pt)
	}
	if lt.Release.NA == "" || lt.Fairness.NA == "" || lt.Availability.NA == "" || lt.Fencing.NA == "" || lt.HotSKU.Orders == 0 {
		t.Errorf("local seed table: %+v", lt)
	}
	if pt.Release.Ms == nil || pt.Fairness.Acquisitions == 0 || len(pt.Fairness.Shares) != 3 || !pt.HotSKU.Safe || !pt.ManySKUs.Safe ||
		pt.ManySKUs.SKUs != 1000 || pt.Availability.NA == "" {
		t.Errorf("postgres seed table: %+v (release %+v)", pt, pt.Release)
	}
	if !strings.Contains(stdout.String(), "The article's table, measured") {
		t.Errorf("no seed table in the terminal output")
	}
}
