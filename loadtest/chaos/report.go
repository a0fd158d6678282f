package chaos

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/stockguard/stockguard/loadtest/report"
)

// chaosColumns are the figures of a run, in the terminal table and the report.
// The figures say what they count: "stale rejected" is the service's
// stockguard_stale_fence_total, "409 stale" and "503 lock" the answers the
// clients got (stale_fence, lock_unavailable).
var chaosColumns = []string{"scenario", "backend", "fencing", "orders", "reserved", "oversold", "lost",
	"stale rejected", "409 stale", "503 lock", "recovery ms", "verdict"}

// chaosCells renders a run's row of chaosColumns; the verdict is short, the
// figures are beside it.
func chaosCells(r Run) []string {
	rec := "–"
	if r.RecoveryMs != nil {
		rec = fmt.Sprintf("%.0f", *r.RecoveryMs)
	}
	return []string{r.Scenario, r.Backend, r.Fencing, fmt.Sprint(r.Orders.Sent), fmt.Sprint(r.Orders.Reserved),
		fmt.Sprint(r.Units.Oversold), fmt.Sprint(r.Units.Lost), fmt.Sprint(r.StaleWritesRejected),
		fmt.Sprint(r.Orders.StaleFence), fmt.Sprint(r.Orders.LockUnavailable), rec, shortVerdict(r)}
}

// shortVerdict is PASS or FAIL and why, in a few words; a failure says
// whether it is UNSAFE (damage where none was allowed), an error (the run
// did not complete) or neither (no damage: the run did not show what it
// had to), as Run.Status does.
func shortVerdict(r Run) string {
	damaged := r.Units.Oversold+r.Units.Lost > 0 || !r.Verification.Safe() || r.History.violated()
	switch {
	case !r.Pass:
		why := strings.Join(r.Failures, "; ")
		switch runStatus(&r) {
		case StatusUnsafe:
			return "FAIL, UNSAFE: " + why
		case StatusError:
			return "FAIL, error: " + why
		case StatusFailed:
			if damaged { // allowed: fencing off
				return "FAIL: " + why
			}
		}
		return "FAIL, no damage: " + why
	case r.Expect == ExpectDamage:
		return "PASS: damage, as expected without the fence"
	case damaged:
		return "PASS: damage possible without the fence"
	case r.Expect == ExpectSafe:
		return "PASS: safe"
	}
	return "PASS: no damage"
}

// chaosStatus colours a run by its Status: safe, damage where it was
// allowed, unsafe only for damage where none was; a run that failed
// without damage (it did not show its fault, or did not complete) is
// grey, not red.
func chaosStatus(r Run) report.Status {
	switch runStatus(&r) {
	case StatusUnsafe:
		return report.StatusUnsafe
	case StatusFailed, StatusError:
		return report.StatusError
	case StatusExpectedUnsafe:
		return report.StatusExpectedUnsafe
	}
	return report.StatusSafe
}

// PrintTable writes one row per run, then what failed.
func PrintTable(w io.Writer, res *Result) {
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

// MarkdownTable is the table of the runs in GitHub Markdown, for the README.
func MarkdownTable(res *Result) string {
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

// Report builds the HTML report of a chaos result: the table of runs,
// then one section per run with its timeline.
func Report(res *Result) report.Report {
	r := report.Report{Title: "Stockguard: chaos scenarios", Generated: res.GeneratedAt}
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
		"pause-holder, redis-failover, redis-clock-jump and nemesis must show the damage the fence prevents (nemesis: as a violation the history checker reports).", len(res.Runs), passed)
	if !res.Pass {
		r.Summary += " FAILED: " + strings.Join(res.Failures, "; ") + "."
	}
	t := &report.Table{Columns: chaosColumns}
	for _, run := range res.Runs {
		t.Rows = append(t.Rows, report.TableRow{Cells: chaosCells(run), Status: chaosStatus(run)})
	}
	r.Sections = append(r.Sections, report.Section{
		ID: "chaos", Title: "Scenarios × fencing", Table: t,
		Intro: "Each run started its own lock servers and service instances (with --chaos), ran a steady order load on hot SKUs (one by default), " +
			"injected the fault and healed it, then verified every SKU from the client's ledger, the audit and the counters. " +
			"Stale writes rejected is stockguard_stale_fence_total summed over the instances; recovery is the time from the " +
			"fault's end to the first order reserved by an affected instance.",
	})
	for i, run := range res.Runs {
		r.Sections = append(r.Sections, chaosRunSection(i, run))
	}
	r.Workload = []report.Fact{
		{Label: "instances per run", Value: fmt.Sprint(res.Instances)},
		{Label: "lock TTL", Value: res.LockTTL + " (zookeeper: the 4s session timeout; redis-failover: at least 2s)"},
		{Label: "seed", Value: fmt.Sprint(res.Seed)},
	}
	return r
}

func chaosRunSection(i int, run Run) report.Section {
	s := report.Section{
		ID:    fmt.Sprintf("run-%d", i+1),
		Title: fmt.Sprintf("%s · %s · fencing %s", run.Scenario, run.Backend, run.Fencing),
	}
	if sc := scenarioByName(run.Scenario); sc != nil {
		s.Intro = sc.Summary + " "
	}
	s.Intro += "Verdict: " + run.Verdict + "; " + shortVerdict(run) + "."
	s.Charts = []report.Chart{timelineChart("Timeline: answers per interval, faults and heals", run)}
	for n, ev := range run.Events {
		s.Notes = append(s.Notes, fmt.Sprintf("%d. +%.2fs %s: %s", n+1, ev.AtMs/1000, ev.Kind, ev.What))
	}
	s.Notes = append(s.Notes, run.History.notes()...)
	if run.Error != "" {
		s.Notes = append(s.Notes, "Error: "+run.Error)
	}
	return s
}

// timelineKinds are the stacked series of a timeline, bottom to top.
var timelineKinds = []struct {
	name, color string
	count       func(Bucket) int
}{
	{"201 reserved", "#2e7d32", func(b Bucket) int { return b.Reserved }},
	{"409 stale_fence", "#ef6c00", func(b Bucket) int { return b.StaleFence }},
	{"503 lock_unavailable", "#c62828", func(b Bucket) int { return b.LockUnavailable }},
	{"409 insufficient", "#90a4ae", func(b Bucket) int { return b.Insufficient }},
	{"other / no answer", "#616161", func(b Bucket) int { return b.Other }},
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

// timelineChart draws a run's answers per interval, the spans its fault
// was in force and its numbered events.
func timelineChart(title string, r Run) report.Chart {
	t := report.Timeline{DurationMs: r.DurationS * 1000, BucketMs: r.BucketMs, WindowsMs: r.Fault.WindowsMs, WindowName: "fault in force"}
	for _, k := range timelineKinds {
		t.Series = append(t.Series, report.TimelineSeries{Name: k.name, Color: k.color})
	}
	for _, b := range r.Timeline {
		tb := report.TimelineBucket{AtMs: b.AtMs}
		for _, k := range timelineKinds {
			tb.Counts = append(tb.Counts, k.count(b))
		}
		t.Buckets = append(t.Buckets, tb)
	}
	for _, ev := range r.Events {
		t.Events = append(t.Events, report.TimelineEvent{AtMs: ev.AtMs, Color: eventColor(ev.Kind),
			Label: fmt.Sprintf("+%.2fs %s: %s", ev.AtMs/1000, ev.Kind, ev.What)})
	}
	return report.TimelineChart(title, t)
}
