//go:build unix && !linux

package sshx

import "syscall"

// masterAttr puts the master in its own process group.
func masterAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
