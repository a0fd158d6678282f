//go:build unix && !linux

package stack

import "syscall"

// sysProcAttr puts the child in its own process group. Without Linux's
// Pdeathsig, a server outlives a test binary that crashes before Close.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
