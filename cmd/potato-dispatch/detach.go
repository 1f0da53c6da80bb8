package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"potato-training/internal/cli"
)

// detach starts this run again in its own session, prints the run id it
// reports and returns: the run goes on in the background and survives the
// caller. The background command is made from the parsed flags, never from
// the words of os.Args, so whichever way --detach was spelt
// (--detach, --detach=true, POTATO_... in the environment) it is not
// passed on.
func detach(ctx *cli.Context, c *runCmd) error {
	id, release, err := startDetached(ctx, c.detachedArgs())
	if err != nil {
		return err
	}
	release()
	fmt.Fprintln(ctx.Stdout, id)
	return nil
}

// detachedArgs is the command line of the background run: every flag the
// user gave, as parsed, and no --detach. Values go in --flag=value form
// and the config after "--", so that a value starting with "-" stays a
// value.
func (c *runCmd) detachedArgs() []string {
	args := []string{"run", "--trainer=" + c.Trainer, "--schemas=" + strings.Join(c.Schemas, ",")}
	if c.curve != nil {
		args = []string{"curve", "--points=" + curvePoints(c.curve), "--trainer=" + c.Trainer, "--schemas=" + strings.Join(c.Schemas, ",")}
		if c.curveDraws != 0 {
			args = append(args, "--draws="+strconv.Itoa(c.curveDraws))
		}
	}
	if c.Backend != "" {
		args = append(args, "--backend="+c.Backend)
	}
	for _, p := range c.Param {
		args = append(args, "--param="+p)
	}
	if c.RunID != "" {
		args = append(args, "--run-id="+c.RunID)
	}
	if c.Trigger != "" {
		args = append(args, "--trigger="+c.Trigger)
	}
	return append(args, "--", c.Config)
}

// startDetached runs "potato-dispatch run --detached ARGS..." (args is
// "run", or "curve", and its arguments) in its own session and returns the
// run id it reports once the run is recorded, and release, which lets the
// run go on: until the caller calls it (or exits) the background process
// waits, so that what the caller records of the start (auto.log's start
// line) comes before anything the run records of its end. A run refused
// before it is recorded passes on its message and exit status.
func startDetached(ctx *cli.Context, args []string) (id string, release func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	if len(args) == 0 || args[0] != "run" && args[0] != "curve" {
		return "", nil, fmt.Errorf("internal error: a detached command is a run, not %q", args)
	}
	args = append([]string{args[0], "--detached"}, args[1:]...)
	cmd := exec.Command(self, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	// The background process reads its standard input to its end before it
	// goes on; closing this pipe is the word to go on.
	hold, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	id, _ = bufio.NewReader(out).ReadString('\n')
	if id = strings.TrimSpace(id); id != "" {
		_ = cmd.Process.Release()
		return id, func() { _ = hold.Close() }, nil
	}
	// No id: the run was refused before it was recorded (Wait closes the
	// pipe).
	err = cmd.Wait()
	msg := strings.TrimSpace(errBuf.String())
	if msg != "" {
		fmt.Fprintln(ctx.Stderr, msg)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return "", nil, cli.Exit(ee.ExitCode())
	}
	return "", nil, cli.Exit(cli.ExitNo)
}

// releaseWait bounds how long a background run waits for its caller's
// release: a caller that neither releases nor exits (stopped, say) delays
// the run, never holds it.
const releaseWait = 30 * time.Second

// detachedStarted is called in the background process once the run id is
// printed: its standard output and error go to /dev/null from then on, so
// that the caller can exit; the run's own files hold everything else.
func detachedStarted() {
	waitForRelease(os.Stdin)
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return
	}
	_ = dupTo(int(null.Fd()), 0)
	_ = dupTo(int(null.Fd()), 1)
	_ = dupTo(int(null.Fd()), 2)
	null.Close()
}

// waitForRelease reads in, the pipe from startDetached, to its end, for
// at most releaseWait; anything but a pipe (run by hand) is not waited on.
func waitForRelease(in *os.File) {
	if st, err := in.Stat(); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		return
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, in)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(releaseWait):
	}
}
