package report

import (
	"strings"
	"testing"

	"github.com/stockguard/stockguard/loadtest/tally"
)

func TestPercentileChartHandlesEmptyAndFlat(t *testing.T) {
	for _, s := range [][]Series{nil, {{Name: "x"}}, {{Name: "flat", Points: []tally.PercentilePoint{{Percentile: 0, Ms: 1}, {Percentile: 50, Ms: 1}, {Percentile: 100, Ms: 1}}}}} {
		c := PercentileChart("t", s)
		if !strings.HasPrefix(string(c.SVG), "<svg") || strings.Contains(string(c.SVG), "NaN") || strings.Contains(string(c.SVG), "Inf") {
			t.Errorf("series %v: bad svg %.200s", s, c.SVG)
		}
	}
	b := BarChart("t", "u", []Bar{{"zero", 0, StatusSafe}})
	if strings.Contains(string(b.SVG), "NaN") {
		t.Errorf("all-zero bar chart: %s", b.SVG)
	}
}

func TestNinesLabel(t *testing.T) {
	for n, want := range map[float64]string{0: "0%", 1: "90%", 2: "99%", 3: "99.9%", 4: "99.99%"} {
		if got := ninesLabel(n); got != want {
			t.Errorf("ninesLabel(%v) = %q, want %q", n, got, want)
		}
	}
}
