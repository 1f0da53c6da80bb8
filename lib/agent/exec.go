package agent

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// ExecFailed is a program that ExecLimited could not start in its place
// (potato-agent exec exits 126, as a shell does).
type ExecFailed struct{ Err error }

func (e *ExecFailed) Error() string { return e.Err.Error() }
func (e *ExecFailed) Unwrap() error { return e.Err }

// ExecLimited sets RLIMIT_AS to maxRAMMB and replaces this process with
// the program command[0] (a leading "--" skipped), so the limit applies
// from the program's first instruction. It returns only when it fails: a
// *UsageError for no program or one not found, a *ExecFailed when exec
// itself failed.
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
	lim := uint64(maxRAMMB) << 20
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: lim, Max: lim}); err != nil {
		return fmt.Errorf("exec: setting RLIMIT_AS: %v", err)
	}
	err = syscall.Exec(path, command, os.Environ())
	return &ExecFailed{Err: fmt.Errorf("exec: %s: %v", path, err)}
}
