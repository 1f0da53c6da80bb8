package agent

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// ExecFailed is a program that ExecLimited could not start in its place
// (potato-agent exec exits 126, as a shell does).
type ExecFailed struct{ Err error }

func (e *ExecFailed) Error() string { return e.Err.Error() }
func (e *ExecFailed) Unwrap() error { return e.Err }

// limitShell sets RLIMIT_AS to $1 KiB (soft and hard) and replaces itself
// with the program and arguments after it; a shell reports a program it
// cannot run with 126 or 127.
const limitShell = `ulimit -v "$1" || exit 1; shift; exec "$@"`

// ExecLimited replaces this process with the program command[0] (a
// leading "--" skipped) under RLIMIT_AS of maxRAMMB, so the limit applies
// from the program's first instruction. /bin/sh sets the limit, between
// this process and the program: set here, it would also hold for this
// process until it execs, and the Go runtime, whose address space is
// mostly reserved, not used, dies of "out of memory" when it maps more in
// that window (1 run in 400 at 300 MB seen). It returns only when it
// fails: a *UsageError for no program or one not found, a *ExecFailed when
// exec itself failed.
func ExecLimited(maxRAMMB int, command []string) error {
	if len(command) > 0 && command[0] == "--" {
		command = command[1:]
	}
	if len(command) == 0 {
		return usagef("exec: no program given")
	}
	path, err := exec.LookPath(command[0])
	if err != nil {
		return usagef("exec: %v", err)
	}
	argv := append([]string{"sh", "-c", limitShell, "potato-agent exec", strconv.Itoa(maxRAMMB * 1024), path}, command[1:]...)
	err = syscall.Exec("/bin/sh", argv, os.Environ())
	return &ExecFailed{Err: fmt.Errorf("exec: /bin/sh for %s: %v", path, err)}
}
