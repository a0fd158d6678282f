package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// GoBenchmark is one benchmark of `go test -bench` output with its samples
// (one per -count) reduced to medians: the median, not the mean, because on
// a shared machine one sample that met a neighbour's compile is an outlier,
// not information.
type GoBenchmark struct {
	Package string `json:"package"`
	// Name is as go test prints it, without the -GOMAXPROCS suffix.
	Name  string `json:"name"`
	Procs int    `json:"procs,omitempty"`
	// NsPerOp is the median ns/op; NsPerOpSamples every sample in order.
	NsPerOp        float64   `json:"ns_per_op"`
	NsPerOpSamples []float64 `json:"ns_per_op_samples"`
	// Metrics holds the median of every other unit (B/op, orders/s, ...).
	Metrics map[string]float64 `json:"metrics,omitempty"`

	samples map[string][]float64
}

// OpsPerS is 1e9 / NsPerOp, or 0 when there is no ns/op.
func (b GoBenchmark) OpsPerS() float64 {
	if b.NsPerOp <= 0 {
		return 0
	}
	return 1e9 / b.NsPerOp
}

// GoBenchOutput is what parseGoBench found.
type GoBenchOutput struct {
	Benchmarks []GoBenchmark `json:"benchmarks"`
	// Failures are failed benchmarks and packages ("--- FAIL: ...", "FAIL pkg").
	Failures []string `json:"failures,omitempty"`
}

// benchName splits "BenchmarkX/sub=1-2" into the name and GOMAXPROCS, as
// golang.org/x/perf/benchfmt does: a final -N is always the procs suffix.
var benchName = regexp.MustCompile(`^(Benchmark.*?)(?:-(\d+))?$`)

// parseGoBench reads `go test -bench` output (several packages, -count=N,
// interleaved log lines) and returns each benchmark's medians in the order
// the benchmarks first appeared.
func parseGoBench(r io.Reader) (GoBenchOutput, error) {
	var out GoBenchOutput
	index := map[string]int{}
	pkg, pending := "", ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "pkg: "):
			pkg, pending = strings.TrimSpace(strings.TrimPrefix(line, "pkg: ")), ""
			continue
		case strings.HasPrefix(strings.TrimSpace(line), "--- FAIL: "):
			out.Failures = append(out.Failures, strings.TrimSpace(line))
			continue
		case strings.HasPrefix(line, "FAIL\t") || strings.HasPrefix(line, "FAIL "):
			out.Failures = append(out.Failures, strings.Join(strings.Fields(line), " "))
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		name, rest := "", f
		if strings.HasPrefix(f[0], "Benchmark") {
			name, rest = f[0], f[1:]
		} else if pending != "" {
			// A benchmark that writes to stdout splits its line: the name,
			// its output, then the figures on a line of their own.
			name = pending
		} else {
			continue
		}
		vals, ok := parseFigures(rest)
		if !ok {
			if strings.HasPrefix(f[0], "Benchmark") {
				pending = f[0]
			}
			continue
		}
		pending = ""
		m := benchName.FindStringSubmatch(name)
		procs, _ := strconv.Atoi(m[2])
		key := pkg + "\x00" + m[1]
		i, seen := index[key]
		if !seen {
			i = len(out.Benchmarks)
			index[key] = i
			out.Benchmarks = append(out.Benchmarks, GoBenchmark{Package: pkg, Name: m[1], Procs: procs, samples: map[string][]float64{}})
		}
		b := &out.Benchmarks[i]
		for unit, v := range vals {
			b.samples[unit] = append(b.samples[unit], v)
		}
		b.NsPerOpSamples = append(b.NsPerOpSamples, vals["ns/op"])
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("go test -bench output: %w", err)
	}
	for i := range out.Benchmarks {
		b := &out.Benchmarks[i]
		for unit, vs := range b.samples {
			if unit == "ns/op" {
				b.NsPerOp = median(vs)
				continue
			}
			if b.Metrics == nil {
				b.Metrics = map[string]float64{}
			}
			b.Metrics[unit] = median(vs)
		}
		b.samples = nil
	}
	return out, nil
}

// parseFigures reads "N v1 unit1 v2 unit2 ...": the iteration count, then
// value-unit pairs, of which ns/op must be one.
func parseFigures(f []string) (map[string]float64, bool) {
	if len(f) < 3 || len(f)%2 == 0 {
		return nil, false
	}
	if _, err := strconv.ParseInt(f[0], 10, 64); err != nil {
		return nil, false
	}
	vals := map[string]float64{}
	for i := 1; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return nil, false
		}
		vals[f[i+1]] = v
	}
	if _, ok := vals["ns/op"]; !ok {
		return nil, false
	}
	return vals, true
}

// parseGoBenchFile parses the file at path (a `go test -bench | tee` log).
func parseGoBenchFile(path string) (GoBenchOutput, error) {
	f, err := os.Open(path)
	if err != nil {
		return GoBenchOutput{}, err
	}
	defer f.Close()
	out, err := parseGoBench(f)
	if err != nil {
		return out, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// median of vs (not modified); 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
