// Package gctune sets the garbage collector of a serving process.
//
// An instance allocates ≈ 19 KB per order (HTTP, JSON, the lock calls'
// commands, pgx's binds) over a live heap of a few MB, so with Go's default
// GOGC=100 it collects four times a second under load (redlock, 1,000
// SKUs: 36 collections in 9 s, ≈ 9 % of its CPU an order; 7 at 400). A higher GOGC
// collects a quarter as often; the soft memory limit keeps the heap — and
// the instance's RSS — bounded however the live heap grows, by collecting
// more often only when it nears the limit (the pairing the Go GC guide
// recommends for a service with a memory budget).
package gctune

import (
	"runtime/debug"
)

const (
	// Percent is GOGC unless the environment sets it.
	Percent = 400
	// MemoryLimit is GOMEMLIMIT, in bytes, unless the environment sets it:
	// under the 150 MB an instance may use (issue 13) with room for stacks
	// and the runtime's own.
	MemoryLimit = 100 << 20
)

// Apply sets Percent and MemoryLimit where the operator has not set GOGC or
// GOMEMLIMIT (the runtime has applied those already), and returns what
// restores the settings it found: serve may run inside a test binary.
func Apply(getenv func(string) string) (restore func()) {
	var undo []func()
	if getenv("GOGC") == "" {
		old := debug.SetGCPercent(Percent)
		undo = append(undo, func() { debug.SetGCPercent(old) })
	}
	if getenv("GOMEMLIMIT") == "" {
		old := debug.SetMemoryLimit(MemoryLimit)
		undo = append(undo, func() { debug.SetMemoryLimit(old) })
	}
	return func() {
		for _, f := range undo {
			f()
		}
	}
}
