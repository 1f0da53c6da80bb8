package main

import (
	"context"
	"errors"

	"potato-training/internal/cli"
	"potato-training/lib/agent"
	"potato-training/lib/trainer"
)

// ExitCancelled is the status of an agent started with --once whose job
// the server cancelled, as potato-dispatch run's for a cancelled run.
const ExitCancelled = 3

// exitError is the one place where potato-agent's errors become its exit
// statuses (potato-agent(1), EXIT STATUS).
func exitError(err error) error {
	var (
		usage  *agent.UsageError
		worker *trainer.WorkerError
		exec   *agent.ExecFailed
		job    *agent.JobError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &job) && job.Cancelled:
		// The log has said "cancelled"; the status says it to a script.
		return cli.Exit(ExitCancelled)
	case errors.Is(err, context.Canceled):
		// A signal that stops an agent between jobs; a job that failed is
		// exit status 1, even when a signal stopped it (agent.JobError).
		return nil
	case errors.As(err, &usage):
		return cli.Failf(cli.ExitUsage, "%v", err)
	case errors.As(err, &worker):
		// The training process's own exit code (potato-events(5)); a run
		// stopped on request says nothing more.
		if worker.Msg == "" {
			return cli.Exit(worker.Exit)
		}
		return cli.Failf(worker.Exit, "%s", worker.Msg)
	case errors.As(err, &exec):
		return cli.Failf(126, "%v", err)
	}
	return cli.Failf(cli.ExitNo, "%v", err)
}
