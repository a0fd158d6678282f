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

	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/loadtest/compare"
	"github.com/stockguard/stockguard/loadtest/compare/seedtable"
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
		}, compare.SeedSection(sampleSeedTables(), seedtable.DefaultSettings())},
	}
	return r
}

// sampleSeedTables are seed-table columns for every backend, with made-up
// figures and the n/a cells the real ones carry.
func sampleSeedTables() []seedtable.Table {
	var out []seedtable.Table
	for i, b := range compare.AllBackends() {
		t := seedtable.Table{Backend: b,
			HotSKU:   seedtable.Throughput{SKUs: 1, Orders: 800, OrdersPerS: float64(900 + 100*i), P99Ms: float64(40 + i), Safe: !compare.ExpectedUnsafe(b)},
			ManySKUs: seedtable.Throughput{SKUs: 1000, Orders: 800, OrdersPerS: float64(300 + 10*i), P99Ms: float64(200 + i), Safe: !compare.ExpectedUnsafe(b)},
		}
		t.CAP, t.LockTypes = seedtable.FactsFor(b)
		ms := float64(1000 + 97*i)
		switch b {
		case "none":
			t.Release.NA, t.Fairness.NA, t.Availability.NA, t.Fencing.NA = "no lock: nothing to release", "no lock: nobody waits", "no lock servers", "no fencing token"
		case "local":
			t.Release.NA, t.Fairness.NA, t.Availability.NA, t.Fencing.NA = "in-process lock", "in-process lock", "no lock servers", "no fencing token"
		default:
			t.Release = seedtable.Release{Bound: "lease TTL 1s", Ms: &ms, Attempts: 3}
			t.Fairness = seedtable.Fairness{Lockers: 3, Goroutines: 4, Acquisitions: 600, Shares: []float64{0.3, 0.37, 0.33}, FIFOViolations: 10 * i, ViolationShare: float64(10*i) / 600}
			t.Availability = seedtable.Availability{Servers: 3, Minority: &seedtable.Window{Down: 1, Orders: 120, Reserved: 118, Share201: 118. / 120},
				Majority: &seedtable.Window{Down: 2, Orders: 12, Share201: 0}}
			t.Fencing = seedtable.Fencing{StaleWritesRefused: 4, OffDamaged: 50}
			if b == "postgres" {
				t.Availability = seedtable.Availability{NA: "one server, which is also the store"}
			}
		}
		out = append(out, t)
	}
	return out
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

// TestRedactHidesConnectionPasswords: a Postgres connection string may
// carry its password in the userinfo, as a query parameter or as a
// keyword; the recorded setup must hide each and keep everything else.
func TestRedactHidesConnectionPasswords(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"--database-url=postgres://postgres@127.0.0.1:5433/stockguard?sslmode=disable&password=s3cretpw",
			"--database-url=postgres://postgres@127.0.0.1:5433/stockguard?sslmode=disable&password=<redacted>"},
		{"--database-url=postgres://postgres:other@127.0.0.1:5433/stockguard?password=s3cretpw&sslpassword=s3cretpw#f",
			"--database-url=postgres://postgres:<redacted>@127.0.0.1:5433/stockguard?password=<redacted>&sslpassword=<redacted>#f"},
		{"--database-url=postgres://u:s3cretpw@h1:5432,h2:5432/db?target_session_attrs=read-write",
			"--database-url=postgres://u:<redacted>@h1:5432,h2:5432/db?target_session_attrs=read-write"},
		{"--database-url=host=127.0.0.1 port=5433 password=s3cretpw dbname=stockguard sslmode=disable",
			"--database-url=host=127.0.0.1 port=5433 password=<redacted> dbname=stockguard sslmode=disable"},
		{"--database-url=host=h  password = 's3cret \\' pw' sslpassword=s3cretpw user=u",
			"--database-url=host=h  password = <redacted> sslpassword=<redacted> user=u"},
		{"STOCKGUARD_ADMIN_TOKEN=s3cretpw", "STOCKGUARD_ADMIN_TOKEN=<redacted>"},
		{"PATH=/usr/bin:/bin", "PATH=/usr/bin:/bin"},
		{"--lock=redis", "--lock=redis"},
	} {
		if got := report.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

// TestRedactReadsKeywordValuesAsPgxDoes: pgx, like libpq, takes a
// backslash-escaped character (a space, say) into an unquoted value, and
// reads as keyword/value a string that holds "://" in another keyword's
// value. Whatever password pgx would read, the record must not keep any of
// it.
func TestRedactReadsKeywordValuesAsPgxDoes(t *testing.T) {
	for _, tc := range []struct{ dsn, secret, want string }{
		{`host=127.0.0.1 port=5433 user=u password=s3cret\ pw dbname=stockguard`, "s3cret",
			"host=127.0.0.1 port=5433 user=u password=<redacted> dbname=stockguard"},
		// After the escaped space the password looks like key=value.
		{`host=127.0.0.1 user=u password=s3cret\ tail=leaked dbname=stockguard`, "tail=leaked",
			"host=127.0.0.1 user=u password=<redacted> dbname=stockguard"},
		{`host=h password=s3cret\`, "s3cret", "host=h password=<redacted>"},
		{"host=127.0.0.1 user=u password=s3cret dbname=stockguard application_name=http://loadtest", "s3cret",
			"host=127.0.0.1 user=u password=<redacted> dbname=stockguard application_name=http://loadtest"},
	} {
		cfg, err := pgx.ParseConfig(tc.dsn)
		if err != nil {
			t.Fatalf("pgx refuses %q: %v", tc.dsn, err)
		}
		got := report.Redact("--database-url=" + tc.dsn)
		if strings.Contains(got, tc.secret) || got != "--database-url="+tc.want {
			t.Errorf("pgx's password is %q; Redact(%q)\n = %q\nwant %q", cfg.Password, tc.dsn, got, "--database-url="+tc.want)
		}
	}
}

// TestRedactHidesEveryPasswordOfAURLList: a comma-separated list of URLs,
// such as --etcd-endpoints (which serve accepts with userinfo), loses the
// password of each, not of the first alone; libpq's several hosts in one
// URL are not taken for a list.
func TestRedactHidesEveryPasswordOfAURLList(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"--etcd-endpoints=http://u:pw1@127.0.0.1:2379,http://u:pw2@127.0.0.1:2380",
			"--etcd-endpoints=http://u:<redacted>@127.0.0.1:2379,http://u:<redacted>@127.0.0.1:2380"},
		{"--etcd-endpoints=http://127.0.0.1:2379,https://u:pw2@127.0.0.1:2380,http://v@h",
			"--etcd-endpoints=http://127.0.0.1:2379,https://u:<redacted>@127.0.0.1:2380,http://v@h"},
		// Read as one URL, the token runs to the end: more is hidden than
		// a list needs, never less than one URL needs.
		{"--etcd-endpoints=http://h1/?token=t,http://u:pw@h2",
			"--etcd-endpoints=http://h1/?token=<redacted>"},
		{"--database-url=postgres://u:pw@h1:5432,h2:5432/db?password=pw2&application_name=a,b",
			"--database-url=postgres://u:<redacted>@h1:5432,h2:5432/db?password=<redacted>&application_name=a,b"},
		// A comma and a scheme inside a query value: the query's password
		// is still the URL's.
		{"--database-url=postgres://h/db?application_name=a,http://x&password=pw",
			"--database-url=postgres://h/db?application_name=a,http://x&password=<redacted>"},
	} {
		if got := report.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

// TestRedactKeepsTheRest: IPv6, percent-encoding, several hosts and values
// that are no secret come through byte for byte; only the secrets change,
// wherever a URL sits (a keyword's value, a word of free text).
func TestRedactKeepsTheRest(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"--database-url=postgres://u:p%40ss@[::1]:5432,[fe80::1%25eth0]:5433/db?sslmode=verify-full&sslrootcert=%2Fca.pem",
			"--database-url=postgres://u:<redacted>@[::1]:5432,[fe80::1%25eth0]:5433/db?sslmode=verify-full&sslrootcert=%2Fca.pem"},
		{"--database-url=postgres://u:p@ss@h/db?pass%77ord=x&application_name=a%20b",
			"--database-url=postgres://u:<redacted>@h/db?pass%77ord=<redacted>&application_name=a%20b"},
		{"--database-url=postgres://[::1]/db", "--database-url=postgres://[::1]/db"},
		{"--lock-ttl=5s", "--lock-ttl=5s"},
		{"LANG=C.UTF-8", "LANG=C.UTF-8"},
		{"--label=run key=3 b", "--label=run key=3 b"},
		{"--label=see  http://u:pw@h/x  too ", "--label=see  http://u:<redacted>@h/x  too "},
		{"--label=a://b c", "--label=a://b c"},
		{"--serve-flag=--redis-password=x", "--serve-flag=--redis-password=<redacted>"},
		{"--serve-flag=--database-url=postgres://u:pw@h/db", "--serve-flag=--database-url=postgres://u:<redacted>@h/db"},
		{"--database-url=host=h password= dbname=d", "--database-url=host=h password= <redacted>"},
		{`--database-url=host=h\ x  user='a b' password='p\' w'`, `--database-url=host=h\ x  user='a b' password=<redacted>`},
	} {
		if got := report.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

// TestReportRendersInChromium renders the report in headless Chromium and
// checks the screenshot shows the verdict colours. Set
// LOADTEST_SCREENSHOT_DIR to keep the PNG and HTML for a look.
func TestReportRendersInChromium(t *testing.T) {
	requireChromium(t)
	dir := t.TempDir()
	if keep := os.Getenv("LOADTEST_SCREENSHOT_DIR"); keep != "" {
		dir = keep
	}
	htmlPath, pngPath := filepath.Join(dir, "report.html"), filepath.Join(dir, "report.png")
	if err := report.WriteFile(htmlPath, sampleReport()); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(pngPath)
	out := runChromium(t, "--screenshot="+pngPath, "--window-size=1200,1600", "file://"+htmlPath)
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatalf("no screenshot: %v\nchromium printed:\n%s", err, out)
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

const chromium = "/usr/bin/chromium"

// requireChromium skips outside CI when Chromium is not installed.
func requireChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s missing: install it with `apt-get install -y chromium`", chromium)
		}
		t.Skipf("%s missing (apt-get install -y chromium); skipping outside CI", chromium)
	}
}

// runChromium runs headless Chromium with args, offline, and returns what
// it printed (the DOM with --dump-dom).
func runChromium(t *testing.T, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, chromium, append(base, args...)...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	return stdout.Bytes()
}

// TestSeedTableRendersInChromium renders a report holding only the seed
// table and checks, in the DOM Chromium built, that the section, every
// backend, the measured cells, the n/a reasons, the footnotes and the
// sources are there; and that its screenshot shows a table (dark text on
// many rows), not a blank page.
func TestSeedTableRendersInChromium(t *testing.T) {
	requireChromium(t)
	dir := t.TempDir()
	if keep := os.Getenv("LOADTEST_SCREENSHOT_DIR"); keep != "" {
		dir = keep
	}
	htmlPath, pngPath := filepath.Join(dir, "seed.html"), filepath.Join(dir, "seed.png")
	r := report.Report{Title: "seed table", Generated: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Sections: []report.Section{compare.SeedSection(sampleSeedTables(), seedtable.DefaultSettings())}}
	if err := report.WriteFile(htmlPath, r); err != nil {
		t.Fatal(err)
	}
	dom := string(runChromium(t, "--dump-dom", "file://"+htmlPath))
	if !strings.Contains(dom, `id="seed-table"`) {
		t.Fatalf("no seed-table section in the DOM:\n%s", dom)
	}
	cells := regexp.MustCompile(`<td>`).FindAllStringIndex(dom, -1)
	if want := 11 * (1 + len(compare.AllBackends())); len(cells) != want {
		t.Errorf("%d table cells, want %d (11 rows × the label and %d backends)", len(cells), want, len(compare.AllBackends()))
	}
	for _, want := range append(compare.AllBackends(),
		"The article&#39;s table, measured", "900/s, p99 40 ms", "n/a: no lock: nothing to release", "n/a: one server, which is also the store",
		"98% of 120 (1 of 3 down)", "4 refused, 0 damaged", "50 units", "30/37/33% of 600",
		"CP: Raft", "https://etcd.io/docs/v3.4/learning/api_guarantees/", "¹ Closed loop", "⁵ load chaos --scenario=pause-holder") {
		if !strings.Contains(dom, want) && !strings.Contains(dom, strings.ReplaceAll(want, "&#39;", "'")) {
			t.Errorf("DOM lacks %q", want)
		}
	}
	runChromium(t, "--screenshot="+pngPath, "--window-size=1200,1400", "file://"+htmlPath)
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1200 || b.Dy() != 1400 {
		t.Errorf("screenshot is %dx%d, want 1200x1400", b.Dx(), b.Dy())
	}
	// Text is dark on white: a rendered table of 11 rows × 8 columns of
	// sentences covers many thousands of dark pixels, a blank page none.
	if dark, rows := darkPixels(img); dark < 20000 || rows < 300 {
		t.Errorf("%d dark pixels on %d rows: the table did not render", dark, rows)
	}
}

// darkPixels counts pixels darker than mid-grey and the rows holding any.
func darkPixels(img image.Image) (dark, rows int) {
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		onRow := false
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if (r>>8)+(g>>8)+(bl>>8) < 3*110 {
				dark++
				onRow = true
			}
		}
		if onRow {
			rows++
		}
	}
	return dark, rows
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
