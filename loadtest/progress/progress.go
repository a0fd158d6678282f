package loadtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
)

// ProgressMode says when to draw a progress bar.
type ProgressMode string

// Progress modes: auto draws on a terminal at once, elsewhere only once the
// run has lasted progressAfter; on and off force it.
const (
	ProgressAuto ProgressMode = "auto"
	ProgressOn   ProgressMode = "on"
	ProgressOff  ProgressMode = "off"
)

// progressAfter is how long a run must last before auto mode draws a bar on
// something that is not a terminal (a CI log).
const progressAfter = 3 * time.Second

// Set parses the flag value.
func (m *ProgressMode) Set(s string) error {
	switch ProgressMode(s) {
	case ProgressAuto, ProgressOn, ProgressOff:
		*m = ProgressMode(s)
		return nil
	}
	return fmt.Errorf("progress %q: want auto, on or off", s)
}

func (m *ProgressMode) String() string { return string(*m) }

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// startProgress draws done/total on w until the returned stop is called.
// The bar is owned by one goroutine that polls the counter, so workers only
// pay for an atomic add.
func startProgress(ctx context.Context, w io.Writer, mode ProgressMode, total int64, desc string, done *atomic.Int64) (stop func()) {
	if mode == ProgressOff || total <= 0 || w == nil {
		return func() {}
	}
	tty := isTerminal(w)
	throttle := 100 * time.Millisecond
	if !tty {
		throttle = 2 * time.Second // a log, not a screen: few lines
	}
	// The bar starts with the run, so that its rate counts from there, but
	// draws through a gate that opens when the bar should show.
	g := &gate{w: w}
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(g),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("orders"),
		progressbar.OptionThrottle(throttle),
		progressbar.OptionSetPredictTime(true),
	)
	ctx, cancel := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		start := time.Now()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				if g.open.Load() {
					_ = bar.Set64(done.Load())
					_ = bar.Exit()
					fmt.Fprintln(w)
				}
				return
			case <-tick.C:
			}
			if mode == ProgressOn || tty || time.Since(start) >= progressAfter {
				g.open.Store(true)
			}
			_ = bar.Set64(done.Load())
		}
	}()
	return func() {
		cancel()
		<-finished
	}
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
