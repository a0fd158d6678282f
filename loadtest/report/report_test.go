package report_test

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/compare"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/run"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// sampleReport is a comparison of all six backends with made-up but
// plausible numbers, plus a chaos-style section, as a report would hold.
func sampleReport() report.Report {
	mk := func(backend string, tput, p50 float64, oversold, lost int64, stale, lockFail int, err error) report.RunSummary {
		r := tally.NewLatency()
		for i := 1; i <= 5000; i++ {
			r.Record(time.Duration(p50*float64(time.Millisecond)) * time.Duration(i) / 2500)
		}
		r.Record(time.Duration(p50*40) * time.Millisecond)
		res := &run.Result{ThroughputPerS: tput, LatencyMs: r.Summary(), LatencyCurve: r.Curve()}
		res.Units = tally.UnitCounts{Stock: 4000, Reserved: 4000 + oversold, Oversold: oversold, Lost: lost}
		res.Orders = tally.OrderCounts{Sent: 2000, StaleFence: stale, LockUnavailable: lockFail}
		res.Verification = run.Verification{Oversold: oversold, Lost: lost}
		if oversold+lost > 0 {
			res.Verification.DisagreementCount = 3
		}
		res.Safe = res.Verification.Safe()
		res.Verdict = run.VerdictText(res.Verification)
		fencing := compare.FencingFor(backend)
		return compare.SummarizeRun(backend, fencing, 3, compare.ExpectedUnsafe(backend), res, err)
	}
	r := report.Report{
		Title:     "Stockguard: lock backends compared",
		Generated: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Summary:   "The same seeded workload ran against 3 instances per backend.",
		Workload:  []report.Fact{{Label: "load", Value: "closed loop, 32 clients, 2000 orders"}, {Label: "seed", Value: "42"}},
		Runs: []report.RunSummary{
			mk("none", 2900, 1.2, 37, 12, 0, 0, nil),
			mk("local", 2500, 1.4, 21, 9, 0, 0, nil),
			mk("postgres", 1500, 4.1, 0, 0, 0, 0, nil),
			mk("redis", 1700, 3.2, 0, 0, 2, 0, nil),
			mk("redlock", 900, 9.5, 0, 0, 1, 4, nil),
			mk("zookeeper", 0, 0, 0, 0, 0, 0, errString("instances did not start: <zk> & friends")),
		},
		Sections: []report.Section{{
			ID: "chaos", Title: "Chaos: pause-holder",
			Intro: "A lock holder is paused past its TTL; the fence rejects its late write.",
			Table: &report.Table{Columns: []string{"scenario", "fencing", "oversold", "stale writes rejected", "verdict"}, Rows: []report.TableRow{
				{Cells: []string{"pause-holder", "on", "0", "14", "safe: 0 oversold, 0 lost"}, Status: report.StatusSafe},
				{Cells: []string{"pause-holder", "off", "6", "0", "UNSAFE: 6 units oversold, 6 lost"}, Status: report.StatusUnsafe},
			}},
			Charts: []report.Chart{report.BarChart("Stale writes rejected", "writes", []report.Bar{{Label: "fencing on", Value: 14, Status: report.StatusSafe}, {Label: "fencing off", Value: 0, Status: report.StatusUnsafe}})},
			Notes:  []string{"Paused with SIGSTOP for 2 × TTL."},
		}},
	}
	return r
}

type errString string

func (e errString) Error() string { return string(e) }

func TestReportIsSelfContained(t *testing.T) {
	var buf bytes.Buffer
	if err := report.Write(&buf, sampleReport()); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	for _, want := range []string{
		"<svg", "Latency by percentile", "Throughput", "Damage",
		"UNSAFE: 37 units oversold, 12 lost", "safe: 0 oversold, 0 lost",
		"Expected: none does not coordinate 3 instances.", "Chaos: pause-holder", "Stale writes rejected",
		"&lt;zk&gt; &amp; friends", // error text is escaped
	} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Nothing may be fetched: no src, no links out, no CSS imports or urls.
	// The SVG namespace URI is an identifier, not a fetch.
	external := regexp.MustCompile(`(?i)(\bsrc\s*=|href\s*=\s*"(https?:)?//|@import|url\(|<link\b|<script\b)`)
	if m := external.FindString(html); m != "" {
		t.Errorf("report references something external: %q", m)
	}
	if strings.Contains(html, "<zk>") {
		t.Error("error text was not escaped")
	}
}

// TestReportRendersInChromium renders the report in headless Chromium and
// checks the screenshot shows the verdict colours. Set
// LOADTEST_SCREENSHOT_DIR to keep the PNG and HTML for a look.
func TestReportRendersInChromium(t *testing.T) {
	const chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s missing: install it with `apt-get install -y chromium`", chromium)
		}
		t.Skipf("%s missing (apt-get install -y chromium); skipping outside CI", chromium)
	}
	dir := t.TempDir()
	if keep := os.Getenv("LOADTEST_SCREENSHOT_DIR"); keep != "" {
		dir = keep
	}
	htmlPath, pngPath := filepath.Join(dir, "report.html"), filepath.Join(dir, "report.png")
	if err := report.WriteFile(htmlPath, sampleReport()); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(pngPath)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--screenshot="+pngPath, "--window-size=1200,1600", "file://"+htmlPath)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatalf("no screenshot: %v\nchromium said:\n%s", err, out)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1200 || b.Dy() != 1600 {
		t.Errorf("screenshot is %dx%d, want 1200x1600", b.Dx(), b.Dy())
	}
	colors, green, orange := pixelStats(img)
	if colors < 50 {
		t.Errorf("screenshot has %d distinct colours: blank or broken page", colors)
	}
	// Bars and card borders are drawn in the status colours.
	if green < 500 || orange < 500 {
		t.Errorf("safe-green pixels %d, expected-unsafe-orange pixels %d: charts or cards did not render", green, orange)
	}
}

// pixelStats counts distinct colours and pixels of the safe green (#2e7d32)
// and the expected-unsafe orange (#ef6c00).
func pixelStats(img image.Image) (colors, green, orange int) {
	seen := map[uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			r, g, bl = r>>8, g>>8, bl>>8
			seen[r<<16|g<<8|bl] = true
			switch {
			case r == 0x2e && g == 0x7d && bl == 0x32:
				green++
			case r == 0xef && g == 0x6c && bl == 0x00:
				orange++
			}
		}
	}
	return len(seen), green, orange
}
