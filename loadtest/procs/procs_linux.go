package procs

import "syscall"

// childAttrs asks the kernel to SIGKILL a serve instance if the load tester
// dies without stopping it (a test timeout, a kill -9), so no instance
// outlives the run that started it.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
