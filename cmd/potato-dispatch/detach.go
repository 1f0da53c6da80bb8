package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"potato-training/internal/cli"
)

// detach starts this command again without --detach, in its own session,
// prints the run id it reports and returns: the run goes on in the
// background and survives the caller.
func detach(ctx *cli.Context) error {
	var args []string
	for _, a := range os.Args[1:] {
		if a != "--detach" {
			args = append(args, a)
		}
	}
	id, err := startDetached(ctx, args)
	if err != nil {
		return err
	}
	fmt.Fprintln(ctx.Stdout, id)
	return nil
}

// startDetached runs "potato-dispatch ARGS --detached" (a run command) in
// its own session and returns the run id it reports once the run is
// recorded. A run refused before that passes on its message and exit
// status.
func startDetached(ctx *cli.Context, args []string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	args = append(args[:len(args):len(args)], "--detached")
	cmd := exec.Command(self, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	if err := cmd.Start(); err != nil {
		return "", err
	}
	id, _ := bufio.NewReader(out).ReadString('\n')
	if id = strings.TrimSpace(id); id != "" {
		_ = cmd.Process.Release()
		return id, nil
	}
	// No id: the run was refused before it was recorded.
	err = cmd.Wait()
	msg := strings.TrimSpace(errBuf.String())
	if msg != "" {
		fmt.Fprintln(ctx.Stderr, msg)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return "", cli.Exit(ee.ExitCode())
	}
	return "", cli.Exit(cli.ExitNo)
}

// detachedStarted is called in the background process once the run id is
// printed: its standard output and error go to /dev/null from then on, so
// that the caller can exit; the run's own files hold everything else.
func detachedStarted() {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return
	}
	_ = syscall.Dup3(int(null.Fd()), 1, 0)
	_ = syscall.Dup3(int(null.Fd()), 2, 0)
	null.Close()
}
