package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"potato-training/internal/cli"
	"potato-training/lib/dispatch"
)

type autoCmd struct {
	Config string `arg:"" help:"The project's config file."`
	Quiet  bool   `short:"q" help:"Say nothing when no run is due; configuration problems, failed runs and errors are still printed." env:"POTATO_AUTO_QUIET"`
	Detach bool   `help:"Print the run id and return; the run goes on in the background (its end is in training/auto.log)."`
}

// Run starts an automatic run when model_training.auto_retrain calls for
// one: its id on stdout at once, then it waits for the run's end and
// exits with the run's exit status (with --detach it returns at once, as
// run --detach does). When no run is due, one line on stderr says why
// (not with --quiet) and the exit status is 0: for cron, nothing to do
// is not a failure. A configuration that stops automatic runs is said
// even with --quiet, and exits 2.
func (c *autoCmd) Run(ctx *cli.Context) error {
	plan, err := dispatch.PlanAuto(c.Config, time.Now())
	if err != nil {
		return exitError(err)
	}
	defer plan.Close()
	if !plan.Start {
		if plan.Problem {
			return cli.Failf(cli.ExitUsage, "no run: %s", plan.Reason)
		}
		if !c.Quiet {
			fmt.Fprintf(ctx.Stderr, "potato-dispatch: no run: %s\n", plan.Reason)
		}
		return nil
	}
	if c.Detach {
		id, release, err := startDetached(ctx, plan.Args())
		if err != nil {
			return err
		}
		err = plan.Started(id, time.Now())
		release()
		fmt.Fprintln(ctx.Stdout, id)
		if err != nil {
			return cli.Failf(cli.ExitNo, "run %s started, but %s was not written: %v", id, dispatch.AutoStateFile, err)
		}
		return nil
	}
	return c.foreground(ctx, plan)
}

// foreground runs the planned run in this process, as run without
// --detach does: a signal cancels it gracefully.
func (c *autoCmd) foreground(ctx *cli.Context, plan *dispatch.AutoPlan) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	ids := make(chan string, 1)
	go func() {
		id := <-ids
		for range sigs {
			_ = dispatch.Cancel(c.Config, id)
		}
	}()
	var runID string
	var stateErr error
	opt := plan.Options()
	opt.Started = func(id string) {
		runID = id
		stateErr = plan.Started(id, time.Now())
		// The run is recorded: another auto sees it and waits.
		plan.Close()
		fmt.Fprintln(ctx.Stdout, id)
		if f, ok := ctx.Stdout.(*os.File); ok {
			_ = f.Sync()
		}
		ids <- id
	}
	code, err := dispatch.Run(context.Background(), opt)
	if err != nil {
		plan.Refused(code, err)
		return &cli.ExitError{Code: code, Err: fmt.Errorf("no run: %w", err)}
	}
	if stateErr != nil {
		fmt.Fprintf(ctx.Stderr, "potato-dispatch: warning: %s was not written: %v\n", dispatch.AutoStateFile, stateErr)
	}
	if code != 0 {
		summarize(ctx, c.Config, runID)
		return &cli.ExitError{Code: code, Err: fmt.Errorf("automatic run %s %s; see potato-dispatch status %s %s", runID, outcome(code), c.Config, runID)}
	}
	if !c.Quiet {
		summarize(ctx, c.Config, runID)
	}
	return nil
}
