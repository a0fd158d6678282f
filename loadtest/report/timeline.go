package report

import (
	"html/template"
	"math"
)

// Timeline is what TimelineChart draws: answers counted per interval as
// stacked series, the windows in which a fault was in force, and events.
// Times are milliseconds from the start of the load.
type Timeline struct {
	DurationMs float64
	BucketMs   int
	// Series are the stacked kinds of answer, bottom to top.
	Series []TimelineSeries
	// Buckets hold one count per series each.
	Buckets   []TimelineBucket
	WindowsMs [][2]float64
	// WindowName names the shaded windows in their tooltips and the legend.
	WindowName string
	Events     []TimelineEvent
}

// TimelineSeries is one stacked kind of answer.
type TimelineSeries struct {
	Name, Color string
}

// TimelineBucket counts the answers of one interval, by series.
type TimelineBucket struct {
	AtMs   int
	Counts []int
}

// TimelineEvent is one numbered mark: Label is its tooltip.
type TimelineEvent struct {
	AtMs         float64
	Label, Color string
}

// TimelineChart draws answers as stacked bars per interval, shades the
// windows (the spans a fault was in force), and marks each event with a
// numbered line (the numbers match an event list under the chart).
func TimelineChart(title string, t Timeline) Chart {
	const width, height, left, right, top, bottom = 760, 270, 50, 16, 50, 58
	plotW, plotH := float64(width-left-right), float64(height-top-bottom)
	totalMs := math.Max(t.DurationMs, 1)
	for _, ev := range t.Events {
		totalMs = math.Max(totalMs, ev.AtMs)
	}
	px := func(atMs float64) float64 { return float64(left) + plotW*math.Min(atMs, totalMs)/totalMs }
	maxN := 1
	for _, b := range t.Buckets {
		n := 0
		for _, c := range b.Counts {
			n += c
		}
		maxN = max(maxN, n)
	}
	py := func(n float64) float64 { return float64(top) + plotH*(1-n/float64(maxN)) }

	var s svg
	s.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`, width, height, width, height, esc(title))
	for _, w := range t.WindowsMs {
		s.f(`<rect x="%.1f" y="%d" width="%.1f" height="%.1f" fill="#fde0e0"><title>%s %.2fs–%.2fs</title></rect>`,
			px(w[0]), top, math.Max(px(w[1])-px(w[0]), 1), plotH, esc(t.WindowName), w[0]/1000, w[1]/1000)
	}
	barW := plotW * float64(max(t.BucketMs, 1)) / totalMs
	for _, b := range t.Buckets {
		x, base := px(float64(b.AtMs)), 0
		for i, k := range t.Series {
			n := 0
			if i < len(b.Counts) {
				n = b.Counts[i]
			}
			if n == 0 {
				continue
			}
			y0, y1 := py(float64(base)), py(float64(base+n))
			s.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>+%.1fs: %d %s</title></rect>`,
				x, y1, math.Max(barW-0.5, 0.5), y0-y1, k.Color, float64(b.AtMs)/1000, n, esc(k.Name))
			base += n
		}
	}
	// Axes: answers per interval on y, seconds on x.
	s.f(`<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`, left, top, plotW, plotH)
	s.f(`<text x="%d" y="%.1f" text-anchor="end" font-size="11" fill="#555">%d</text>`, left-6, py(float64(maxN))+4, maxN)
	s.f(`<text x="%d" y="%.1f" text-anchor="end" font-size="11" fill="#555">0</text>`, left-6, py(0)+4)
	s.f(`<text x="12" y="%.1f" text-anchor="middle" font-size="11" fill="#333" transform="rotate(-90 12 %.1f)">answers / %d ms</text>`,
		float64(top)+plotH/2, float64(top)+plotH/2, t.BucketMs)
	step := niceStep(totalMs / 1000)
	for sec := 0.0; sec*1000 <= totalMs; sec += step {
		x := px(sec * 1000)
		s.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`, x, float64(top)+plotH, x, float64(top)+plotH+4)
		s.f(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="11" fill="#555">%gs</text>`, x, float64(top)+plotH+16, sec)
	}
	// Events: numbered lines, faults red, heals green, notes grey. Numbers
	// of events close together are stacked rather than drawn over each other.
	lastX, level := math.Inf(-1), 0
	for n, ev := range t.Events {
		x := px(ev.AtMs)
		if x-lastX < 14 {
			level = (level + 1) % 4
		} else {
			level = 0
		}
		lastX = x
		c := ev.Color
		ty := top - 4 - 11*level
		s.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="4 3"><title>%s</title></line>`,
			x, ty+2, x, float64(top)+plotH, c, esc(ev.Label))
		s.f(`<text x="%.1f" y="%d" text-anchor="middle" font-size="10" font-weight="600" fill="%s">%d</text>`, x+6, ty, c, n+1)
	}
	// Legend.
	lx := float64(left)
	ly := height - 14
	for _, k := range t.Series {
		s.f(`<rect x="%.1f" y="%d" width="10" height="10" fill="%s"/>`, lx, ly-9, k.Color)
		s.f(`<text x="%.1f" y="%d" font-size="11" fill="#222">%s</text>`, lx+14, ly, esc(k.Name))
		lx += 14 + 6*float64(len(k.Name)) + 10 // about 6 px a character at 11 px
	}
	s.f(`<rect x="%.1f" y="%d" width="10" height="10" fill="#fde0e0" stroke="#c62828" stroke-width="0.5"/>`, lx, ly-9)
	s.f(`<text x="%.1f" y="%d" font-size="11" fill="#222">%s</text>`, lx+14, ly, esc(t.WindowName))
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
