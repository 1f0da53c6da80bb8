package main

import (
	"os"
	"syscall"
)

// growPipe raises the buffer of a pipe to 1 MiB where the system allows it
// (F_SETPIPE_SZ): send-tree's standard output is sshd's pipe, and with
// the default 64 KiB sshd wakes up for every small piece of a large file.
// Anything but a pipe, or a refusal, leaves it as it is.
func growPipe(f *os.File) {
	const fSetPipeSz = 1031
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			syscall.Syscall(syscall.SYS_FCNTL, fd, fSetPipeSz, 1<<20)
		})
	}
}
