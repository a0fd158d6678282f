// Package cpu measures the CPU time each class of process (the service's
// instances, Postgres, Redis, ZooKeeper, etcd, the load generator) spends
// over a measured window, from /proc/<pid>/stat, so that the bench can say
// what one order costs each of them.
package cpu

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the clock-tick fields of /proc/<pid>/stat. The
// kernel reports them in USER_HZ (sysconf(_SC_CLK_TCK)), whatever its
// internal HZ: 100 on every architecture Go runs on under Linux, which take
// it from asm-generic/param.h. Only alpha and ia64, which Go does not
// support, used another value (1024).
const userHZ = 100

// ErrMalformed is returned for a /proc/<pid>/stat line or io text that does
// not parse.
var ErrMalformed = errors.New("malformed /proc file")

// Stat is the part of /proc/<pid>/stat the measurement needs.
type Stat struct {
	PID  int
	PPID int
	// Own is utime+stime: the CPU the process itself has used.
	Own time.Duration
	// OwnSys is stime, the part of Own spent in the kernel on its behalf
	// (system calls, which on loopback include the delivery to the
	// receiving socket).
	OwnSys time.Duration
	// Reaped is cutime+cstime: the CPU of children it has waited for.
	// Postgres backends that exit during a window are counted through it.
	Reaped time.Duration
	// ReapedSys is cstime, the kernel's part of Reaped.
	ReapedSys time.Duration
}

// ParseStat parses one /proc/<pid>/stat line. The command name is
// parenthesised and may itself hold spaces and parentheses, so the fields
// are counted from the last ')'.
func ParseStat(line string) (Stat, error) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 1 || end < open {
		return Stat{}, fmt.Errorf("%w: %q", ErrMalformed, line)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line[:open]))
	if err != nil {
		return Stat{}, fmt.Errorf("%w: pid: %v", ErrMalformed, err)
	}
	// After the name: state(3) ppid(4) … utime(14) stime(15) cutime(16) cstime(17).
	f := strings.Fields(line[end+1:])
	if len(f) < 15 {
		return Stat{}, fmt.Errorf("%w: %d fields after the name", ErrMalformed, len(f))
	}
	var v [5]int64
	for i, idx := range []int{1, 11, 12, 13, 14} {
		if v[i], err = strconv.ParseInt(f[idx], 10, 64); err != nil {
			return Stat{}, fmt.Errorf("%w: field %d: %v", ErrMalformed, idx+3, err)
		}
	}
	return Stat{PID: pid, PPID: int(v[0]), Own: ticks(v[1] + v[2]), OwnSys: ticks(v[2]),
		Reaped: ticks(v[3] + v[4]), ReapedSys: ticks(v[4])}, nil
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / userHZ }

// readStat reads one process's stat; an error for a process that is gone.
func readStat(proc string, pid int) (Stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", proc, pid))
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(string(b))
}

// ParseIO returns the system calls counted in a /proc/<pid>/io text: read
// and write calls of every kind (sockets included: syscr counts read,
// recvfrom and their kin, syscw write, sendto and theirs). A loopback
// round trip is at least a write here and a read there, which is what
// makes them worth counting per order.
func ParseIO(text string) (syscalls int64, err error) {
	var found int
	for _, line := range strings.Split(text, "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || name != "syscr" && name != "syscw" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %s: %v", ErrMalformed, name, err)
		}
		syscalls += n
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("%w: io has no syscr and syscw", ErrMalformed)
	}
	return syscalls, nil
}

// readIO reads one process's system calls; an error for a process that is
// gone or not ours to read (/proc/<pid>/io asks for the rights of ptrace).
func readIO(proc string, pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/io", proc, pid))
	if err != nil {
		return 0, err
	}
	return ParseIO(string(b))
}

// readAll reads the stat of every process under proc; processes that
// vanish while it reads are skipped.
func readAll(proc string) ([]Stat, error) {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	var out []Stat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := readStat(proc, pid); err == nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// Machine is the aggregate line of /proc/stat: the time of all the
// machine's CPUs, and the part of it the hypervisor gave to other guests
// (steal). On a shared VM steal is what makes a fast spell and a slow one:
// the cores a window had are the machine's less what was stolen in it.
type Machine struct {
	// Total is every state's time over all CPUs (user, nice, system, idle,
	// iowait, irq, softirq, steal; guest time is already inside user).
	Total time.Duration
	Steal time.Duration
}

// ParseMachine parses the "cpu " line of a /proc/stat text.
func ParseMachine(text string) (Machine, error) {
	line, _, _ := strings.Cut(text, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return Machine{}, fmt.Errorf("%w: /proc/stat starts %q", ErrMalformed, line)
	}
	var m Machine
	for i, s := range f[1:9] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return Machine{}, fmt.Errorf("%w: /proc/stat field %d: %v", ErrMalformed, i+1, err)
		}
		m.Total += ticks(n)
		if i == 7 {
			m.Steal = ticks(n)
		}
	}
	return m, nil
}

func readMachine(proc string) (Machine, error) {
	b, err := os.ReadFile(proc + "/stat")
	if err != nil {
		return Machine{}, err
	}
	return ParseMachine(string(b))
}
