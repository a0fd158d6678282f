//go:build unix && !linux

package stack

import (
	"errors"
	"syscall"
)

// sysProcAttr puts the child in its own process group. Without Linux's
// Pdeathsig, a server outlives a test binary that crashes before Close.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// procStart is not known without Linux's /proc: scratch directories then
// carry no owner and are never swept.
func procStart(int) (uint64, error) { return 0, errors.ErrUnsupported }
