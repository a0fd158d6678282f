package cpu

import (
	"fmt"
	"slices"
	"time"

	"github.com/stockguard/stockguard/loadtest/tally"
)

// Class is one class of process measured together: its root processes
// and, with Children, their direct children too (Postgres: the postmaster
// and its backends, which come and go with connections).
type Class struct {
	Name     string
	Roots    []int
	Children bool
}

// classSnap is one class at one instant: each process's own CPU and the
// roots' reaped children's CPU.
type classSnap struct {
	own               map[int]procSnap
	reaped, reapedSys time.Duration
	// blind is set when a process's system calls could not be read.
	blind bool
}

// procSnap is one process at one instant.
type procSnap struct {
	cpu, sys time.Duration
	syscalls int64
}

// Snapshot is every class at one instant, and the machine's CPUs.
type Snapshot struct {
	At      time.Time
	classes map[string]classSnap
	machine Machine
	// hasMachine is false where /proc/stat could not be read.
	hasMachine bool
}

// Meter takes snapshots of a fixed set of classes.
type Meter struct {
	proc    string
	classes []Class
}

// NewMeter measures the classes; a class with no roots is left out.
func NewMeter(classes []Class) *Meter { return newMeter("/proc", classes) }

func newMeter(proc string, classes []Class) *Meter {
	m := &Meter{proc: proc}
	for _, c := range classes {
		if len(c.Roots) > 0 {
			m.classes = append(m.classes, c)
		}
	}
	return m
}

// Snapshot reads the CPU of every class now.
func (m *Meter) Snapshot() (Snapshot, error) {
	s := Snapshot{At: time.Now(), classes: map[string]classSnap{}}
	// The machine's line is read first and the classes after it: both are
	// read within a millisecond, against windows of seconds.
	if mach, err := readMachine(m.proc); err == nil {
		s.machine, s.hasMachine = mach, true
	}
	var all []Stat
	for _, c := range m.classes {
		if c.Children && all == nil {
			var err error
			if all, err = readAll(m.proc); err != nil {
				return s, err
			}
		}
	}
	for _, c := range m.classes {
		cs := classSnap{own: map[int]procSnap{}}
		for _, pid := range c.Roots {
			st, err := readStat(m.proc, pid)
			if err != nil {
				return s, fmt.Errorf("cpu: %s pid %d: %w", c.Name, pid, err)
			}
			cs.add(m.proc, st)
			cs.reaped, cs.reapedSys = cs.reaped+st.Reaped, cs.reapedSys+st.ReapedSys
		}
		if c.Children {
			for _, st := range all {
				if slices.Contains(c.Roots, st.PPID) {
					cs.add(m.proc, st)
				}
			}
		}
		s.classes[c.Name] = cs
	}
	return s, nil
}

// add records st's process, with its system calls when it can read them.
func (cs *classSnap) add(dir string, st Stat) {
	n, err := readIO(dir, st.PID)
	cs.blind = cs.blind || err != nil
	cs.own[st.PID] = procSnap{cpu: st.Own, sys: st.OwnSys, syscalls: n}
}

// Usage is one class's CPU over a window.
type Usage struct {
	Class     string  `json:"class"`
	Processes int     `json:"processes"` // at the end of the window
	CPUS      float64 `json:"cpu_s"`
	// PerOrderUs is CPUS divided by the orders placed in the window, in µs.
	PerOrderUs float64 `json:"per_order_us"`
	// KernelPerOrderUs is the part of PerOrderUs the kernel spent on the
	// class's behalf (stime): system calls, which on loopback include the
	// delivery to the receiving socket.
	KernelPerOrderUs float64 `json:"kernel_per_order_us"`
	// SyscallsPerOrder is the read and write system calls (sockets
	// included) the class made per order; absent when /proc did not let
	// them be read. A child that exits within the window takes its count
	// with it: /proc keeps no reaped count of system calls.
	SyscallsPerOrder *float64 `json:"syscalls_per_order,omitempty"`
}

// Window is the CPU of every class between two snapshots.
type Window struct {
	DurationS float64 `json:"duration_s"`
	Orders    int64   `json:"orders"`
	Classes   []Usage `json:"classes"`
	// TotalPerOrderUs sums the classes: the machine's CPU an order costs.
	TotalPerOrderUs float64 `json:"total_per_order_us"`
	// CoresBusy is the classes' CPU over the window's length: how many of
	// the machine's cores the window kept busy.
	CoresBusy float64 `json:"cores_busy"`
	// StealShare is the share of the machine's CPU time in the window that
	// the hypervisor gave to other guests (/proc/stat's steal over all of
	// its states): the cores the window had are the machine's times one
	// less this. Absent where /proc/stat could not be read.
	StealShare *float64 `json:"steal_share,omitempty"`
	// TurnStealShares is each span's own stolen share, in order, for a
	// window measured in more than one (the judge's turns).
	TurnStealShares []float64 `json:"turn_steal_shares,omitempty"`
}

// CoresHad is how many of the machine's cores (cores) the window had:
// cores less the stolen share; cores itself without a steal reading.
func (w Window) CoresHad(cores int) float64 {
	if w.StealShare == nil {
		return float64(cores)
	}
	return float64(cores) * (1 - *w.StealShare)
}

// Span is the two snapshots around one measured stretch of a window.
type Span struct{ Before, After Snapshot }

// Between is the CPU each class used from before to after, divided by the
// orders placed in between.
func (m *Meter) Between(before, after Snapshot, orders int64) Window {
	return m.Across([]Span{{before, after}}, orders)
}

// Across is the CPU each class used within the spans, added up, divided by
// the orders placed in them: a window measured in turns (judge.Interleave),
// without what was used between them. In each span, a process present only
// at its end started within it and counts whole; a child present only at
// its start exited, its final total is in its root's reaped time, and what
// it had used before the span is taken back out.
func (m *Meter) Across(spans []Span, orders int64) Window {
	w := Window{Orders: orders}
	var all, length, machine, stolen time.Duration
	hasMachine := true // and no spans: no machine time, no share
	var turns []float64
	for _, sp := range spans {
		length += sp.After.At.Sub(sp.Before.At)
		hasMachine = hasMachine && sp.Before.hasMachine && sp.After.hasMachine
		spanAll, spanStolen := sp.After.machine.Total-sp.Before.machine.Total, sp.After.machine.Steal-sp.Before.machine.Steal
		machine, stolen = machine+spanAll, stolen+spanStolen
		turns = append(turns, stealShare(spanStolen, spanAll))
	}
	if hasMachine && machine > 0 {
		share := stealShare(stolen, machine)
		w.StealShare = &share
		if len(spans) > 1 {
			w.TurnStealShares = turns
		}
	}
	for _, c := range m.classes {
		var used, sys time.Duration
		var calls int64
		blind, procs := false, 0
		for _, sp := range spans {
			u, s, n := c.delta(sp.Before.classes[c.Name], sp.After.classes[c.Name])
			used, sys, calls = used+u, sys+s, calls+n
			blind = blind || sp.Before.classes[c.Name].blind || sp.After.classes[c.Name].blind
			procs = len(sp.After.classes[c.Name].own)
		}
		all += used
		u := Usage{Class: c.Name, Processes: procs, CPUS: tally.Round(used.Seconds(), 3)}
		if orders > 0 {
			u.PerOrderUs = tally.Round(float64(used.Microseconds())/float64(orders), 1)
			u.KernelPerOrderUs = tally.Round(float64(sys.Microseconds())/float64(orders), 1)
			w.TotalPerOrderUs += u.PerOrderUs
			if !blind {
				per := tally.Round(float64(calls)/float64(orders), 2)
				u.SyscallsPerOrder = &per
			}
		}
		w.Classes = append(w.Classes, u)
	}
	w.DurationS = tally.Round(length.Seconds(), 3)
	w.TotalPerOrderUs = tally.Round(w.TotalPerOrderUs, 1)
	if length > 0 {
		w.CoresBusy = tally.Round(all.Seconds()/length.Seconds(), 2)
	}
	return w
}

// stealShare is stolen over all, within [0, 1], to a tenth of a per cent;
// 0 for a span too short to have a tick.
func stealShare(stolen, all time.Duration) float64 {
	if all <= 0 {
		return 0
	}
	return tally.Round(min(max(stolen.Seconds()/all.Seconds(), 0), 1), 3)
}

// delta is the CPU, the kernel's part of it and the system calls of c
// from b to a.
func (c Class) delta(b, a classSnap) (used, sys time.Duration, calls int64) {
	used, sys = a.reaped-b.reaped, a.reapedSys-b.reapedSys
	for pid, t := range a.own {
		used += t.cpu - b.own[pid].cpu
		sys += t.sys - b.own[pid].sys
		calls += t.syscalls - b.own[pid].syscalls
	}
	for pid, t := range b.own {
		if _, alive := a.own[pid]; !alive && !slices.Contains(c.Roots, pid) {
			used -= t.cpu
			sys -= t.sys
		}
	}
	return max(used, 0), max(min(sys, used), 0), calls
}
