package main

import (
	"context"
	"os/signal"
	"syscall"

	"potato-training/internal/cli"
	"potato-training/lib/agent"
	"potato-training/lib/trainer"
)

type workerCmd struct {
	Spec string `required:"" help:"The run's spec.json." type:"path"`
}

// Run runs the trainer; SIGTERM stops it at its next checkpoint (exit 4).
func (c *workerCmd) Run(ctx *cli.Context) error {
	sctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return exitError(trainer.RunWorker(sctx, c.Spec, ctx.Stdout))
}

type execCmd struct {
	MaxRAMMB int      `name:"max-ram-mb" required:"" help:"Address-space limit (RLIMIT_AS) in MB."`
	Command  []string `arg:"" passthrough:"" help:"The program and its arguments."`
}

// Run replaces this process with the program, under the limit.
func (c *execCmd) Run(ctx *cli.Context) error {
	return exitError(agent.ExecLimited(c.MaxRAMMB, c.Command))
}
