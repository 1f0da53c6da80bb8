package agentproto

import (
	"os"
	"syscall"
)

// syncFileRangeWrite is SYNC_FILE_RANGE_WRITE: start writing the dirty
// pages of the range, without waiting for them.
const syncFileRangeWrite = 2

// startWriteback asks the kernel to start writing n bytes of f from off
// to disk, and does not wait; an error only means the fsync does it all.
func startWriteback(f *os.File, off, n int64) {
	syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, f.Fd(), uintptr(off), uintptr(n), syncFileRangeWrite, 0, 0)
}
