package bench

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

// goBenchLog is real `go test -bench -count=3` output of two packages,
// trimmed, with the oddities the parser must survive.
const goBenchLog = `PASS
ok  	github.com/stockguard/stockguard/internal/lock/nolock	0.014s
goos: linux
goarch: amd64
pkg: github.com/stockguard/stockguard/internal/lock/pglock
cpu: Intel(R) Xeon(R) Processor
BenchmarkAcquireRelease-2     	    7818	    225500 ns/op
BenchmarkAcquireRelease-2     	    4922	    253179 ns/op
BenchmarkAcquireRelease-2     	    4654	    267577 ns/op
BenchmarkAcquireRelease16-2   	    4309	    266488 ns/op
PASS
ok  	github.com/stockguard/stockguard/internal/lock/pglock	12.281s
pkg: github.com/stockguard/stockguard/internal/lock/zklock
BenchmarkContended16/fenced/lockers=16-2        	    1387	    729018 ns/op
BenchmarkContended16/fenced/lockers=16-2        	    1605	    814946 ns/op
BenchmarkPairedVsZKLock-2      	     256	   4411323 ns/op	   2033344 ours-p50-ns	         0.9241 ratio
BenchmarkPairedVsZKLock-2      	     283	   4120431 ns/op	   1909576 ours-p50-ns	         0.9244 ratio
BenchmarkPairedVsZKLock-2      	     268	   4286183 ns/op	   1977044 ours-p50-ns	         0.9182 ratio
BenchmarkSpread16-2            	{"level":"WARN","msg":"zk: reconnect"}
    1771	    613272 ns/op
--- FAIL: BenchmarkBroken-2
    bench_test.go:12: boom
FAIL
FAIL	github.com/stockguard/stockguard/internal/lock/zklock	20.644s
`

func TestParseGoBench(t *testing.T) {
	out, err := parseGoBench(strings.NewReader(goBenchLog))
	if err != nil {
		t.Fatal(err)
	}
	const pg, zk = "github.com/stockguard/stockguard/internal/lock/pglock", "github.com/stockguard/stockguard/internal/lock/zklock"
	want := []GoBenchmark{
		{Package: pg, Name: "BenchmarkAcquireRelease", Procs: 2, NsPerOp: 253179, NsPerOpSamples: []float64{225500, 253179, 267577}},
		{Package: pg, Name: "BenchmarkAcquireRelease16", Procs: 2, NsPerOp: 266488, NsPerOpSamples: []float64{266488}},
		// An even count: the mean of the middle two.
		{Package: zk, Name: "BenchmarkContended16/fenced/lockers=16", Procs: 2, NsPerOp: 771982, NsPerOpSamples: []float64{729018, 814946}},
		{Package: zk, Name: "BenchmarkPairedVsZKLock", Procs: 2, NsPerOp: 4286183, NsPerOpSamples: []float64{4411323, 4120431, 4286183},
			Metrics: map[string]float64{"ours-p50-ns": 1977044, "ratio": 0.9241}},
		// Log output between the name and the figures.
		{Package: zk, Name: "BenchmarkSpread16", Procs: 2, NsPerOp: 613272, NsPerOpSamples: []float64{613272}},
	}
	if !reflect.DeepEqual(out.Benchmarks, want) {
		t.Errorf("benchmarks:\n got %+v\nwant %+v", out.Benchmarks, want)
	}
	wantFail := []string{"--- FAIL: BenchmarkBroken-2", "FAIL github.com/stockguard/stockguard/internal/lock/zklock 20.644s"}
	if !reflect.DeepEqual(out.Failures, wantFail) {
		t.Errorf("failures: got %q, want %q", out.Failures, wantFail)
	}
	if got := out.Benchmarks[0].OpsPerS(); math.Abs(got-1e9/253179) > 1e-9 {
		t.Errorf("ops/s %v", got)
	}
}

func TestParseFigures(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{"100 123 ns/op", true},
		{"100 123 ns/op 5 B/op 1 allocs/op", true},
		{"100 1.5e+06 ns/op 3150 orders/s", true},
		{"100 3150 orders/s", false}, // no ns/op
		{"100 123", false},
		{"x 123 ns/op", false},
		{"100 abc ns/op", false},
		{`{"level":"WARN"}`, false},
		{"", false},
	} {
		_, ok := parseFigures(strings.Fields(tc.line))
		if ok != tc.ok {
			t.Errorf("parseFigures(%q) ok = %v, want %v", tc.line, ok, tc.ok)
		}
	}
}

func TestBenchNameSuffix(t *testing.T) {
	for in, want := range map[string][2]string{
		"BenchmarkX-2":                   {"BenchmarkX", "2"},
		"BenchmarkX":                     {"BenchmarkX", ""},
		"BenchmarkC/orders=64-16":        {"BenchmarkC/orders=64", "16"},
		"BenchmarkHotRowCeiling/order-2": {"BenchmarkHotRowCeiling/order", "2"},
	} {
		m := benchName.FindStringSubmatch(in)
		if m == nil || m[1] != want[0] || m[2] != want[1] {
			t.Errorf("%q: got %q, want %q", in, m, want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), tc.in...)
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if !reflect.DeepEqual(in, tc.in) {
			t.Errorf("median modified its input: %v", tc.in)
		}
	}
}
