package bench

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/stockguard/stockguard/loadtest/bench/cpu"
	"github.com/stockguard/stockguard/loadtest/bench/naive"
)

// cpuClasses are the CPU table's columns, in order.
var cpuClasses = []string{"instances", "postgres", "redis", "zookeeper", "etcd", "client"}

// printLimits is the limits measured next to each backend's runs.
func printLimits(w io.Writer, res *Result) {
	if len(res.Limits) == 0 {
		return
	}
	fmt.Fprintf(w, "\n== limits, each measured next to the backend's runs (%gs windows after %gs warm-up; %d goroutines / vegeta workers; the HTTP floor in turns with the backend's hot window, the naive 1,000-key loop, the rival service or the spread ceiling with its 1,000-SKU window, coalescing on; other spread ceilings sampled before)\n",
		res.Settings.JudgeWindowS, res.Settings.JudgeWarmupS, res.Settings.Clients)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "before backend\tspread ceiling/s (%d rows)\tnaive library\tnaive hot/s\tlock/unlock failures\tnaive %d keys/s\tlock/unlock failures\tHTTP floor/s\tfloor p99 ms\trival %d SKUs/s\t errors\n",
		res.Settings.SpreadSKUs, res.Settings.SpreadSKUs, res.Settings.SpreadSKUs)
	for _, l := range res.Limits {
		lib, nh, nhf, ns, nsf, fl, fp, rv := "–", "–", "–", "–", "–", "–", "–", "–"
		if l.NaiveHot != nil {
			lib, nh, nhf = l.NaiveHot.Library, fmt.Sprintf("%.0f", l.NaiveHot.OrdersPerS), naiveFailures(l.NaiveHot)
		}
		if l.NaiveSpread != nil {
			lib, ns, nsf = l.NaiveSpread.Library, fmt.Sprintf("%.0f", l.NaiveSpread.OrdersPerS), naiveFailures(l.NaiveSpread)
		}
		errs := slices.Clone(l.Errors)
		if l.Floor != nil && l.Floor.Error == "" {
			fl, fp = fmt.Sprintf("%.0f", l.Floor.OrdersPerS), fmt.Sprintf("%.1f", l.Floor.CreatedLatencyMs.P99)
		} else if l.Floor != nil {
			errs = append(errs, "floor: "+benchFirstLine(l.Floor.Error))
		}
		if l.Rival != nil && l.Rival.Error == "" {
			rv = fmt.Sprintf("%s %.0f (store %s)", l.RivalBackend, l.Rival.OrdersPerS, storeMark(l.Rival.Readback))
		} else if l.Rival != nil {
			errs = append(errs, l.RivalBackend+": "+benchFirstLine(l.Rival.Error))
		}
		sc := "–"
		if c := l.SpreadCeiling; c != nil && len(c.TurnsPerS) > 0 {
			sc = fmt.Sprintf("%.0f (in turns)", c.PerS)
		} else if c != nil {
			sc = fmt.Sprintf("%.0f", c.PerS)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t %s\n", l.Backend, sc, lib, nh, nhf, ns, nsf, fl, fp, rv, benchFirstLine(strings.Join(errs, "; ")))
	}
	_ = tw.Flush()
}

// naiveFailures is a naive loop's lock and unlock failures: "3/0".
func naiveFailures(r *naive.Result) string {
	return fmt.Sprintf("%d/%d", r.LockFailures, r.UnlockFailures)
}

// printTurns is, for each window judged in turns with a limit, each
// turn's rate: how far the machine moved within the window, on both sides.
func printTurns(w io.Writer, res *Result) {
	var lines []string
	for _, l := range res.Limits {
		for _, r := range res.Runs {
			if r.Backend != l.Backend || r.Round != l.Round || r.Coalesce != "on" || r.Judge == nil || len(r.Judge.TurnsPerS) == 0 {
				continue
			}
			switch {
			case r.Workload == benchHot && l.Floor != nil:
				lines = append(lines, fmt.Sprintf("  %s, %d SKU: service %s; HTTP floor %s", l.Backend, r.SKUs, judgedTurns(r.Judge), judgedTurns(l.Floor)))
			case r.Workload == benchSpread && l.NaiveSpread != nil:
				lines = append(lines, fmt.Sprintf("  %s, %d SKUs: service %s; naive %s %s", l.Backend, r.SKUs, judgedTurns(r.Judge),
					l.NaiveSpread.Library, formatTurns(l.NaiveSpread.TurnsPerS)))
			case r.Workload == benchSpread && l.SpreadCeiling != nil && len(l.SpreadCeiling.TurnsPerS) > 0:
				lines = append(lines, fmt.Sprintf("  %s, %d SKUs: service %s; spread ceiling %s", l.Backend, r.SKUs, judgedTurns(r.Judge),
					formatTurns(l.SpreadCeiling.TurnsPerS)))
			case r.Workload == benchSpread && l.Rival != nil && len(l.Rival.TurnsPerS) > 0:
				lines = append(lines, fmt.Sprintf("  %s, %d SKUs: service %s; %s %s", l.Backend, r.SKUs, judgedTurns(r.Judge),
					l.RivalBackend, judgedTurns(l.Rival)))
			}
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "\n== windows judged in turns with their limit, the order reversed every other turn (orders/s of each turn; stolen: the share of the machine's time the hypervisor gave other guests in each)\n%s\n",
		strings.Join(lines, "\n"))
}

// judgedTurns is an attack's turns, and the share stolen in each where it
// was read: "4342 4414 (stolen 3.1 12.0 %)".
func judgedTurns(j *Judged) string {
	out := formatTurns(j.TurnsPerS)
	if j.CPU == nil || len(j.CPU.TurnStealShares) != len(j.TurnsPerS) {
		return out
	}
	stolen := make([]string, len(j.TurnsPerS))
	for i, s := range j.CPU.TurnStealShares {
		stolen[i] = fmt.Sprintf("%.1f", 100*s)
	}
	return fmt.Sprintf("%s (stolen %s %%)", out, strings.Join(stolen, " "))
}

// formatTurns is each turn's rate, whole: "4342 4414".
func formatTurns(ts []float64) string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = fmt.Sprintf("%.0f", t)
	}
	return strings.Join(out, " ")
}

// printJudged is every run's attack by the outside generator beside the
// project's own generator's figures, and the CPU per order of the window.
func printJudged(w io.Writer, res *Result) {
	if !slices.ContainsFunc(res.Runs, func(r Run) bool { return r.Judge != nil }) {
		return
	}
	fmt.Fprintf(w, "\n== the judge: vegeta after each run on the same instances (Rate{Freq:0}, %d workers, round-robin, fresh Idempotency-Key per order; p50 and p99 of the 201s, \"all\" of every answer; store: the judged SKUs read back)\n", res.Settings.Clients)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "backend\tSKUs\tcoalesce\tvegeta orders/s\tp50 ms\tp99 ms\tp99 all ms\tstatus\tstore\tload run reserved/s\tload p99 ms\tCPU µs/order: %s\ttotal\tcores busy\t errors\n", strings.Join(cpuClasses, "\t"))
	for _, r := range res.Runs {
		j := r.Judge
		if j == nil {
			continue
		}
		cpuCols := strings.Repeat("–\t", len(cpuClasses)+2)
		if j.CPU != nil {
			cpuCols = formatCPU(*j.CPU)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%.1f\t%.1f\t%.1f\t%s\t%s\t%.0f\t%.1f\t%s %s\n", r.Backend, r.SKUs, r.Coalesce, j.OrdersPerS,
			j.CreatedLatencyMs.P50, j.CreatedLatencyMs.P99, j.LatencyMs.P99, formatStatus(j.Status), storeMark(j.Readback),
			r.ReservedPerS, r.LatencyMs.P99, cpuCols, benchFirstLine(cmp.Or(j.Error, j.CPUError)))
	}
	for _, l := range res.Limits {
		if f := l.Floor; f != nil && f.CPU != nil {
			fmt.Fprintf(tw, "floor (turns with %s)\t1\t–\t%.0f\t%.1f\t%.1f\t%.1f\t%s\t–\t–\t–\t%s\n", l.Backend, f.OrdersPerS, f.CreatedLatencyMs.P50,
				f.CreatedLatencyMs.P99, f.LatencyMs.P99, formatStatus(f.Status), formatCPU(*f.CPU))
		}
		if v := l.Rival; v != nil {
			cpuCols := strings.Repeat("–\t", len(cpuClasses)+2)
			if v.CPU != nil {
				cpuCols = formatCPU(*v.CPU)
			}
			fmt.Fprintf(tw, "%s (turns with %s)\t%d\ton\t%.0f\t%.1f\t%.1f\t%.1f\t%s\t%s\t–\t–\t%s %s\n", l.RivalBackend, l.Backend, res.Settings.SpreadSKUs, v.OrdersPerS,
				v.CreatedLatencyMs.P50, v.CreatedLatencyMs.P99, v.LatencyMs.P99, formatStatus(v.Status), storeMark(v.Readback),
				cpuCols, benchFirstLine(cmp.Or(v.Error, v.CPUError)))
		}
	}
	_ = tw.Flush()
	for _, r := range res.Runs {
		if rb := r.readback(); rb != nil && !rb.Safe {
			fmt.Fprintf(w, "  %s %s coalesce=%s, judged window: %s\n", r.Backend, r.Workload, r.Coalesce, rb.Verdict)
		}
	}
	for _, l := range res.Limits {
		if l.Rival != nil && l.Rival.Readback != nil && !l.Rival.Readback.Safe {
			fmt.Fprintf(w, "  %s spread coalesce=on, in turns with %s, judged window: %s\n", l.RivalBackend, l.Backend, l.Rival.Readback.Verdict)
		}
	}
	if len(res.ServersMissing) > 0 {
		fmt.Fprintf(w, "  CPU not read for (no process found listening): %s\n", strings.Join(res.ServersMissing, ", "))
	}
}

// printKernel is where each judged window's CPU went: for every class, of
// its µs an order the kernel's part, and the system calls it made an
// order. On this machine's virtual CPUs a system call costs microseconds,
// and every loopback round trip is at least two. Last, the share of the
// machine's time the hypervisor stole in the window: on a shared VM, one
// reason the same code has fast spells and slow ones.
func printKernel(w io.Writer, res *Result) {
	type row struct {
		name string
		win  *cpu.Window
	}
	var rows []row
	for _, r := range res.Runs {
		if j := r.Judge; j != nil && j.CPU != nil {
			rows = append(rows, row{fmt.Sprintf("%s\t%d\t%s", r.Backend, r.SKUs, r.Coalesce), j.CPU})
		}
	}
	for _, l := range res.Limits {
		if f := l.Floor; f != nil && f.CPU != nil {
			rows = append(rows, row{fmt.Sprintf("floor (turns with %s)\t1\t–", l.Backend), f.CPU})
		}
		if v := l.Rival; v != nil && v.CPU != nil {
			rows = append(rows, row{fmt.Sprintf("%s (turns with %s)\t%d\ton", l.RivalBackend, l.Backend, res.Settings.SpreadSKUs), v.CPU})
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n== where an order's CPU went in the judged windows (each class: the kernel's µs of its µs an order / read and write system calls an order; stolen: the machine's time the hypervisor gave other guests)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "backend\tSKUs\tcoalesce\t%s\tkernel share\tstolen\t\n", strings.Join(cpuClasses, "\t"))
	for _, r := range rows {
		by := map[string]cpu.Usage{}
		var kernel float64
		for _, c := range r.win.Classes {
			by[c.Class] = c
			kernel += c.KernelPerOrderUs
		}
		var b strings.Builder
		for _, name := range cpuClasses {
			c, ok := by[name]
			switch {
			case !ok:
				b.WriteString("–\t")
			case c.SyscallsPerOrder == nil:
				fmt.Fprintf(&b, "%.0f/%.0f µs /–\t", c.KernelPerOrderUs, c.PerOrderUs)
			default:
				fmt.Fprintf(&b, "%.0f/%.0f µs /%.1f\t", c.KernelPerOrderUs, c.PerOrderUs, *c.SyscallsPerOrder)
			}
		}
		share, stolen := "–", "–"
		if r.win.TotalPerOrderUs > 0 {
			share = fmt.Sprintf("%.0f%%", 100*kernel/r.win.TotalPerOrderUs)
		}
		if r.win.StealShare != nil {
			stolen = fmt.Sprintf("%.1f%%", 100**r.win.StealShare)
		}
		fmt.Fprintf(tw, "%s\t%s%s\t%s\t\n", r.name, b.String(), share, stolen)
	}
	_ = tw.Flush()
}

// printSections is what the instances' critical sections did in each
// judged window. On one SKU its holds and hand-offs are the window end to
// end: the serial chain that bounds a hot SKU's rate.
func printSections(w io.Writer, res *Result) {
	hasSection := func(j *Judged) bool { return j != nil && (j.Section != nil || j.SectionError != "") }
	if !slices.ContainsFunc(res.Runs, func(r Run) bool { return hasSection(r.Judge) }) {
		return
	}
	fmt.Fprintf(w, "\n== the critical sections in the judged windows (the instances' /metrics: holds let go of in the window; held: their time over the window's, on one SKU the share the key was held; hand-off: what the holds left of it, per hold)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "backend\tSKUs\tcoalesce\tholds/s\torders a hold\twrites a hold\thold ms\tclaim ms\twrite ms\theld\thand-off ms\t errors\n")
	for _, r := range res.Runs {
		if hasSection(r.Judge) {
			sectionRow(tw, fmt.Sprintf("%s\t%d\t%s", r.Backend, r.SKUs, r.Coalesce), r.Judge)
		}
	}
	for _, l := range res.Limits {
		if hasSection(l.Rival) {
			sectionRow(tw, fmt.Sprintf("%s (turns with %s)\t%d\ton", l.RivalBackend, l.Backend, res.Settings.SpreadSKUs), l.Rival)
		}
	}
	_ = tw.Flush()
}

// sectionRow is one window's row of printSections, after its name's
// three columns.
func sectionRow(tw io.Writer, name string, j *Judged) {
	s := j.Section
	if s == nil || s.DurationS <= 0 {
		fmt.Fprintf(tw, "%s\t–\t–\t–\t–\t–\t–\t–\t–\t %s\n", name, benchFirstLine(j.SectionError))
		return
	}
	perHold := func(n uint64) string {
		if s.Holds == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", float64(n)/float64(s.Holds))
	}
	handOff := "–"
	if s.HandOffMs > 0 {
		handOff = fmt.Sprintf("%.2f", s.HandOffMs)
	}
	fmt.Fprintf(tw, "%s\t%.0f\t%.1f\t%s\t%.2f\t%.2f\t%.2f\t%.1f%%\t%s\t\n", name,
		float64(s.Holds)/s.DurationS, s.OrdersPerHold, perHold(s.Writes), s.HoldMs, s.ClaimMs, s.WriteMs, 100*s.HeldShare, handOff)
}

// storeMark is the read back's verdict in a word: "safe", "UNSAFE", "not
// read" or "–" (none).
func storeMark(rb *Readback) string {
	switch {
	case rb == nil:
		return "–"
	case rb.Error != "":
		return "not read"
	case rb.Safe:
		return "safe"
	}
	return "UNSAFE"
}

// formatCPU is a window's per-order µs in cpuClasses' order, then the total
// and the cores it kept busy.
func formatCPU(win cpu.Window) string {
	by := map[string]float64{}
	for _, c := range win.Classes {
		by[c.Class] = c.PerOrderUs
	}
	var b strings.Builder
	for _, c := range cpuClasses {
		if v, ok := by[c]; ok {
			fmt.Fprintf(&b, "%.0f\t", v)
		} else {
			b.WriteString("–\t")
		}
	}
	fmt.Fprintf(&b, "%.0f\t%.2f\t", win.TotalPerOrderUs, win.CoresBusy)
	return b.String()
}

// formatStatus is "201:1234 503:5", by status.
func formatStatus(m map[string]int) string {
	return joinSorted(m, " ", func(k string, v int) string { return fmt.Sprintf("%s:%d", k, v) })
}

// printJudgedRatios is issue 13's table: the judge's rates against the
// limits of the same run, each target marked.
func printJudgedRatios(w io.Writer, res *Result) {
	fmt.Fprintf(w, "\n== ratios and targets, the judge (vegeta orders/s, coalescing on; p99 of the 201s; limits from this run)\n")
	marks := map[string]string{}
	for _, t := range res.Targets {
		marks[t.Backend+"/"+t.ID] = t.Want + " " + string(t.Status)
	}
	mark := func(backend, id string) string {
		if m, ok := marks[backend+"/"+id]; ok {
			return m
		}
		return "–"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "backend\t%d SKUs/s\tp99 ms\ttarget\toff/s\tnaive/s\t÷naive\ttarget\tspread ceiling/s\t÷ceiling\ttarget\t÷postgres\ttarget\thot/s\ttarget\toff/s\tfloor/s\t÷floor\ttarget\tCPU µs/order hot\tspread\t\n", res.Settings.SpreadSKUs)
	for _, r := range res.Backends {
		j := r.Judged
		fmt.Fprintf(tw, "%s\t%.0f\t%.1f\t%s\t%.0f\t%.0f\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%.0f\t%s\t%.0f\t%.0f\t%s\t%s\t%.0f\t%.0f\t\n", r.Backend,
			j.SpreadPerS, j.SpreadP99Ms, mark(r.Backend, "spread-p99"), j.SpreadOffPerS, j.NaiveSpreadPerS, fmtRatio(j.SpreadOverNaive), mark(r.Backend, "naive-spread"),
			j.SpreadCeilingPerS, fmtRatio(j.SpreadOverSpreadCeiling), mark(r.Backend, "spread-ceiling"), fmtRatio(j.SpreadOverPostgres), mark(r.Backend, "over-postgres"),
			j.HotPerS, mark(r.Backend, "hot-rate"), j.HotOffPerS, j.FloorPerS, fmtRatio(j.HotOverFloor), mark(r.Backend, "floor"),
			j.HotCPUUs["total"], j.SpreadCPUUs["total"])
	}
	_ = tw.Flush()
}
