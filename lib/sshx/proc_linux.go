//go:build linux

package sshx

import "syscall"

// masterAttr puts the master in its own process group, and has the kernel
// send it SIGTERM should this process die without Close.
func masterAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
