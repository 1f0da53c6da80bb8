package server

import "syscall"

// ctimeOf is a file's inode change time.
func ctimeOf(st *syscall.Stat_t) syscall.Timespec { return st.Ctim }
