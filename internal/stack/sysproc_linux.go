package stack

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr puts the child in its own process group, so signals aimed at
// the test's group (Ctrl-C) do not reach it and our SIGSTOP/SIGKILL hit only
// it, and has the kernel SIGKILL it when the test binary dies, so a crashed
// or timed-out test leaves no server behind. Pdeathsig fires when the forking
// OS thread exits; the Go runtime only retires threads whose goroutine exits
// while locked to them with runtime.LockOSThread, which this package never does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// procStart is process pid's start time in clock ticks since boot (field 22
// of /proc/PID/stat), which tells it apart from a later process given the
// same PID.
func procStart(pid int) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses; the
	// fields after its closing parenthesis start with field 3.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	const startField = 22 - 3
	if len(fields) <= startField {
		return 0, fmt.Errorf("stack: /proc/%d/stat has %d fields", pid, len(fields))
	}
	return strconv.ParseUint(fields[startField], 10, 64)
}
