package bench

import (
	"fmt"
	"io"
	"maps"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Print writes the suite's tables: machine and load, the Go
// micro-benchmarks, the store ceiling, every run, and the one table of
// ratios with each target marked met or MISSED.
func Print(w io.Writer, res *Result) {
	m, l, s := res.Machine, res.LoadAvg, res.Settings
	fmt.Fprintf(w, "machine: %d CPUs (%s), %.1f GiB, Linux %s, %s\n", m.NProc, m.CPUModel, m.MemTotalMB/1024, m.Kernel, m.GoVersion)
	fmt.Fprintf(w, "load average (1 min) during load bench: start %.2f, mean %.2f, max %.2f, end %.2f (%d samples; the machine is shared)\n",
		l.Start, l.Mean, l.Max, l.End, l.Samples)
	db := "the shared database"
	if s.FreshDB {
		db = "a fresh scratch database"
	}
	fmt.Fprintf(w, "suite: %.0fs in %s; each run %gs, %d closed-loop clients, %d instances, seed %d%s\n",
		res.DurationS, db, s.RunDurationS, s.Clients, s.Instances, s.Seed, map[bool]string{true: " (--quick: rough figures)"}[s.Quick])
	if len(s.ServeFlags) > 0 {
		fmt.Fprintf(w, "serve flags of every instance: %s\n", strings.Join(s.ServeFlags, " "))
	}
	for _, gb := range []struct {
		title string
		out   *GoBenchOutput
	}{{"lock micro-benchmarks", res.LockBenchmarks}, {"store benchmarks", res.StoreBenchmarks}} {
		if gb.out != nil {
			printGoBench(w, gb.title, gb.out)
		}
	}
	if s.Rounds > 1 {
		for r := 1; r <= s.Rounds; r++ {
			round := res.round(r)
			if len(round.StoreCeiling.Samples) == 0 {
				continue // interrupted before it began
			}
			fmt.Fprintf(w, "\n======== round %d of %d\n", r, s.Rounds)
			printRound(w, round)
		}
		printMedians(w, res)
	} else {
		printRound(w, res)
	}
	if res.Pass {
		fmt.Fprintln(w, "\nPASS: no safe backend oversold or lost a unit, in a run or a judged window; every run completed")
	} else {
		fmt.Fprintf(w, "\nFAIL:\n  %s\n", strings.Join(res.Failures, "\n  "))
	}
}

// printRound writes the tables of one round: the store ceiling, the
// limits, the runs and their judged windows, and the ratios with their
// targets.
func printRound(w io.Writer, res *Result) {
	printCeiling(w, res.StoreCeiling)
	printLimits(w, res)
	printBenchRuns(w, res)
	printJudged(w, res)
	printTurns(w, res)
	printKernel(w, res)
	printSections(w, res)
	printHotBounds(w, res)
	printBenchRatios(w, res)
	printJudgedRatios(w, res)
}

// round is res with only round r's figures, for printRound.
func (res *Result) round(r int) *Result {
	out := *res
	out.StoreCeiling.Samples = inRound(res.StoreCeiling.Samples, r)
	out.StoreCeiling.MedianPerS = medianPerS(out.StoreCeiling.Samples)
	out.Limits = inRound(res.Limits, r)
	out.Runs = inRound(res.Runs, r)
	out.Backends = inRound(res.Backends, r)
	out.Targets = inRound(res.Targets, r)
	return &out
}

// printMedians writes every target's value in each round and the median
// it is judged on.
func printMedians(w io.Writer, res *Result) {
	fmt.Fprintf(w, "\n== targets over %d rounds, each judged on its median (the memory cap on its worst round)\n", res.Settings.Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "backend\ttarget\t")
	for r := range res.Settings.Rounds {
		fmt.Fprintf(tw, "round %d\t", r+1)
	}
	fmt.Fprintln(tw, "median\twant\t status")
	met := 0
	for _, t := range res.TargetMedians {
		fmt.Fprintf(tw, "%s\t%s\t", t.Backend, t.Target)
		for r := range res.Settings.Rounds {
			var v *float64
			if r < len(t.Values) {
				v = t.Values[r]
			}
			fmt.Fprintf(tw, "%s\t", fmtTargetValue(t, v))
		}
		fmt.Fprintf(tw, "%s\t%s\t %s\n", fmtTargetValue(t, t.Value), t.Want, t.Status)
		if t.Status == TargetMet {
			met++
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "targets met on their medians: %d of %d\n", met, len(res.TargetMedians))
}

func printGoBench(w io.Writer, title string, out *GoBenchOutput) {
	fmt.Fprintf(w, "\n== %s (go test -bench, median of each benchmark's samples)\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "package\tbenchmark\tsamples\tns/op\tops/s\tother metrics")
	for _, b := range out.Benchmarks {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.0f\t%s\n", path.Base(b.Package), strings.TrimPrefix(b.Name, "Benchmark"),
			len(b.NsPerOpSamples), b.NsPerOp, b.OpsPerS(), formatMetrics(b.Metrics))
	}
	_ = tw.Flush()
	for _, f := range out.Failures {
		fmt.Fprintf(w, "  failed: %s\n", f)
	}
}

func formatMetrics(m map[string]float64) string {
	return joinSorted(m, ", ", func(k string, v float64) string { return fmt.Sprintf("%.4g %s", v, k) })
}

// joinSorted formats m's entries in key order and joins them with sep.
func joinSorted[V any](m map[string]V, sep string, format func(k string, v V) string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, format(k, m[k]))
	}
	return strings.Join(parts, sep)
}

func printCeiling(w io.Writer, c StoreCeiling) {
	fmt.Fprintf(w, "\n== store ceiling, measured in this run (%s, %d connections)\n", c.Method, c.Conns)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "before backend\torders/s\twrites\tseconds\tload 1m\t")
	for _, s := range c.Samples {
		fmt.Fprintf(tw, "%s\t%.0f\t%d\t%.2f\t%.2f\t\n", s.Before, s.PerS, s.Writes, s.DurationS, s.LoadAvg1)
	}
	fmt.Fprintf(tw, "median\t%.0f\t\t\t\t\n", c.MedianPerS)
	_ = tw.Flush()
}

func printBenchRuns(w io.Writer, res *Result) {
	fmt.Fprintf(w, "\n== end-to-end runs (%d instances, %d clients, closed loop)\n", res.Settings.Instances, res.Settings.Clients)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "backend\tSKUs\tcoalesce\tseconds\torders/s\treserved/s\tp50 ms\tp99 ms\tlock 503s\tstale/err\toversold\tlost\tpeak RSS MB\tload 1m\t verdict")
	for _, r := range res.Runs {
		if !r.Ran {
			fmt.Fprintf(tw, "%s\t%d\t%s\t–\t–\t–\t–\t–\t–\t–\t–\t–\t%.1f\t%.2f\t ERROR: %s\n", r.Backend, r.SKUs, r.Coalesce, r.PeakRSSMB, r.LoadAvg1, benchFirstLine(r.Error))
			continue
		}
		v := r.Verdict
		if r.ExpectedUnsafe && !r.Safe {
			v += " (expected)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f\t%.0f\t%.0f\t%.1f\t%.1f\t%d\t%d\t%d\t%d\t%.1f\t%.2f\t %s\n", r.Backend, r.SKUs, r.Coalesce,
			r.DurationS, r.OrdersPerS, r.ReservedPerS, r.LatencyMs.P50, r.LatencyMs.P99, r.Orders.LockUnavailable,
			r.Orders.Errors+r.Orders.StaleFence, r.Oversold, r.Lost, r.PeakRSSMB, r.LoadAvg1, v)
	}
	_ = tw.Flush()
}

func printBenchRatios(w io.Writer, res *Result) {
	fmt.Fprintf(w, "\n== ratios and targets, hot SKU (reserved orders/s; every ratio from runs of this suite)\n")
	marks := map[string]string{} // backend/target id → mark
	met, total := 0, 0
	for _, t := range res.Targets {
		marks[t.Backend+"/"+t.ID] = t.Want + " " + string(t.Status)
		total++
		if t.Status == TargetMet {
			met++
		}
	}
	mark := func(backend, id string) string {
		if m, ok := marks[backend+"/"+id]; ok {
			return m
		}
		return "–"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "backend\tcoalesced/s\tuncoal/s\tcoal÷uncoal\ttarget\tceiling/s\tcoal÷ceiling\ttarget\tp99 coal ms\tp99 uncoal ms\tp99 c÷u\ttarget\tpeak RSS MB\ttarget\t%d-SKU coal/s\tuncoal/s\toversold\tlost\t safety\n",
		res.Settings.SpreadSKUs)
	for _, r := range res.Backends {
		safety := "safe"
		damaged := r.Oversold+r.Lost > 0 || r.JudgedUnsafe
		switch {
		case damaged && r.ExpectedUnsafe:
			safety = "unsafe (expected)"
		case damaged:
			safety = "UNSAFE"
		case r.ExpectedUnsafe:
			safety = "no damage seen (unsafe by design)"
		}
		if len(r.Missing) > 0 {
			safety += "; missing runs: " + strings.Join(r.Missing, ", ")
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%s\t%.0f\t%s\t%s\t%.1f\t%.1f\t%s\t%s\t%.1f\t%s\t%.0f\t%.0f\t%d\t%d\t %s\n", r.Backend,
			r.HotCoalescedPerS, r.HotUncoalescedPerS, fmtRatio(r.CoalescedOverUncoalesced), mark(r.Backend, "speedup"),
			r.CeilingPerS, fmtRatio(r.CoalescedOverCeiling), mark(r.Backend, "ceiling"),
			r.P99CoalescedMs, r.P99UncoalescedMs, fmtRatio(r.P99CoalescedOverUncoalesced), mark(r.Backend, "p99"),
			r.PeakRSSMB, mark(r.Backend, "rss"), r.SpreadCoalescedPerS, r.SpreadUncoalescedPerS, r.Oversold, r.Lost, safety)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "targets met: %d of %d\n", met, total)
	for _, t := range res.Targets {
		if t.Status != TargetMet {
			fmt.Fprintf(w, "  %s %s: %s (got %s)\n", t.Status, t.Backend, t.Target, fmtTargetValue(t, t.Value))
		}
	}
}

// fmtRatio formats a ratio or value: up to three decimals below 10, cut,
// so that a ratio just short of its target never prints as the target
// (1.4996 is "1.499", not "1.5"), three significant digits above; – when it
// could not be computed.
func fmtRatio(v *float64) string {
	if v == nil {
		return "–"
	}
	if math.Abs(*v) < 10 {
		// Cut, not rounded: 0.2996 prints 0.299, not the 0.3 it misses.
		return strconv.FormatFloat(math.Trunc(*v*1000)/1000, 'f', -1, 64)
	}
	return fmt.Sprintf("%.3g", *v)
}

// fmtTargetValue formats v in the unit of t's condition: a rate in whole
// orders/s, milliseconds and megabytes to one decimal, a ratio by fmtRatio.
// Cut, as fmtRatio does, toward the side of the limit that keeps the
// verdict: up against ≤, down against ≥ and <, so that 3699.6 against
// ≥3700/s prints 3699/s and 149.96 against <150 MB prints 149.9 MB.
func fmtTargetValue(t TargetResult, v *float64) string {
	if v == nil {
		return "–"
	}
	up := strings.HasPrefix(t.Want, "≤")
	switch {
	case strings.HasSuffix(t.Want, "/s"):
		return fmt.Sprintf("%.0f/s", cutTo(*v, 0, up))
	case strings.HasSuffix(t.Want, " ms"), strings.HasSuffix(t.Want, " MB"):
		return fmt.Sprintf("%.1f%s", cutTo(*v, 1, up), t.Want[strings.LastIndexByte(t.Want, ' '):])
	}
	return fmtRatio(v)
}

// cutTo cuts v to decimals places, up or down.
func cutTo(v float64, decimals int, up bool) float64 {
	p := math.Pow10(decimals)
	if up {
		return math.Ceil(v*p) / p
	}
	return math.Floor(v*p) / p
}

func benchFirstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
