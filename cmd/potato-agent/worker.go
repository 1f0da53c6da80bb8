package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"sync"
	"syscall"

	// The SQLite driver: decision-calibrate, a built-in trainer that this
	// command runs, reads Potato's store (lib/trainer/calibrate).
	_ "modernc.org/sqlite"

	"potato-training/internal/cli"
	"potato-training/lib/agent"
	"potato-training/lib/trainer"
)

type workerCmd struct {
	Spec string `required:"" help:"The run's spec.json." type:"path"`
}

// Run runs the trainer; SIGTERM stops it at its next checkpoint (exit 4),
// and so does a standard output that nobody reads any more.
func (c *workerCmd) Run(ctx *cli.Context) error {
	sctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	wctx, cancel := context.WithCancel(sctx)
	defer cancel()
	out := &eventsOut{w: ctx.Stdout, stderr: ctx.Stderr, stop: cancel}
	return exitError(trainer.RunWorker(wctx, c.Spec, out))
}

// eventsOut is the worker's standard output, its events. Once a write
// meets a pipe whose reader is gone (EPIPE: the agent or the dispatch that
// read them has died), nobody will ever see the fit's end: the fit stops
// at its next checkpoint, as on SIGTERM, and cleans up as a cancelled one
// does, rather than train on for nobody (or die of the SIGPIPE, before
// its cleanup, as it did until potato-agent caught the signal).
type eventsOut struct {
	w      io.Writer
	stderr io.Writer
	stop   context.CancelFunc
	once   sync.Once
}

func (e *eventsOut) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if errors.Is(err, syscall.EPIPE) {
		e.once.Do(func() {
			fmt.Fprintln(e.stderr, "potato-agent worker: nobody reads the events on standard output any more (the pipe is closed): stopping the fit")
			e.stop()
		})
	}
	return n, err
}

type execCmd struct {
	MaxRAMMB int      `name:"max-ram-mb" required:"" help:"Address-space limit (RLIMIT_AS) in MB."`
	Command  []string `arg:"" passthrough:"" help:"The program and its arguments."`
}

// Run replaces this process with the program, under the limit.
func (c *execCmd) Run(ctx *cli.Context) error {
	return exitError(agent.ExecLimited(c.MaxRAMMB, c.Command))
}
