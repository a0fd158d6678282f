// Package report renders what the load tester found: the self-contained
// HTML report (inline CSS and SVG, nothing fetched), its charts and
// tables, and the JSON result files. It computes nothing and drives
// nothing; compare and chaos fill its data model.
package report

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/stockguard/stockguard/loadtest/tally"
)

//go:embed report.html.tmpl
var reportTemplate string

// Status colours a verdict, a table row or a bar in the report.
type Status string

// Statuses used in the report.
const (
	StatusSafe           Status = "safe"            // verified: nothing oversold or lost
	StatusUnsafe         Status = "unsafe"          // damage where none was expected
	StatusExpectedUnsafe Status = "expected-unsafe" // damage from a backend that cannot prevent it
	StatusError          Status = "error"           // the run could not be carried out
	StatusNeutral        Status = "neutral"         // plain data
)

// Report is the data behind the self-contained HTML report. compare fills
// Runs (one per backend); other scenarios, such as chaos, append Sections
// built from the same parts (Table, Chart).
type Report struct {
	Title     string
	Generated time.Time
	// Summary is one plain-language paragraph at the top.
	Summary  string
	Workload []Fact
	Runs     []RunSummary
	Sections []Section
}

// Fact is one labelled value, such as a workload parameter.
type Fact struct {
	Label, Value string
}

// RunSummary is one backend's run as the report shows it.
type RunSummary struct {
	Backend        string
	Fencing        string
	Instances      int
	ExpectedUnsafe bool
	ThroughputPerS float64
	Latency        tally.LatencySummary
	Curve          []tally.PercentilePoint
	Orders         tally.OrderCounts
	Units          tally.UnitCounts
	Disagreements  int
	// Incomplete says why the run sent fewer orders than generated, if it did.
	Incomplete string
	Verdict    Verdict
}

// Verdict is the plain-language outcome of a run or scenario.
type Verdict struct {
	Status Status
	Text   string // "safe: 0 oversold, 0 lost", "UNSAFE: 37 units oversold, 12 lost"
	Note   string // why, in one sentence
}

// Section is a titled part of the report with an optional table and charts.
type Section struct {
	ID     string // HTML anchor
	Title  string
	Intro  string
	Table  *Table
	Charts []Chart
	Notes  []string
}

// Table is a plain table; each row may carry a status that colours it.
type Table struct {
	Columns []string
	Rows    []TableRow
}

// TableRow is one row of a Table.
type TableRow struct {
	Cells  []string
	Status Status
}

// Chart is an inline SVG chart, built by BarChart, PercentileChart or
// TimelineChart.
type Chart struct {
	Title string
	SVG   template.HTML
}

// WriteFile renders r to path, creating its directory.
func WriteFile(path string, r Report) error {
	var buf bytes.Buffer
	if err := Write(&buf, r); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// Write renders r as one HTML document with inline CSS and SVG; it
// references nothing outside itself.
func Write(w io.Writer, r Report) error {
	t, err := template.New("report").Funcs(template.FuncMap{
		"ms":  func(x float64) string { return fmt.Sprintf("%.2f", x) },
		"num": func(x float64) string { return fmt.Sprintf("%.0f", x) },
	}).Parse(reportTemplate)
	if err != nil {
		return fmt.Errorf("report template: %w", err)
	}
	view := struct {
		Report
		Charts []Chart
		Table  Table
	}{Report: r, Charts: runCharts(r.Runs), Table: runTable(r.Runs)}
	if err := t.Execute(w, view); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// runTable is the side-by-side table of the runs.
func runTable(runs []RunSummary) Table {
	t := Table{Columns: []string{"backend", "fencing", "instances", "orders/s", "p50 ms", "p99 ms", "reserved", "oversold", "lost", "stale fences", "lock failures", "errors", "verdict"}}
	for _, r := range runs {
		if r.Verdict.Status == StatusError {
			t.Rows = append(t.Rows, TableRow{Status: StatusError, Cells: []string{r.Backend, r.Fencing, fmt.Sprint(r.Instances), "–", "–", "–", "–", "–", "–", "–", "–", "–", r.Verdict.Text}})
			continue
		}
		t.Rows = append(t.Rows, TableRow{Status: r.Verdict.Status, Cells: []string{
			r.Backend, r.Fencing, fmt.Sprint(r.Instances),
			fmt.Sprintf("%.0f", r.ThroughputPerS), fmt.Sprintf("%.2f", r.Latency.P50), fmt.Sprintf("%.2f", r.Latency.P99),
			fmt.Sprint(r.Units.Reserved), fmt.Sprint(r.Units.Oversold), fmt.Sprint(r.Units.Lost),
			fmt.Sprint(r.Orders.StaleFence), fmt.Sprint(r.Orders.LockUnavailable), fmt.Sprint(r.Orders.Errors),
			r.Verdict.Text,
		}})
	}
	return t
}

// runCharts draws the latency distribution, throughput and damage charts.
func runCharts(runs []RunSummary) []Chart {
	var series []Series
	var tput, damage []Bar
	for _, r := range runs {
		if r.Verdict.Status == StatusError {
			continue
		}
		series = append(series, Series{Name: r.Backend, Points: r.Curve})
		tput = append(tput, Bar{Label: r.Backend, Value: r.ThroughputPerS, Status: StatusNeutral})
		damage = append(damage, Bar{Label: r.Backend, Value: float64(r.Units.Oversold + r.Units.Lost), Status: r.Verdict.Status})
	}
	if len(series) == 0 {
		return nil
	}
	return []Chart{
		PercentileChart("Latency by percentile (log scale)", series),
		BarChart("Throughput", "orders/s", tput),
		BarChart("Damage: units oversold + lost", "units", damage),
	}
}
