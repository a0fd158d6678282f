package compare

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/run"
	"github.com/stockguard/stockguard/loadtest/tally"
)

func TestCompareReportsStartFailure(t *testing.T) {
	// /bin/false exits at once: the backend is recorded as not run.
	cc := Config{Backends: []string{"redis"}, Instances: 2, Bin: "/bin/false", StartupTimeout: 5 * time.Second,
		LogDir: t.TempDir(), Run: testConfig("http://127.0.0.1:1")}
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

// TestCompareKeepsTempLogsOnlyWithLogs: without --logs, a failed
// comparison keeps its temporary directory when an instance wrote a log
// there, and one interrupted before any instance started, or whose
// instances wrote nothing, leaves none.
func TestCompareKeepsTempLogsOnlyWithLogs(t *testing.T) {
	tmp, bin := t.TempDir(), filepath.Join(t.TempDir(), "serve")
	// It says why it exits at once: a log worth keeping.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'no database' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	cc := Config{Backends: []string{"redis"}, Instances: 2, Bin: bin, StartupTimeout: 5 * time.Second,
		Run: testConfig("http://127.0.0.1:1")}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var stderr bytes.Buffer
	if _, err := Execute(ctx, cc, &stderr); err == nil {
		t.Fatal("Execute with a cancelled context did not say it was interrupted")
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("an interrupted comparison left %v in %s", left, tmp)
	}

	// /bin/false exits at once without a word: its empty logs tell nothing.
	quiet := cc
	quiet.Bin = "/bin/false"
	if cr, err := Execute(context.Background(), quiet, &stderr); err != nil || cr.Pass {
		t.Fatalf("Execute with /bin/false: %v, pass %v", err, cr != nil && cr.Pass)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("a failed comparison with only empty logs left %v in %s", left, tmp)
	}

	cr, err := Execute(context.Background(), cc, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	left, _ := os.ReadDir(tmp)
	if cr.Pass || len(left) != 1 || !strings.Contains(stderr.String(), "instance logs kept in") {
		t.Fatalf("a failed comparison: pass %v, %v in %s, stderr:\n%s", cr.Pass, left, tmp, stderr.String())
	}
}

// TestReportCountsOnlyVerifiedBackendsSafe: a backend interrupted before its
// verification, or left inconclusive, is counted neither safe nor unsafe,
// and an inconclusive safe backend fails the comparison.
func TestReportCountsOnlyVerifiedBackendsSafe(t *testing.T) {
	safe := &run.Result{Safe: true, Verdict: "safe: 0 oversold, 0 lost"}
	damaged := &run.Result{Verification: run.Verification{Lost: 4}, Verdict: "UNSAFE: 0 units oversold, 4 lost"}
	interrupted := &run.Result{Verdict: "INTERRUPTED after 3 of 10 orders, while sending: not verified"}
	v := run.Verification{Unresolved: 2}
	inconclusive := &run.Result{Verification: v, Verdict: run.VerdictText(v)}
	cr := &Result{Backends: []Entry{
		{Backend: "redis", Result: safe},
		{Backend: "postgres", Result: damaged},
		{Backend: "etcd", Result: inconclusive},
		{Backend: "zookeeper", Result: interrupted, err: run.ErrInterrupted, Error: "run interrupted"},
	}}
	r := Report(cr)
	for _, want := range []string{"1 backend(s) came out safe, 1 showed oversold or lost units", "2 backend(s) could not be verified"} {
		if !strings.Contains(r.Summary, want) {
			t.Errorf("summary lacks %q: %s", want, r.Summary)
		}
	}
	if st := r.Runs[2].Verdict.Status; st != report.StatusNeutral {
		t.Errorf("inconclusive run's status %q", st)
	}
	// A backend whose instance crashed fails whatever its figures say.
	cr.Backends = append(cr.Backends, Entry{Backend: "local", Result: damaged, ExpectedUnsafe: true,
		StopError: "instance http://127.0.0.1:1 had already exited: signal: segmentation fault"})
	fs := (Config{}).failures(cr.Backends)
	want := []string{"postgres: UNSAFE: 0 units oversold, 4 lost", "etcd: " + inconclusive.Verdict, "zookeeper: did not run: run interrupted",
		"local: instance http://127.0.0.1:1 had already exited: signal: segmentation fault"}
	if strings.Join(fs, "\n") != strings.Join(want, "\n") {
		t.Errorf("failures %q, want %q", fs, want)
	}
}

// TestPrintTableInterruptedUnitsNotVerified: a backend cut short before its
// verification shows its oversold and lost units as not verified, not 0.
func TestPrintTableInterruptedUnitsNotVerified(t *testing.T) {
	r := &run.Result{Verdict: "INTERRUPTED after 3 of 10 orders, while sending: not verified"}
	r.Units.Reserved, r.Units.Unverified = 7, true
	var buf bytes.Buffer
	PrintTable(&buf, &Result{Backends: []Entry{{Backend: "redis", Fencing: "on", Result: r, err: run.ErrInterrupted}}})
	line := strings.Split(buf.String(), "\n")[1]
	if strings.Count(line, "not verified") != 3 || !strings.Contains(line, " 7 ") {
		t.Errorf("row %q: want reserved 7, oversold and lost not verified", line)
	}
}

// TestReportCountsInterruptedBackendNeitherSafeNorUnsafe: the partial
// result of a backend cut short by Ctrl-C is not verified, even when a
// same-key retry contradicted its first answer before the stop: the
// report counts it neither safe nor unsafe, and the table calls no damage
// expected.
func TestReportCountsInterruptedBackendNeitherSafeNorUnsafe(t *testing.T) {
	partial := &run.Result{
		Verdict: "INTERRUPTED after 40 of 120 orders, while sending: not verified",
		Units:   tally.UnitCounts{Stock: 100, Reserved: 60, Unverified: true},
		Verification: run.Verification{Unverified: true, DisagreementCount: 1, Disagreements: []run.Disagreement{{
			SKU: "lt0-s00000", Kind: "retry_not_replayed",
			Detail: "key lt0-o0000028: first answer insufficient_stock (HTTP 409), same-key retry 201 01a25070-1a7f-74f8-a361-7707e092abff",
		}}},
	}
	cr := &Result{Backends: []Entry{
		{Backend: "none", Fencing: "off", ExpectedUnsafe: true, Result: partial, err: run.ErrInterrupted, Error: "run interrupted", Verdict: "ERROR: the run did not complete"},
	}}
	r := Report(cr)
	if !strings.Contains(r.Summary, "0 backend(s) came out safe, 0 showed oversold or lost units") ||
		!strings.Contains(r.Summary, "1 backend(s) could not be verified") {
		t.Errorf("summary: %s", r.Summary)
	}
	var buf bytes.Buffer
	PrintTable(&buf, cr)
	if row := strings.Split(buf.String(), "\n")[1]; strings.Contains(row, "(expected)") || !strings.Contains(row, "not verified") {
		t.Errorf("table row: %s", row)
	}
}
