// Command potato-agent is the far side of a run. This version has its
// worker part: potato-agent worker runs a built-in trainer; see
// potato-agent(1).
package main

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"

	"potato-training/internal/cli"
	"potato-training/lib/trainer"
)

type workerCmd struct {
	Spec string `required:"" help:"The run's spec.json." type:"path"`
}

// Run runs the trainer; SIGTERM stops it at its next checkpoint (exit 4).
func (c *workerCmd) Run(ctx *cli.Context) error {
	sctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return cli.Exit(trainer.Worker(sctx, c.Spec, ctx.Stdout, ctx.Stderr))
}

type execCmd struct {
	MaxRAMMB int      `name:"max-ram-mb" required:"" help:"Address-space limit (RLIMIT_AS) in MB."`
	Command  []string `arg:"" passthrough:"" help:"The program and its arguments."`
}

// Run sets RLIMIT_AS and replaces this process with the program, so the
// limit applies from the program's first instruction.
func (c *execCmd) Run(ctx *cli.Context) error {
	if len(c.Command) > 0 && c.Command[0] == "--" {
		c.Command = c.Command[1:]
	}
	if len(c.Command) == 0 {
		return cli.Failf(cli.ExitUsage, "exec: no program given")
	}
	path, err := exec.LookPath(c.Command[0])
	if err != nil {
		return cli.Failf(cli.ExitUsage, "exec: %v", err)
	}
	lim := uint64(c.MaxRAMMB) << 20
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: lim, Max: lim}); err != nil {
		return cli.Failf(cli.ExitNo, "exec: setting RLIMIT_AS: %v", err)
	}
	err = syscall.Exec(path, c.Command, os.Environ())
	return cli.Failf(126, "exec: %s: %v", path, err)
}

type command struct {
	Worker  workerCmd        `cmd:"" help:"Run a built-in trainer for a spec.json, writing v1 events on standard output."`
	Exec    execCmd          `cmd:"" hidden:"" help:"Run a program under an address-space limit."`
	Version kong.VersionFlag `help:"Print the version and exit."`
}

func main() {
	os.Exit(cli.Main("potato-agent", "The far side of a training run; potato-agent worker runs a built-in trainer.",
		"potato-agent(1)", &command{}, cli.OSEnv()))
}
