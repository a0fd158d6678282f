package report

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"

	"github.com/stockguard/stockguard/loadtest/tally"
)

// palette colours the series of a percentile chart, in order.
var palette = [...]string{"#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f", "#5d4037", "#ad1457"}

// statusColor is the fill of a bar with the given status.
func statusColor(s Status) string {
	switch s {
	case StatusSafe:
		return "#2e7d32"
	case StatusUnsafe:
		return "#c62828"
	case StatusExpectedUnsafe:
		return "#ef6c00"
	case StatusError:
		return "#9e9e9e"
	}
	return "#1565c0"
}

// Bar is one bar of a BarChart.
type Bar struct {
	Label  string
	Value  float64
	Status Status
}

// Series is one line of a PercentileChart.
type Series struct {
	Name   string
	Points []tally.PercentilePoint
}

// svg accumulates an SVG document; every text passes through esc.
type svg struct{ b strings.Builder }

func (s *svg) f(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

func esc(s string) string { return html.EscapeString(s) }

// BarChart draws horizontal bars, one row per bar, with the value printed
// at the end of each bar.
func BarChart(title, unit string, bars []Bar) Chart {
	const width, left, right, top, row = 760, 130, 110, 16, 30
	height := top + row*max(len(bars), 1) + 30
	maxV := 0.0
	for _, b := range bars {
		maxV = math.Max(maxV, b.Value)
	}
	plotW := float64(width - left - right)
	var s svg
	s.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`, width, height, width, height, esc(title))
	s.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, left, top-4, left, top+row*len(bars)+4)
	for i, b := range bars {
		y := top + i*row
		w := 0.0
		if maxV > 0 {
			w = plotW * b.Value / maxV
		}
		if b.Value > 0 {
			w = math.Max(w, 2) // a non-zero value stays visible
		}
		s.f(`<text x="%d" y="%d" text-anchor="end" font-size="13" fill="#222">%s</text>`, left-8, y+row/2+4, esc(b.Label))
		s.f(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s" rx="2"><title>%s: %s %s</title></rect>`,
			left, y+5, w, row-10, statusColor(b.Status), esc(b.Label), esc(formatValue(b.Value)), esc(unit))
		s.f(`<text x="%.1f" y="%d" font-size="12" fill="#222">%s %s</text>`, float64(left)+w+6, y+row/2+4, esc(formatValue(b.Value)), esc(unit))
	}
	s.f(`</svg>`)
	return Chart{Title: title, SVG: template.HTML(s.b.String())}
}

// PercentileChart draws latency against percentile on the usual HDR axes:
// x is the number of nines (0, 90%, 99%, 99.9%, …) so the tail gets room,
// y is logarithmic so backends that differ a hundredfold share one chart.
// The last point of each series (the maximum) is drawn at the right edge.
func PercentileChart(title string, series []Series) Chart {
	const width, height, left, right, top, bottom = 760, 380, 64, 130, 20, 50
	plotW, plotH := float64(width-left-right), float64(height-top-bottom)

	nines := func(p float64) float64 { return -math.Log10(math.Max(1-p/100, 1e-9)) }
	maxX, minY, maxY := 2.0, math.Inf(1), math.Inf(-1)
	for _, sr := range series {
		for _, pt := range sr.Points {
			if pt.Percentile < 100 {
				maxX = math.Max(maxX, math.Ceil(nines(pt.Percentile)))
			}
			v := math.Max(pt.Ms, 0.001)
			minY, maxY = math.Min(minY, v), math.Max(maxY, v)
		}
	}
	if math.IsInf(minY, 1) {
		minY, maxY = 0.1, 100
	}
	lo, hi := math.Floor(math.Log10(minY)), math.Ceil(math.Log10(maxY))
	if hi <= lo {
		hi = lo + 1
	}
	xEdge := maxX + 0.5 // where the maxima go
	px := func(p float64) float64 {
		n := xEdge
		if p < 100 {
			n = nines(p)
		}
		return float64(left) + plotW*n/xEdge
	}
	py := func(ms float64) float64 {
		return float64(top) + plotH*(1-(math.Log10(math.Max(ms, 0.001))-lo)/(hi-lo))
	}

	var s svg
	s.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`, width, height, width, height, esc(title))
	// Grid and axes.
	for d := lo; d <= hi; d++ {
		y := py(math.Pow(10, d))
		s.f(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e0e0e0"/>`, left, y, float64(left)+plotW, y)
		s.f(`<text x="%d" y="%.1f" text-anchor="end" font-size="11" fill="#555">%s</text>`, left-6, y+4, esc(formatMs(math.Pow(10, d))))
	}
	for n := 0.0; n <= maxX; n++ {
		x := float64(left) + plotW*n/xEdge
		s.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#e0e0e0"/>`, x, top, x, float64(top)+plotH)
		s.f(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="11" fill="#555">%s</text>`, x, float64(top)+plotH+16, esc(ninesLabel(n)))
	}
	s.f(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="11" fill="#555">max</text>`, float64(left)+plotW, float64(top)+plotH+16)
	s.f(`<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`, left, top, plotW, plotH)
	s.f(`<text x="%.1f" y="%d" text-anchor="middle" font-size="12" fill="#333">percentile</text>`, float64(left)+plotW/2, height-8)
	s.f(`<text x="14" y="%.1f" text-anchor="middle" font-size="12" fill="#333" transform="rotate(-90 14 %.1f)">latency (ms)</text>`, float64(top)+plotH/2, float64(top)+plotH/2)
	// Series and legend.
	for i, sr := range series {
		color := palette[i%len(palette)]
		pts := make([]string, 0, len(sr.Points))
		for _, pt := range sr.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(pt.Percentile), py(pt.Ms)))
		}
		if len(pts) > 0 {
			s.f(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"><title>%s</title></polyline>`, strings.Join(pts, " "), color, esc(sr.Name))
		}
		ly := top + 10 + i*20
		lx := left + int(plotW) + 14
		s.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`, lx, ly, lx+20, ly, color)
		s.f(`<text x="%d" y="%d" font-size="12" fill="#222">%s</text>`, lx+26, ly+4, esc(sr.Name))
	}
	s.f(`</svg>`)
	return Chart{Title: title, SVG: template.HTML(s.b.String())}
}

// ninesLabel names a position on the nines axis: 0 → "0%", 2 → "99%".
func ninesLabel(n float64) string {
	if n == 0 {
		return "0%"
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.6f", 100*(1-math.Pow(10, -n))), "0"), ".") + "%"
}

func formatMs(ms float64) string {
	switch {
	case ms >= 1000:
		return fmt.Sprintf("%gs", ms/1000)
	case ms >= 1:
		return fmt.Sprintf("%g", ms)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", ms), "0"), ".")
}

func formatValue(v float64) string {
	if v == math.Trunc(v) || v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
