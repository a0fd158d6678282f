// Package progress is the one progress display of the load tester: a bar
// on stderr over the orders of a run or the runs of a suite, drawn by one
// goroutine that polls a counter, so that workers only pay for an atomic
// add. Where stderr is not a terminal (a CI log) it draws rarely and late,
// or, for a long suite, gives way to plain lines.
package progress

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Mode says when to draw a progress bar.
type Mode string

// Progress modes: auto draws on a terminal at once, elsewhere only once the
// run has lasted showAfter; on and off force it.
const (
	Auto Mode = "auto"
	On   Mode = "on"
	Off  Mode = "off"
)

// showAfter is how long a run must last before auto mode draws a bar on
// something that is not a terminal (a CI log).
const showAfter = 3 * time.Second

// Set parses the flag value.
func (m *Mode) Set(s string) error {
	switch Mode(s) {
	case Auto, On, Off:
		*m = Mode(s)
		return nil
	}
	return fmt.Errorf("progress %q: want auto, on or off", s)
}

func (m *Mode) String() string { return string(*m) }

// Options shape a bar.
type Options struct {
	// Desc is the text before the bar; Describe changes it.
	Desc string
	// Unit names what is counted ("orders", "runs").
	Unit string
	// Width is the bar's width in characters.
	Width int
	// Rate shows the rate and the time left: for a bar over orders, not
	// over a handful of runs of different lengths.
	Rate bool
	// Count is polled for the count; nil means the bar keeps its own, fed
	// by Add.
	Count *atomic.Int64
	// Lines: in auto mode off a terminal the bar never shows, and Printf
	// writes its lines instead. Without Lines the bar shows there once the
	// run has lasted showAfter.
	Lines bool
}

// Bar draws a count out of a total on a writer until Stop. A nil *Bar (mode
// off) draws nothing, and its methods do nothing.
type Bar struct {
	w        io.Writer
	gate     *gate
	bar      *progressbar.ProgressBar
	count    *atomic.Int64
	cancel   context.CancelFunc
	finished chan struct{}
}

// Start begins drawing; it returns nil for mode off, no total or no writer.
func Start(ctx context.Context, w io.Writer, mode Mode, total int64, o Options) *Bar {
	if mode == Off || total <= 0 || w == nil {
		return nil
	}
	tty := isTerminal(w)
	throttle := 100 * time.Millisecond
	if !tty {
		throttle = 2 * time.Second // a log, not a screen: few lines
	}
	count := o.Count
	if count == nil {
		count = new(atomic.Int64)
	}
	// The bar starts with the run, so that its rate counts from there, but
	// draws through a gate that opens when the bar should show.
	b := &Bar{w: w, gate: &gate{w: w}, count: count, finished: make(chan struct{})}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(b.gate),
		progressbar.OptionSetDescription(o.Desc),
		progressbar.OptionSetWidth(o.Width),
		progressbar.OptionShowCount(),
		progressbar.OptionSetItsString(o.Unit),
		progressbar.OptionThrottle(throttle),
		progressbar.OptionSetPredictTime(o.Rate),
	}
	if o.Rate {
		opts = append(opts, progressbar.OptionShowIts())
	}
	b.bar = progressbar.NewOptions64(total, opts...)
	show := func(elapsed time.Duration) bool {
		return mode == On || tty || (!o.Lines && elapsed >= showAfter)
	}
	if show(0) {
		b.gate.open.Store(true)
	}
	ctx, b.cancel = context.WithCancel(ctx)
	go func() {
		defer close(b.finished)
		start := time.Now()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if show(time.Since(start)) {
				b.gate.open.Store(true)
			}
			_ = b.bar.Set64(count.Load())
		}
	}()
	return b
}

// Add counts n more done; it is for bars without Options.Count.
func (b *Bar) Add(n int64) {
	if b != nil {
		b.count.Add(n)
	}
}

// Describe replaces the text before the bar.
func (b *Bar) Describe(desc string) {
	if b != nil {
		b.bar.Describe(desc)
	}
}

// Printf writes a line of progress while no bar is shown: what a log gets
// instead of a bar.
func (b *Bar) Printf(format string, args ...any) {
	if b != nil && !b.gate.open.Load() {
		fmt.Fprintf(b.w, format, args...)
	}
}

// Stop draws the final count, ends the bar's line and returns once the
// drawing goroutine has exited.
func (b *Bar) Stop() {
	if b == nil {
		return
	}
	b.cancel()
	<-b.finished
	if b.gate.open.Load() {
		_ = b.bar.Set64(b.count.Load())
		_ = b.bar.Exit()
		fmt.Fprintln(b.w)
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// gate passes writes through to w once open, and drops them before.
type gate struct {
	w    io.Writer
	open atomic.Bool
}

func (g *gate) Write(p []byte) (int, error) {
	if !g.open.Load() {
		return len(p), nil
	}
	return g.w.Write(p)
}
