// Command potato-dispatch takes one training run from start to finish;
// see potato-dispatch(1).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/alecthomas/kong"

	"potato-training/internal/cli"
	"potato-training/lib/dispatch"
	"potato-training/lib/trainer"
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
		Params: params, RunID: c.RunID, Trigger: c.Trigger,
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
					stopProgress = dispatch.ShowProgress(root, id, tty)
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

type cancelCmd struct {
	Config string `arg:"" help:"The project's config file."`
	RunID  string `arg:"" name:"run-id" help:"The run to cancel."`
}

func (c *cancelCmd) Run(ctx *cli.Context) error {
	return exitError(dispatch.Cancel(c.Config, c.RunID))
}

type statusCmd struct {
	Config string `arg:"" help:"The project's config file."`
	RunID  string `arg:"" optional:"" name:"run-id" help:"Show this run in detail."`
	JSON   bool   `name:"json" help:"Print run.json records as JSON."`
	Lines  int    `default:"10" help:"Lines of the run log shown with a run id."`
}

func (c *statusCmd) Run(ctx *cli.Context) error {
	return exitError(dispatch.Status(ctx.Stdout, dispatch.StatusOptions{ConfigPath: c.Config, RunID: c.RunID, JSON: c.JSON, LogLines: c.Lines}))
}

type writebackCmd struct {
	Config string `arg:"" help:"The project's config file."`
	RunID  string `arg:"" name:"run-id" help:"The finished run to write to Potato's store."`
}

// Run writes a finished run's row, items and predictions to Potato's
// store again, such as a run that ended with store_failed; it is
// idempotent.
func (c *writebackCmd) Run(ctx *cli.Context) error {
	s, err := dispatch.Writeback(c.Config, c.RunID)
	if err != nil {
		return exitError(err)
	}
	fmt.Fprintln(ctx.Stdout, s)
	return nil
}

// exitError maps lib/dispatch's errors to exit statuses: 2 for a usage
// error, 1 for anything else.
func exitError(err error) error {
	var ue *dispatch.UsageError
	switch {
	case errors.As(err, &ue):
		return cli.Failf(cli.ExitUsage, "%v", err)
	case err != nil:
		return cli.Failf(cli.ExitNo, "%v", err)
	}
	return nil
}

type command struct {
	Run       runCmd           `cmd:"" help:"Start a run; print its id at once; wait for its end unless --detach."`
	Cancel    cancelCmd        `cmd:"" help:"Cancel a run."`
	Status    statusCmd        `cmd:"" help:"Show the runs, or one run."`
	Wait      waitCmd          `cmd:"" help:"Wait for runs to end; exit with the first failed one's status."`
	Latest    latestCmd        `cmd:"" help:"Print the newest successful run's id and model directory (exit 1 when none)."`
	Auto      autoCmd          `cmd:"" help:"Start a run when model_training.auto_retrain calls for one and wait for its end (for cron)."`
	Writeback writebackCmd     `cmd:"" help:"Write a finished run's row and predictions to Potato's store again (after store_failed)."`
	Retract   retractCmd       `cmd:"" help:"Delete a finished run's prelabels from Potato's store; the run stays."`
	Version   kong.VersionFlag `help:"Print the version and exit."`
}

func main() {
	os.Exit(cli.Main("potato-dispatch", "Take a training run from start to finish: queue, bundle, backend, limits, write-back.",
		"potato-dispatch(1)", &command{}, cli.OSEnv(),
		// The trainers of --trainer's help come from the registry, as its
		// "unknown trainer" error does.
		kong.Vars{"trainers": trainer.Choices()}))
}

// summarize prints the outcome of a run waited for on standard error: the
// held-out score and where the prelabels went.
func summarize(ctx *cli.Context, configPath, id string) {
	r, err := dispatch.Summary(configPath, id)
	if err == nil && r != "" {
		fmt.Fprintf(ctx.Stderr, "potato-dispatch: %s\n", r)
	}
}
