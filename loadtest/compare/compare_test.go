package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCompareWithFakeServe runs compare end to end with this test binary as
// the service (see TestMain): real child processes, health checks, SIGTERM.
func TestCompareWithFakeServe(t *testing.T) {
	t.Setenv(fakeServeEnv, "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	report, js := filepath.Join(dir, "report.html"), filepath.Join(dir, "compare.json")
	args := []string{"compare", "--bin=" + exe, "--backends=none,postgres", "--instances=1",
		"--orders=400", "--concurrency=32", "--skus=3", "--stock=50", "--zipf=0", "--seed=11",
		"--report=" + report, "--json=" + js, "--require-unsafe=none", "--progress=off", "--logs=" + filepath.Join(dir, "logs")}
	var stdout, stderr bytes.Buffer
	if err := Main(testCtx(t), args, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatalf("compare: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"backend", "none", "postgres", "UNSAFE", "(expected)", "safe: 0 oversold, 0 lost", "report: "} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	var cr CompareResult
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cr); err != nil {
		t.Fatal(err)
	}
	if !cr.Pass || len(cr.Backends) != 2 || cr.Seed != 11 {
		t.Fatalf("compare json: pass %v backends %d seed %d failures %v", cr.Pass, len(cr.Backends), cr.Seed, cr.Failures)
	}
	none, pg := cr.Backends[0].Result, cr.Backends[1].Result
	if none.Fencing != "off" || pg.Fencing != "on" || none.Safe || !pg.Safe {
		t.Errorf("none: fencing %s safe %v; postgres: fencing %s safe %v", none.Fencing, none.Safe, pg.Fencing, pg.Safe)
	}
	// Same seed, same workload: the generated orders are identical.
	if none.Seed != pg.Seed || none.Workload != pg.Workload {
		t.Errorf("workloads differ: %+v vs %+v", none.Workload, pg.Workload)
	}
	// Every instance was stopped.
	c := &http.Client{Timeout: time.Second}
	for _, u := range append(none.URLs, pg.URLs...) {
		if resp, err := c.Get(u + "/healthz"); err == nil {
			resp.Body.Close()
			t.Errorf("instance %s still answers after compare", u)
		}
	}
	html, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "postgres", "safe: 0 oversold, 0 lost", "UNSAFE: "} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestCompareFailsWhenRequiredDamageIsMissing: a --require-unsafe backend
// that comes out clean fails the comparison.
func TestCompareFailsWhenRequiredDamageIsMissing(t *testing.T) {
	t.Setenv(fakeServeEnv, "1")
	exe, _ := os.Executable()
	dir := t.TempDir()
	// One order per SKU with plenty of stock: even the lossy fake cannot lose.
	args := []string{"compare", "--bin=" + exe, "--backends=local", "--instances=1", "--orders=5", "--concurrency=1",
		"--skus=5", "--stock=1000", "--retry-share=0", "--report=", "--json=" + filepath.Join(dir, "c.json"),
		"--require-unsafe=local", "--progress=off"}
	var stdout, stderr bytes.Buffer
	err := Main(testCtx(t), args, func(string) string { return "" }, &stdout, &stderr)
	if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "require-unsafe") {
		t.Fatalf("err = %v, want ErrUnsafe about --require-unsafe", err)
	}
}

func TestCompareReportsStartFailure(t *testing.T) {
	// /bin/false exits at once: the backend is recorded as not run.
	cc := CompareConfig{Backends: []string{"redis"}, Instances: 2, Bin: "/bin/false", StartupTimeout: 5 * time.Second,
		Run: testConfig("http://127.0.0.1:1")}
	var stderr bytes.Buffer
	cr, err := Compare(context.Background(), cc, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cr.Pass || len(cr.Failures) != 1 || !strings.Contains(cr.Backends[0].Error, "exited during start") {
		t.Fatalf("pass %v failures %v error %q", cr.Pass, cr.Failures, cr.Backends[0].Error)
	}
	r := CompareReport(cr)
	if r.Runs[0].Verdict.Status != StatusError {
		t.Errorf("report status %q", r.Runs[0].Verdict.Status)
	}
	var buf bytes.Buffer
	if err := WriteReport(&buf, r); err != nil {
		t.Fatal(err)
	}
}

func TestServeArgs(t *testing.T) {
	o := ServeOptions{Lock: "redlock", Fencing: "on", AdminToken: "t", RedisAddrs: "a:1,b:2", DatabaseURL: "postgres://x"}
	got := strings.Join(o.args("127.0.0.1:9"), " ")
	want := "serve --addr=127.0.0.1:9 --lock=redlock --fencing=on --admin-token=t --redis-addrs=a:1,b:2 --database-url=postgres://x"
	if got != want {
		t.Errorf("args:\n got %s\nwant %s", got, want)
	}
}
