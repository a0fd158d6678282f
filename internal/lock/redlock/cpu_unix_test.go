//go:build unix

package redlock_test

import (
	"syscall"
	"time"
)

// cpuTime is the process's user and system CPU time so far: a benchmark's
// client cost per cycle, which, unlike wall time, waiting on a busy machine
// does not inflate.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
