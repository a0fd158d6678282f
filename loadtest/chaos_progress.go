package loadtest

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// chaosProgress shows how far `load chaos` has got: on a terminal a bar over
// the runs whose description follows the current fault; elsewhere (a CI log)
// one line per run and per fault event, which is more use there than a bar.
// A nil *chaosProgress shows nothing.
type chaosProgress struct {
	w     io.Writer
	bar   *progressbar.ProgressBar
	total int

	mu   sync.Mutex
	name string
}

func newChaosProgress(_ context.Context, w io.Writer, mode ProgressMode, total int) *chaosProgress {
	if mode == ProgressOff || w == nil {
		return nil
	}
	p := &chaosProgress{w: w, total: total}
	if mode == ProgressOn || isTerminal(w) {
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetWidth(20),
			progressbar.OptionShowCount(),
			progressbar.OptionSetItsString("runs"),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetPredictTime(false),
		)
	}
	return p
}

func (p *chaosProgress) begin(i int, name string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.name = name
	if p.bar != nil {
		p.bar.Describe(name + ": starting")
		return
	}
	fmt.Fprintf(p.w, "== [%d/%d] %s\n", i+1, p.total, name)
}

func (p *chaosProgress) event(at time.Duration, kind, what string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		p.bar.Describe(fmt.Sprintf("%s: %s at +%.1fs", p.name, kind, at.Seconds()))
		return
	}
	fmt.Fprintf(p.w, "   +%6.2fs %-5s %s\n", at.Seconds(), kind, what)
}

func (p *chaosProgress) end(_ int, line string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Add(1)
		return
	}
	fmt.Fprintf(p.w, "== %s\n", line)
}

func (p *chaosProgress) stop() {
	if p == nil || p.bar == nil {
		return
	}
	_ = p.bar.Finish()
	fmt.Fprintln(p.w)
}
