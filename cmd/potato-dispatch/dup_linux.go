package main

import "syscall"

// dupTo makes fd newfd a copy of oldfd (Linux on arm64 has dup3 alone).
func dupTo(oldfd, newfd int) error { return syscall.Dup3(oldfd, newfd, 0) }
