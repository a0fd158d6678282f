package floor

import "syscall"

// childAttrs has the kernel SIGKILL a floor process when the bench dies,
// so a crashed bench leaves none behind, and keeps Ctrl-C aimed at the
// bench's group from reaching it before Stop does.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
