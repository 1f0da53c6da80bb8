//go:build unix && !linux

package sshx

import (
	"os"
	"syscall"
)

// masterAttr puts the master in its own process group.
func masterAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// growPipe leaves the pipe as it is: only Linux can resize one.
func growPipe(*os.File) {}
