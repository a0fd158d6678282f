//go:build !linux

package procs

import "syscall"

// childAttrs has nothing to set where Pdeathsig does not exist.
func childAttrs() *syscall.SysProcAttr { return nil }
