//go:build unix && !linux

package trainer

import "syscall"

// groupAttr puts the process in its own group. Only Linux has a signal
// for a parent's death: elsewhere a training process outlives a
// dispatch killed outright.
func groupAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
