package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/chaos"
	"github.com/stockguard/stockguard/loadtest/compare"
	"github.com/stockguard/stockguard/loadtest/compare/seedtable"
	"github.com/stockguard/stockguard/loadtest/fakeservice"
	"github.com/stockguard/stockguard/loadtest/run"
)

func TestMainRunWritesJSON(t *testing.T) {
	s := fakeservice.New("tok", false).Server(t)
	out := filepath.Join(t.TempDir(), "r", "run.json")
	var stdout, stderr bytes.Buffer
	err := Main(fakeservice.Context(t), []string{"run", "--urls=" + s.URL + "/," + s.URL, "--orders=200", "--concurrency=8",
		"--skus=5", "--stock=30", "--seed=3", "--json=" + out, "--backend=local", "--fencing=off", "--progress=off"},
		func(k string) string { return map[string]string{"STOCKGUARD_ADMIN_TOKEN": "tok"}[k] }, &stdout, &stderr)
	if err != nil {
		t.Fatalf("Main: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"backend", "local", "verdict", "safe: 0 oversold, 0 lost", "ledger", "audit", "counters"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res run.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Backend != "local" || res.Fencing != "off" || res.Seed != 3 || res.Orders.Sent != 200 || res.Instances != 2 {
		t.Errorf("json: backend %q fencing %q seed %d sent %d instances %d", res.Backend, res.Fencing, res.Seed, res.Orders.Sent, res.Instances)
	}
}

func TestMainRunFailsOnDamage(t *testing.T) {
	s := fakeservice.New("", true).Server(t)
	args := []string{"run", "--urls=" + s.URL, "--orders=400", "--concurrency=32", "--skus=2", "--stock=50", "--zipf=0", "--progress=off"}
	var stdout, stderr bytes.Buffer
	err := Main(fakeservice.Context(t), args, func(string) string { return "" }, &stdout, &stderr)
	if !errors.Is(err, ErrUnsafe) {
		t.Fatalf("err = %v, want ErrUnsafe\n%s", err, stdout.String())
	}
	s2 := fakeservice.New("", true).Server(t)
	args[1] = "--urls=" + s2.URL
	if err := Main(fakeservice.Context(t), append(args, "--expect-unsafe"), func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatalf("--expect-unsafe: %v", err)
	}
}

// TestMainRunInterruptedBeforeSending: Ctrl-C while the SKUs are being
// created still prints the (empty) summary and returns ErrInterrupted:
// exit 130, as the usage promises.
func TestMainRunInterruptedBeforeSending(t *testing.T) {
	ctx, cancel := context.WithCancel(fakeservice.Context(t))
	defer cancel()
	f := fakeservice.New("", false)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			cancel()
		}
		f.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	var stdout, stderr bytes.Buffer
	err := Main(ctx, []string{"run", "--urls=" + s.URL, "--orders=50", "--progress=off"}, func(string) string { return "" }, &stdout, &stderr)
	if !errors.Is(err, ErrInterrupted) || !strings.Contains(stdout.String(), "INTERRUPTED after 0 of 50 orders, while creating the SKUs") {
		t.Fatalf("err = %v, want ErrInterrupted; stdout:\n%s", err, stdout.String())
	}
}

func TestMainUsageErrors(t *testing.T) {
	tests := [][]string{
		nil,
		{"bogus"},
		{"run"},
		{"run", "--urls=http://127.0.0.1:1", "--orders=-1"},
		{"run", "--urls=http://127.0.0.1:1", "--lines=3..1"},
		{"run", "--urls=http://127.0.0.1:1", "--rate=10/h", "--duration=1s"},
		{"run", "--urls=http://127.0.0.1:1", "--rate=10/s"},
		{"run", "--urls=http://127.0.0.1:1", "--rate=10/s", "--duration=1s", "--orders=5"},
		{"run", "--urls=http://127.0.0.1:1", "--hold-seconds=60"},
		{"run", "--urls=http://127.0.0.1:1", "--rate=10/s", "--duration=3m", "--timeout=2m"},
		{"run", "--urls=http://127.0.0.1:1", "extra"},
		{"run", "--nope"},
		{"compare", "--backends=none,mysql"},
		{"compare", "--require-unsafe=redis", "--backends=redis"},
		{"compare", "--require-unsafe=local", "--backends=none"},
		{"compare", "--bin=/nonexistent/stockguard"},
		{"compare", "--instances=0"},
	}
	for _, args := range tests {
		var stdout, stderr bytes.Buffer
		err := Main(context.Background(), args, func(string) string { return "" }, &stdout, &stderr)
		if !errors.Is(err, ErrUsage) {
			t.Errorf("Main(%q) = %v, want ErrUsage", args, err)
		}
		if stderr.Len() == 0 {
			t.Errorf("Main(%q) printed nothing to stderr", args)
		}
	}
	var stdout, stderr bytes.Buffer
	if err := Main(context.Background(), []string{"run", "-h"}, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Errorf("run -h: %v", err)
	}
	if !strings.Contains(stdout.String(), "--urls") || stderr.Len() != 0 {
		t.Errorf("run -h: stdout %q, stderr %q; want the flags on stdout only", stdout.String(), stderr.String())
	}
}

// TestOpenLoopTimeoutFollowsDuration: without --timeout an open loop may
// send for its whole --duration (plus a grace); an explicit --timeout
// shorter than --duration, which would cut it silently, is a usage error.
func TestOpenLoopTimeoutFollowsDuration(t *testing.T) {
	parse := func(args ...string) (run.Config, error) {
		var stdout, stderr bytes.Buffer
		fs := newFlags("run", &stdout, &stderr)
		var wf workloadFlags
		wf.register(fs.FlagSet)
		if err := fs.Parse(args, func(string) string { return "" }); err != nil {
			return run.Config{}, err
		}
		err := wf.finish(fs.IsSet)
		return wf.cfg, err
	}
	cfg, err := parse("--rate=10/s", "--duration=5m")
	if err != nil || cfg.Timeout != 5*time.Minute+run.OpenLoopGrace {
		t.Errorf("open loop of 5m: timeout %v (%v), want %v", cfg.Timeout, err, 5*time.Minute+run.OpenLoopGrace)
	}
	if cfg, err := parse("--orders=10"); err != nil || cfg.Timeout != 2*time.Minute {
		t.Errorf("closed loop: timeout %v (%v), want 2m", cfg.Timeout, err)
	}
	for args, want := range map[string][]string{
		"--rate=10/s --duration=3m --timeout=2m": {"--timeout=2m0s is shorter than --duration=3m0s"},
		"--hold-seconds=60":                      {"--hold-seconds=60: the holds could expire before the run is verified", "want at least 330"},
	} {
		var stdout, stderr bytes.Buffer
		err := Main(context.Background(), append([]string{"run", "--urls=http://127.0.0.1:1"}, strings.Fields(args)...),
			func(string) string { return "" }, &stdout, &stderr)
		if !errors.Is(err, ErrUsage) {
			t.Errorf("%s: err = %v, want ErrUsage", args, err)
		}
		for _, w := range want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%s: stderr lacks %q: %s", args, w, stderr.String())
			}
		}
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"500": 500, "500/s": 500, "120/m": 2, " 2.5/s ": 2.5} {
		if got, err := parseRate(in); err != nil || got != want {
			t.Errorf("parseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1/s", "x/s", "5/h"} {
		if _, err := parseRate(in); err == nil {
			t.Errorf("parseRate(%q) = nil error", in)
		}
	}
}

// TestCompareWithFakeServe runs compare end to end with this test binary as
// the service (see TestMain): real child processes, health checks, SIGTERM.
func TestCompareWithFakeServe(t *testing.T) {
	t.Setenv(fakeservice.Env, "1")
	t.Setenv("STOCKGUARD_COALESCE", "off") // stray: must not reach the instances

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	report, js := filepath.Join(dir, "report.html"), filepath.Join(dir, "compare.json")
	args := []string{"compare", "--bin=" + exe, "--backends=none,postgres", "--instances=1",
		"--orders=400", "--concurrency=32", "--skus=3", "--stock=50", "--zipf=0", "--seed=11",
		"--report=" + report, "--json=" + js, "--require-unsafe=none", "--progress=off", "--seed-table=false", "--logs=" + filepath.Join(dir, "logs")}
	var stdout, stderr bytes.Buffer
	if err := Main(fakeservice.Context(t), args, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatalf("compare: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"backend", "none", "postgres", "UNSAFE", "(expected)", "safe: 0 oversold, 0 lost", "report: "} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	var cr compare.Result
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
	for _, e := range cr.Backends {
		if e.Setup == nil {
			t.Fatalf("%s: no setup recorded", e.Backend)
		}
		rec := strings.Join(append(e.Setup.Args, e.Setup.Env...), " ")
		if !strings.Contains(rec, "--lock="+e.Backend) || !strings.Contains(rec, "STOCKGUARD_ADMIN_TOKEN=<redacted>") ||
			strings.Contains(rec, "COALESCE") {
			t.Errorf("%s setup: %s", e.Backend, rec)
		}
	}
	if !strings.Contains(out, "postgres environment: ") {
		t.Errorf("the terminal output does not show the instances' environment:\n%s", out)
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
	for _, want := range []string{"<svg", "postgres", "safe: 0 oversold, 0 lost", "UNSAFE: ", "How the instances were started", "STOCKGUARD_ADMIN_TOKEN=&lt;redacted&gt;"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestCompareFailsWhenRequiredDamageIsMissing: a --require-unsafe backend
// that comes out clean fails the comparison.
func TestCompareFailsWhenRequiredDamageIsMissing(t *testing.T) {
	t.Setenv(fakeservice.Env, "1")
	exe, _ := os.Executable()
	dir := t.TempDir()
	// One order per SKU with plenty of stock: even the lossy fake cannot lose.
	args := []string{"compare", "--bin=" + exe, "--backends=local", "--instances=1", "--orders=5", "--concurrency=1",
		"--skus=5", "--stock=1000", "--retry-share=0", "--report=", "--json=" + filepath.Join(dir, "c.json"),
		"--require-unsafe=local", "--progress=off", "--seed-table=false"}
	var stdout, stderr bytes.Buffer
	err := Main(fakeservice.Context(t), args, func(string) string { return "" }, &stdout, &stderr)
	// Missing damage is a failure, not damage: exit 1, not 3.
	if !errors.Is(err, errFailed) || errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "require-unsafe") {
		t.Fatalf("err = %v, want errFailed about --require-unsafe", err)
	}
}

// TestCompareServeFlags (the part the command line owns): a flag compare
// sets itself is refused before anything starts.
func TestCompareRefusesOwnedServeFlags(t *testing.T) {
	exe, _ := os.Executable()
	var stdout, stderr bytes.Buffer
	err := Main(fakeservice.Context(t), []string{"compare", "--bin=" + exe, "--backends=redis", "--serve-flag=--fencing=off", "--report=", "--json="},
		func(string) string { return "" }, &stdout, &stderr)
	if !errors.Is(err, ErrUsage) || !strings.Contains(stderr.String(), "sets --fencing itself") {
		t.Fatalf("err = %v, stderr %s", err, stderr.String())
	}
}

// TestBenchRefusesSuiteServeFlags: bench runs every backend with
// --coalesce on and off, so a --serve-flag setting it is refused before
// anything starts.
func TestBenchRefusesSuiteServeFlags(t *testing.T) {
	exe, _ := os.Executable()
	var stdout, stderr bytes.Buffer
	err := Main(fakeservice.Context(t), []string{"bench", "--bin=" + exe, "--backends=redis", "--serve-flag=--coalesce=off", "--out="},
		func(string) string { return "" }, &stdout, &stderr)
	if !errors.Is(err, ErrUsage) || !strings.Contains(stderr.String(), "sets --coalesce itself") {
		t.Fatalf("err = %v, stderr %s", err, stderr.String())
	}
}

func TestChaosCLIUsage(t *testing.T) {
	for _, args := range [][]string{
		{"chaos"},
		{"chaos", "--scenario=nope", "--bin=/bin/sh"},
		{"chaos", "--scenario=pause-holder", "--fencing=sometimes", "--bin=/bin/sh"},
	} {
		var stdout, stderr bytes.Buffer
		err := Main(context.Background(), args, func(string) string { return "" }, &stdout, &stderr)
		if !errors.Is(err, ErrUsage) {
			t.Errorf("%v: err = %v, want ErrUsage", args, err)
		}
	}
	var stdout, stderr bytes.Buffer
	if err := Main(context.Background(), []string{"chaos", "-h"}, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, s := range chaos.Scenarios {
		if !strings.Contains(stdout.String(), s) {
			t.Errorf("chaos -h does not name %s", s)
		}
	}
}

// TestCompareInterruptedPrintsPartialTable: when its context ends (Ctrl-C
// in stockguard), compare stops, prints the table of what it measured and
// returns ErrInterrupted; its instances are stopped.
func TestCompareInterruptedPrintsPartialTable(t *testing.T) {
	t.Setenv(fakeservice.Env, "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	js := filepath.Join(dir, "compare.json")
	args := []string{"compare", "--bin=" + exe, "--backends=postgres,redis", "--instances=1", "--rate=40/s", "--duration=2m",
		"--skus=3", "--stock=1000", "--report=", "--json=" + js, "--progress=on", "--seed-table=false",
		"--logs=" + filepath.Join(dir, "logs")} // an interrupted run keeps its logs
	ctx, cancel := context.WithCancel(fakeservice.Context(t))
	defer cancel()
	// Interrupt two seconds after the progress bar shows orders being sent,
	// however long the instances took to start.
	var stdout bytes.Buffer
	stderr := &onFirst{match: "orders", fn: func() { time.AfterFunc(2*time.Second, cancel) }}
	err = Main(ctx, args, func(string) string { return "" }, &stdout, stderr)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err = %v, want ErrInterrupted\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"interrupted: the backends measured so far", "postgres", "INTERRUPTED after", "json: "} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "redis ") {
		t.Errorf("the backend after the interruption ran:\n%s", out)
	}
	var cr compare.Result
	if b, err := os.ReadFile(js); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &cr); err != nil {
		t.Fatal(err)
	}
	if cr.Pass || len(cr.Backends) != 1 || cr.Backends[0].Result == nil || cr.Backends[0].Result.Orders.Sent == 0 {
		t.Errorf("json: pass %v, backends %+v", cr.Pass, cr.Backends)
	}
}

// TestCompareDamagedOnlyForSafeBackends: damage of none or local, which is
// expected, does not make a comparison unsafe; damage of a safe backend does.
func TestCompareDamagedOnlyForSafeBackends(t *testing.T) {
	damaged := &run.Result{Verification: run.Verification{Oversold: 3}}
	clean := &run.Result{}
	for _, tc := range []struct {
		entries []compare.Entry
		want    bool
	}{
		{[]compare.Entry{{Backend: "none", ExpectedUnsafe: true, Result: damaged}, {Backend: "redis", Result: clean}}, false},
		{[]compare.Entry{{Backend: "redis", Result: damaged}}, true},
		{[]compare.Entry{{Backend: "redis", Error: "did not start"}}, false},
		// Damage in a safe backend's seed-table runs is damage too (exit 3).
		{[]compare.Entry{{Backend: "redis", Result: clean, SeedTable: &seedtable.Table{ManySKUs: seedtable.Throughput{Orders: 9, Damaged: true}}}}, true},
		{[]compare.Entry{{Backend: "redis", Result: clean, SeedTable: &seedtable.Table{Fencing: seedtable.Fencing{OnDamaged: 2}}}}, true},
		{[]compare.Entry{{Backend: "redis", Result: clean, SeedTable: &seedtable.Table{HotSKU: seedtable.Throughput{Orders: 9}}}}, false}, // inconclusive
		{[]compare.Entry{{Backend: "local", ExpectedUnsafe: true, Result: clean, SeedTable: &seedtable.Table{HotSKU: seedtable.Throughput{Orders: 9, Damaged: true}}}}, false},
	} {
		if got := compareDamaged(&compare.Result{Backends: tc.entries}); got != tc.want {
			t.Errorf("%+v: damaged %v, want %v", tc.entries, got, tc.want)
		}
	}
}

// TestRunVerdictExitCodes: --expect-unsafe excuses oversold or lost units,
// never an inconclusive run (exit 1), as the exit-code table says.
func TestRunVerdictExitCodes(t *testing.T) {
	safe := &run.Result{Safe: true}
	damaged := &run.Result{Verification: run.Verification{Lost: 4}}
	inconclusive := &run.Result{Verification: run.Verification{Unresolved: 2}}
	for _, tc := range []struct {
		name   string
		res    *run.Result
		expect bool
		want   error // nil: exit 0
	}{
		{"safe", safe, false, nil},
		{"damaged", damaged, false, ErrUnsafe},
		{"damaged, expected", damaged, true, nil},
		{"inconclusive", inconclusive, false, errFailed},
		{"inconclusive, --expect-unsafe", inconclusive, true, errFailed},
	} {
		err := runVerdict(tc.res, tc.expect)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// onFirst is a writer that calls fn once, when match is first written.
type onFirst struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	match string
	fn    func()
	done  bool
}

func (w *onFirst) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.match) {
		w.done = true
		w.fn()
	}
	return len(p), nil
}

func (w *onFirst) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestChaosAndBenchInterrupted: a chaos or bench suite whose context ends
// (Ctrl-C) prints what it has, writes its JSON and returns ErrInterrupted
// (exit 130), like run and compare.
func TestChaosAndBenchInterrupted(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"chaos", "--bin=" + exe, "--scenario=pause-holder", "--backend=redis", "--json=" + filepath.Join(dir, "chaos.json"), "--report="},
		{"bench", "--bin=" + exe, "--backends=postgres", "--quick", "--out=" + filepath.Join(dir, "bench.json")},
	} {
		var stdout, stderr bytes.Buffer
		err := Main(ctx, args, func(string) string { return "" }, &stdout, &stderr)
		if !errors.Is(err, ErrInterrupted) {
			t.Fatalf("%s: err = %v, want ErrInterrupted\n%s", args[0], err, stderr.String())
		}
		if !strings.Contains(stdout.String(), "json: ") {
			t.Errorf("%s: stdout lacks the JSON it wrote:\n%s", args[0], stdout.String())
		}
	}
}
