package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
)

// InterruptGuard is what `stockguard` does with a signal after the first,
// which cancelled the runs: while a run is still tearing down it holds one
// such signal, saying what a forced exit would leave and what removes it,
// and lets the next one through, so that a teardown that hangs can still
// be cut short from the keyboard. With no run in progress it holds none:
// a second Ctrl-C kills at once, as for every other command. The runs find
// it in their context (WithInterruptGuard); the zero value is ready.
type InterruptGuard struct {
	tearingDown atomic.Int32 // runs whose teardown has not finished
	held        atomic.Bool
}

type guardKey struct{}

// WithInterruptGuard returns ctx carrying g, for the chaos runs started
// with it to report their teardowns to.
func WithInterruptGuard(ctx context.Context, g *InterruptGuard) context.Context {
	return context.WithValue(ctx, guardKey{}, g)
}

// trackRun counts a run as tearing down, for the guard in ctx if there is
// one, until the function it returns is called, once its teardown is over:
// it still has processes, network namespaces (with their nftables tables)
// or scratch directories that only the teardown removes at once; should
// the process die first, the next run's sweep removes them.
func trackRun(ctx context.Context) func() {
	g, _ := ctx.Value(guardKey{}).(*InterruptGuard)
	if g == nil {
		return func() {}
	}
	g.tearingDown.Add(1)
	return func() { g.tearingDown.Add(-1) }
}

// Hold reports whether the signal is to be held, and writes why to w.
func (g *InterruptGuard) Hold(w io.Writer) bool {
	if g.tearingDown.Load() == 0 || g.held.Swap(true) {
		return false
	}
	fmt.Fprintf(w, "\nstockguard: the chaos run is still tearing down: stopping its processes, removing its network namespaces "+
		"(%s%d.*, with their nftables tables) and scratch directories. Interrupt again to exit now and leave them; "+
		"the next `stockguard load chaos` run (or `go test ./loadtest/chaos`) sweeps them.\n", netPrefix, os.Getpid())
	return true
}
