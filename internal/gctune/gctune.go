// Package gctune sets the garbage collector of a serving process.
//
// An instance allocates ≈ 19 KB per order (HTTP, JSON, the lock calls'
// commands, pgx's binds) over a live heap of a few MB, so with Go's default
// GOGC=100 it collects four times a second under load (redlock, 1,000
// SKUs: 36 collections in 9 s; 7 at 400, and 9 % less CPU an order). A
// higher GOGC collects a quarter as often; the soft memory limit keeps the heap — and
// the instance's RSS — bounded however the live heap grows, by collecting
// more often only when it nears the limit (the pairing the Go GC guide
// recommends for a service with a memory budget).
package gctune

import (
	"runtime/debug"
	"runtime/metrics"
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

// Settings reads the collector's settings in effect, for the start-up log
// (without SetGCPercent's round trip, which would change them for a moment).
func Settings() (percent int, limit int64) {
	m := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(m)
	return int(m[0].Value.Uint64()), int64(m[1].Value.Uint64())
}
