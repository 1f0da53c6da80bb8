package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"potato-training/internal/cli"
	"potato-training/lib/dispatch"
	"potato-training/lib/rundir"
)

type waitCmd struct {
	Config  string        `arg:"" help:"The project's config file."`
	RunIDs  []string      `arg:"" name:"run-id" help:"The runs to wait for."`
	Timeout time.Duration `help:"Give up after this long (30s, 2h), with status 124; 0 waits for ever." default:"0"`
}

// Run waits for the runs' ends and exits with the first non-zero exit
// code of the runs in the order given (0 when all succeeded), each run's
// summary on standard error as run prints it.
func (c *waitCmd) Run(ctx *cli.Context) error {
	wctx := context.Background()
	if c.Timeout < 0 {
		return cli.Failf(cli.ExitUsage, "--timeout %s: use a duration of 0 or more", c.Timeout)
	}
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(wctx, c.Timeout)
		defer cancel()
	}
	codes, err := dispatch.Wait(wctx, dispatch.WaitOptions{ConfigPath: c.Config, RunIDs: c.RunIDs,
		Ended: func(info rundir.Info) { summarize(ctx, c.Config, info.RunID) }})
	if errors.Is(err, context.DeadlineExceeded) {
		var open []string
		for i, code := range codes {
			if code < 0 {
				open = append(open, c.RunIDs[i])
			}
		}
		return &cli.ExitError{Code: dispatch.ExitTimeout, Err: fmt.Errorf("run %s not over after %s (--timeout)", strings.Join(open, ", "), c.Timeout)}
	}
	if err != nil {
		return exitError(err)
	}
	for i, code := range codes {
		if code != 0 {
			return &cli.ExitError{Code: code, Err: fmt.Errorf("run %s %s; see potato-dispatch status %s %s", c.RunIDs[i], outcome(code), c.Config, c.RunIDs[i])}
		}
	}
	return nil
}
