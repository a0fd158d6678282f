package seedtable

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/stockguard/stockguard/internal/lock/backends"
)

// FaultConfig sizes the cells that need a fault: release after the holder
// dies, availability, fencing; and the fairness run, which needs none.
type FaultConfig struct {
	Backend    string
	Bin        string
	AdminToken string
	// DatabaseURL is the backend's database (compare's scratch one).
	DatabaseURL string
	Dir         string // logs of the rig, the chaos runs and their servers
	// LockTTL is the rig's --lock-ttl: the redis and redlock lease, the
	// etcd session lease (whole seconds) and postgres's idle bound.
	LockTTL  time.Duration
	LockWait time.Duration
	// Window is how long each availability cell's servers stay down.
	Window         time.Duration
	Fairness       time.Duration
	RequestTimeout time.Duration
	StartupTimeout time.Duration
	// Shared are the shared stack's servers, which the fairness Lockers
	// use (they are never killed).
	Shared backends.Params
	// Fencing runs chaos's pause-holder with fencing on and off.
	Fencing bool
}

// ZKSessionTimeout is the zookeeper backend's session timeout, which
// --lock-ttl does not change: how long a dead holder's lock node lives.
const ZKSessionTimeout = 4 * time.Second

func (fc FaultConfig) fenced() bool { return backends.Fenced(fc.Backend) }

// releaseBound says what frees a dead holder's lock on the backend.
func (fc FaultConfig) releaseBound() string {
	switch fc.Backend {
	case "redis", "redlock":
		return "TTL " + fc.LockTTL.String()
	case "zookeeper":
		return "session " + ZKSessionTimeout.String()
	case "etcd":
		return fmt.Sprintf("lease %ds", int64((fc.LockTTL+time.Second-1)/time.Second))
	case "postgres":
		return "connection"
	}
	return ""
}

// MeasureFaults fills the table's fault cells, fairness and facts for one
// backend (the throughput cells are compare's, on its own instances).
// Progress lines go to stderr.
func MeasureFaults(ctx context.Context, fc FaultConfig, stderr io.Writer) Table {
	t := Table{Backend: fc.Backend}
	t.CAP, t.LockTypes = FactsFor(fc.Backend)
	start := time.Now()
	step := func(what string) {
		fmt.Fprintf(stderr, "== %s: seed table: %s (+%.1fs)\n", fc.Backend, what, time.Since(start).Seconds())
	}

	step("fairness")
	t.Fairness = MeasureFairness(ctx, fc.Backend, fc.Shared, fc.Fairness)

	b, err := backends.Lookup(fc.Backend)
	switch {
	case err != nil:
		t.Release.Error, t.Availability.Error, t.Fencing.Error = err.Error(), err.Error(), err.Error()
		return t
	case fc.Backend == "none":
		t.Release.NA = naNoLock
	case !b.Distributed:
		t.Release.NA = naInProcess
	}
	switch fc.Backend {
	case "none", "local":
		t.Availability.NA = naNoServers
	case "postgres":
		t.Availability.NA = naOneServer
	}
	switch {
	case !b.Fenced:
		t.Fencing.NA = naNoToken
	case !fc.Fencing:
		t.Fencing.NA = naNotRun
	}

	if t.Release.NA == "" || t.Availability.NA == "" {
		step("release after the holder dies, then availability (own lock servers)")
		r, err := startRig(ctx, fc.withDir("rig"), 2)
		if err != nil {
			t.Release.Error, t.Availability.Error = err.Error(), err.Error()
		} else {
			if t.Release.NA == "" {
				t.Release = r.measureRelease(ctx, fc.releaseBound())
			}
			if t.Availability.NA == "" {
				t.Availability = r.measureAvailability(ctx, fc.Window)
			}
			_ = r.close() // servers were killed on purpose; their errors say nothing
		}
	}
	if t.Fencing.NA == "" {
		step("fencing: chaos pause-holder, fencing on and off")
		t.Fencing = measureFencing(ctx, fc.withDir("fencing"), stderr)
	}
	step("done")
	return t
}

// Reasons a cell does not apply, short enough for a terminal column; the
// NAFootnote explains each.
const (
	naNoLock     = "no lock"
	naInProcess  = "in-process lock"
	naNoServers  = "no lock servers"
	naOneServer  = "one server (the store)"
	naNoMinority = "1 server, no minority"
	naNoToken    = "no fencing token"
	naNotRun     = "not run (--seed-fencing)"
)

func (fc FaultConfig) withDir(sub string) FaultConfig {
	fc.Dir = filepath.Join(fc.Dir, sub)
	return fc
}
