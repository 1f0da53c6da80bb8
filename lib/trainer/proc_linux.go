//go:build linux

package trainer

import "syscall"

// groupAttr puts the process in its own group, and has the kernel kill it
// should this process die.
func groupAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
