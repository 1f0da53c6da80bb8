package slurmshim

import "syscall"

// SIGPWR is Linux's alone.
func init() { signalNames["PWR"] = syscall.SIGPWR }
