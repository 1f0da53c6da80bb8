//go:build linux

package sshx

import (
	"os"
	"syscall"
)

// masterAttr puts the master in its own process group, and has the kernel
// send it SIGTERM should this process die without Close.
func masterAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// growPipe raises a pipe's buffer to 1 MiB where the system allows it
// (F_SETPIPE_SZ), so a fast copy through it takes fewer reads and wake-ups
// than with the default 64 KiB.
func growPipe(f *os.File) {
	const fSetPipeSz = 1031
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			syscall.Syscall(syscall.SYS_FCNTL, fd, fSetPipeSz, 1<<20)
		})
	}
}
