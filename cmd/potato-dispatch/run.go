package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"potato-training/internal/cli"
	"potato-training/lib/dispatch"
)

type runCmd struct {
	Config   string   `arg:"" help:"The project's config file."`
	Trainer  string   `required:"" help:"Trainer: ${trainers}." env:"POTATO_TRAINER"`
	Schemas  []string `required:"" sep:"," help:"Schemas to train on, comma-separated." env:"POTATO_SCHEMAS"`
	Backend  string   `help:"Backend to run on; model_training.backend when left out." env:"POTATO_BACKEND"`
	Param    []string `help:"Trainer parameter KEY=VALUE; may be repeated." placeholder:"KEY=VALUE" sep:"none"`
	RunID    string   `name:"run-id" help:"Use this run id instead of a new one."`
	Trigger  string   `default:"manual" enum:"manual,api,auto,cron" help:"Who started the run: manual, api, auto or cron." env:"POTATO_TRIGGER"`
	Detach   bool     `help:"Print the run id and return; the run goes on in the background."`
	Detached bool     `hidden:""`

	// curve, set by potato-dispatch curve, makes the run a learning
	// curve's, with curveDraws draws (0: the trainer's default); report
	// prints it once the run has ended.
	curve      []float64
	curveDraws int
	report     func(id string, code int) error
}

func (c *runCmd) Run(ctx *cli.Context) error {
	params := map[string]string{}
	for _, p := range c.Param {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return cli.Failf(cli.ExitUsage, "--param %q: use KEY=VALUE", p)
		}
		params[k] = v
	}
	// The background run itself never detaches again.
	if c.Detach && !c.Detached {
		return detach(ctx, c)
	}
	sctx, stop := context.WithCancel(context.Background())
	defer stop()
	var runID string
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	ids := make(chan string, 1)
	// On a terminal, one line rewritten in place shows where the run is;
	// elsewhere (a pipe, a file, cron) nothing but the id and the summary.
	stopProgress := func() {}
	defer func() { stopProgress() }()
	go func() {
		id := <-ids
		for range sigs {
			// A signal to the dispatch cancels the run gracefully; it is
			// recorded as cancelled.
			_ = dispatch.Cancel(c.Config, id)
		}
	}()
	code, err := dispatch.Run(sctx, dispatch.Options{
		ConfigPath: c.Config, Trainer: c.Trainer, Schemas: c.Schemas, Backend: c.Backend,
		Params: params, RunID: c.RunID, Trigger: c.Trigger, Curve: c.curve, CurveDraws: c.curveDraws,
		Started: func(id string) {
			runID = id
			fmt.Fprintln(ctx.Stdout, id)
			if f, ok := ctx.Stdout.(*os.File); ok {
				_ = f.Sync()
			}
			ids <- id
			if c.Detached {
				detachedStarted()
			} else if tty, ok := ctx.Stderr.(*os.File); ok && dispatch.IsTerminal(tty) {
				if root, err := dispatch.OpenRoot(c.Config); err == nil {
					stopProgress = dispatch.ShowProgress(root, id, tty, "potato-dispatch: ")
				}
			}
		},
	})
	stopProgress()
	if err != nil {
		return exitError(err)
	}
	if !c.Detached {
		summarize(ctx, c.Config, runID)
		if c.report != nil {
			if err := c.report(runID, code); err != nil {
				return err
			}
		}
	}
	if code != 0 && !c.Detached {
		return &cli.ExitError{Code: code, Err: fmt.Errorf("run %s %s; see potato-dispatch status %s %s", runID, outcome(code), c.Config, runID)}
	}
	return cli.Exit(code)
}

func outcome(code int) string {
	if code == dispatch.ExitCancelled {
		return "was cancelled"
	}
	return "failed"
}

// summarize prints the outcome of a run waited for on standard error: the
// held-out score and where the prelabels went.
func summarize(ctx *cli.Context, configPath, id string) {
	r, err := dispatch.Summary(configPath, id)
	if err == nil && r != "" {
		fmt.Fprintf(ctx.Stderr, "potato-dispatch: %s\n", r)
	}
}
