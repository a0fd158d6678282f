//go:build !linux

package floor

import "syscall"

// childAttrs has nothing to set where Pdeathsig does not exist: Stop is
// the only end.
func childAttrs() *syscall.SysProcAttr { return nil }
