package procs

import "syscall"

// childAttrs puts a serve instance in a process group of its own, so that a
// terminal's Ctrl-C (SIGINT to the foreground group) reaches only the load
// tester, which then stops the instances itself once its teardown needs
// them gone, instead of them exiting mid-teardown; and asks the kernel to
// SIGKILL the instance if the load tester dies without stopping it (a test
// timeout, a kill -9), so no instance outlives the run that started it.
// Every signal the tools send an instance goes to its PID, never to a group.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
