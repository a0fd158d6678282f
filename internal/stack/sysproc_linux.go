package stack

import "syscall"

// sysProcAttr puts the child in its own process group, so signals aimed at
// the test's group (Ctrl-C) do not reach it and our SIGSTOP/SIGKILL hit only
// it, and has the kernel SIGKILL it when the test binary dies, so a crashed
// or timed-out test leaves no server behind. Pdeathsig fires when the forking
// OS thread exits; the Go runtime only retires threads whose goroutine exits
// while locked to them with runtime.LockOSThread, which this package never does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
