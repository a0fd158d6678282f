package loadtest

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// chaosColumns are the figures of a run, in the terminal table and the report.
// The figures say what they count: "stale rejected" is the service's
// stockguard_stale_fence_total, "409 stale" and "503 lock" the answers the
// clients got (stale_fence, lock_unavailable).
var chaosColumns = []string{"scenario", "backend", "fencing", "orders", "reserved", "oversold", "lost",
	"stale rejected", "409 stale", "503 lock", "recovery ms", "verdict"}

// chaosCells renders a run's row of chaosColumns; the verdict is short, the
// figures are beside it.
func chaosCells(r ChaosRun) []string {
	rec := "–"
	if r.RecoveryMs != nil {
		rec = fmt.Sprintf("%.0f", *r.RecoveryMs)
	}
	return []string{r.Scenario, r.Backend, r.Fencing, fmt.Sprint(r.Orders.Sent), fmt.Sprint(r.Orders.Reserved),
		fmt.Sprint(r.Units.Oversold), fmt.Sprint(r.Units.Lost), fmt.Sprint(r.StaleWritesRejected),
		fmt.Sprint(r.Orders.StaleFence), fmt.Sprint(r.Orders.LockUnavailable), rec, shortVerdict(r)}
}

// shortVerdict is PASS or FAIL and why, in a few words.
func shortVerdict(r ChaosRun) string {
	damaged := r.Units.Oversold+r.Units.Lost > 0 || !r.Verification.Safe()
	switch {
	case !r.Pass:
		return "FAIL: " + strings.Join(r.Failures, "; ")
	case r.Expect == ExpectDamage:
		return "PASS: damage, as expected without the fence"
	case damaged:
		return "PASS: damage possible without the fence"
	case r.Expect == ExpectSafe:
		return "PASS: safe"
	}
	return "PASS: no damage"
}

// chaosStatus colours a run: safe, damage shown where it had to be, or a failure.
func chaosStatus(r ChaosRun) Status {
	switch {
	case r.Error != "" && r.Orders.Sent == 0:
		return StatusError
	case !r.Pass:
		return StatusUnsafe
	case r.Units.Oversold+r.Units.Lost > 0:
		return StatusExpectedUnsafe
	}
	return StatusSafe
}

// PrintChaosTable writes one row per run, then what failed.
func PrintChaosTable(w io.Writer, res *ChaosResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(chaosColumns, "\t"))
	for _, r := range res.Runs {
		fmt.Fprintln(tw, strings.Join(chaosCells(r), "\t"))
	}
	_ = tw.Flush()
	if res.Pass {
		fmt.Fprintf(w, "PASS: every fenced run kept 0 oversold, 0 lost; every race scenario without the fence showed the damage\n")
		return
	}
	fmt.Fprintln(w, "FAIL:")
	for _, f := range res.Failures {
		fmt.Fprintln(w, "  "+f)
	}
}

// ChaosMarkdownTable is the table of the runs in GitHub Markdown, for the README.
func ChaosMarkdownTable(res *ChaosResult) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(chaosColumns, " | ") + " |\n|")
	for range chaosColumns {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range res.Runs {
		b.WriteString("| " + strings.Join(chaosCells(r), " | ") + " |\n")
	}
	return b.String()
}

// ChaosReport builds the HTML report of a chaos result: the table of runs,
// then one section per run with its timeline.
func ChaosReport(res *ChaosResult) Report {
	r := Report{Title: "Stockguard: chaos scenarios", Generated: res.GeneratedAt}
	if res.Label != "" {
		r.Title += " — " + res.Label
	}
	passed := 0
	for _, run := range res.Runs {
		if run.Pass {
			passed++
		}
	}
	r.Summary = fmt.Sprintf("%d runs, %d as required. With fencing on, every scenario must end with 0 units oversold and 0 lost, "+
		"however the lock failed: the store refuses the stale writes (stale writes rejected). With fencing off, "+
		"pause-holder and redis-failover must show the damage the fence prevents.", len(res.Runs), passed)
	if !res.Pass {
		r.Summary += " FAILED: " + strings.Join(res.Failures, "; ") + "."
	}
	t := &Table{Columns: chaosColumns}
	for _, run := range res.Runs {
		t.Rows = append(t.Rows, TableRow{Cells: chaosCells(run), Status: chaosStatus(run)})
	}
	r.Sections = append(r.Sections, Section{
		ID: "chaos", Title: "Scenarios × fencing", Table: t,
		Intro: "Each run started its own lock servers and service instances (with --chaos), ran a steady order load on hot SKUs (one by default), " +
			"injected the fault and healed it, then verified every SKU from the client's ledger, the audit and the counters. " +
			"Stale writes rejected is stockguard_stale_fence_total summed over the instances; recovery is the time from the " +
			"fault's end to the first order reserved by an affected instance.",
	})
	for i, run := range res.Runs {
		r.Sections = append(r.Sections, chaosRunSection(i, run))
	}
	r.Workload = []Fact{
		{"instances per run", fmt.Sprint(res.Instances)},
		{"lock TTL", res.LockTTL + " (zookeeper: the 4s session timeout; redis-failover: at least 2s)"},
		{"seed", fmt.Sprint(res.Seed)},
	}
	return r
}

func chaosRunSection(i int, run ChaosRun) Section {
	s := Section{
		ID:    fmt.Sprintf("run-%d", i+1),
		Title: fmt.Sprintf("%s · %s · fencing %s", run.Scenario, run.Backend, run.Fencing),
	}
	if sc := scenarioByName(run.Scenario); sc != nil {
		s.Intro = sc.Summary + " "
	}
	s.Intro += "Verdict: " + run.Verdict + "; " + shortVerdict(run) + "."
	s.Charts = []Chart{ChaosTimelineChart("Timeline: answers per interval, faults and heals", run)}
	for n, ev := range run.Events {
		s.Notes = append(s.Notes, fmt.Sprintf("%d. +%.2fs %s: %s", n+1, ev.AtMs/1000, ev.Kind, ev.What))
	}
	if run.Error != "" {
		s.Notes = append(s.Notes, "Error: "+run.Error)
	}
	return s
}

// timelineKinds are the stacked series of a timeline, bottom to top.
var timelineKinds = []struct {
	name, color string
	count       func(ChaosBucket) int
}{
	{"201 reserved", "#2e7d32", func(b ChaosBucket) int { return b.Reserved }},
	{"409 stale_fence", "#ef6c00", func(b ChaosBucket) int { return b.StaleFence }},
	{"503 lock_unavailable", "#c62828", func(b ChaosBucket) int { return b.LockUnavailable }},
	{"409 insufficient", "#90a4ae", func(b ChaosBucket) int { return b.Insufficient }},
	{"other / no answer", "#616161", func(b ChaosBucket) int { return b.Other }},
}

// eventColor marks faults red, heals green and notes grey.
func eventColor(kind string) string {
	switch kind {
	case EventFault:
		return "#c62828"
	case EventHeal:
		return "#2e7d32"
	}
	return "#757575"
}

// ChaosTimelineChart draws a run's answers as stacked bars per interval,
// shades the spans a fault was in force, and marks each event with a
// numbered line (the numbers match the event list under the chart).
func ChaosTimelineChart(title string, run ChaosRun) Chart {
	const width, height, left, right, top, bottom = 760, 270, 50, 16, 50, 58
	plotW, plotH := float64(width-left-right), float64(height-top-bottom)
	totalMs := math.Max(run.DurationS*1000, 1)
	for _, ev := range run.Events {
		totalMs = math.Max(totalMs, ev.AtMs)
	}
	px := func(atMs float64) float64 { return float64(left) + plotW*math.Min(atMs, totalMs)/totalMs }
	maxN := 1
	for _, b := range run.Timeline {
		n := 0
		for _, k := range timelineKinds {
			n += k.count(b)
		}
		maxN = max(maxN, n)
	}
	py := func(n float64) float64 { return float64(top) + plotH*(1-n/float64(maxN)) }

	var s svg
	s.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`, width, height, width, height, esc(title))
	for _, w := range run.Fault.WindowsMs {
		s.f(`<rect x="%.1f" y="%d" width="%.1f" height="%.1f" fill="#fde0e0"><title>fault in force %.2fs–%.2fs</title></rect>`,
			px(w[0]), top, math.Max(px(w[1])-px(w[0]), 1), plotH, w[0]/1000, w[1]/1000)
	}
	barW := plotW * float64(max(run.BucketMs, 1)) / totalMs
	for _, b := range run.Timeline {
		x, base := px(float64(b.AtMs)), 0
		for _, k := range timelineKinds {
			n := k.count(b)
			if n == 0 {
				continue
			}
			y0, y1 := py(float64(base)), py(float64(base+n))
			s.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>+%.1fs: %d %s</title></rect>`,
				x, y1, math.Max(barW-0.5, 0.5), y0-y1, k.color, float64(b.AtMs)/1000, n, esc(k.name))
			base += n
		}
	}
	// Axes: answers per interval on y, seconds on x.
	s.f(`<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`, left, top, plotW, plotH)
	s.f(`<text x="%d" y="%.1f" text-anchor="end" font-size="11" fill="#555">%d</text>`, left-6, py(float64(maxN))+4, maxN)
	s.f(`<text x="%d" y="%.1f" text-anchor="end" font-size="11" fill="#555">0</text>`, left-6, py(0)+4)
	s.f(`<text x="12" y="%.1f" text-anchor="middle" font-size="11" fill="#333" transform="rotate(-90 12 %.1f)">answers / %d ms</text>`,
		float64(top)+plotH/2, float64(top)+plotH/2, run.BucketMs)
	step := niceStep(totalMs / 1000)
	for sec := 0.0; sec*1000 <= totalMs; sec += step {
		x := px(sec * 1000)
		s.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`, x, float64(top)+plotH, x, float64(top)+plotH+4)
		s.f(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="11" fill="#555">%gs</text>`, x, float64(top)+plotH+16, sec)
	}
	// Events: numbered lines, faults red, heals green, notes grey. Numbers
	// of events close together are stacked rather than drawn over each other.
	lastX, level := math.Inf(-1), 0
	for n, ev := range run.Events {
		x := px(ev.AtMs)
		if x-lastX < 14 {
			level = (level + 1) % 4
		} else {
			level = 0
		}
		lastX = x
		c := eventColor(ev.Kind)
		ty := top - 4 - 11*level
		s.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="4 3"><title>%s</title></line>`,
			x, ty+2, x, float64(top)+plotH, c, esc(fmt.Sprintf("+%.2fs %s: %s", ev.AtMs/1000, ev.Kind, ev.What)))
		s.f(`<text x="%.1f" y="%d" text-anchor="middle" font-size="10" font-weight="600" fill="%s">%d</text>`, x+6, ty, c, n+1)
	}
	// Legend.
	lx := float64(left)
	ly := height - 14
	for _, k := range timelineKinds {
		s.f(`<rect x="%.1f" y="%d" width="10" height="10" fill="%s"/>`, lx, ly-9, k.color)
		s.f(`<text x="%.1f" y="%d" font-size="11" fill="#222">%s</text>`, lx+14, ly, esc(k.name))
		lx += 14 + 6*float64(len(k.name)) + 10 // about 6 px a character at 11 px
	}
	s.f(`<rect x="%.1f" y="%d" width="10" height="10" fill="#fde0e0" stroke="#c62828" stroke-width="0.5"/>`, lx, ly-9)
	s.f(`<text x="%.1f" y="%d" font-size="11" fill="#222">fault in force</text>`, lx+14, ly)
	s.f(`</svg>`)
	return Chart{Title: title, SVG: template.HTML(s.b.String())}
}

// niceStep picks a tick spacing in seconds that gives at most about 12 ticks.
func niceStep(totalS float64) float64 {
	for _, st := range []float64{0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300} {
		if totalS/st <= 12 {
			return st
		}
	}
	return 600
}
