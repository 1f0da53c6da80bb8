package main

import (
	"fmt"
	"strings"

	"potato-training/internal/cli"
	"potato-training/lib/curve"
	"potato-training/lib/dispatch"
	"potato-training/lib/rundir"
)

type curveCmd struct {
	Config   string   `arg:"" help:"The project's config file."`
	Trainer  string   `help:"Trainer: ${trainers}." env:"POTATO_TRAINER"`
	Schemas  []string `sep:"," help:"Schemas to train on, comma-separated." env:"POTATO_SCHEMAS"`
	Points   string   `default:"${curve_points}" help:"The points: percentages of each schema's labelled train items, rising." env:"POTATO_CURVE_POINTS"`
	Draws    int      `help:"Nested draws of the train items to fit at each point, 1 to 20; the trainer's default when left out (8 for tfidf-logreg and embed-logreg, 3 for hf-text-classification and for an exec: program)." env:"POTATO_CURVE_DRAWS"`
	Backend  string   `help:"Backend to run on; model_training.backend when left out." env:"POTATO_BACKEND"`
	Param    []string `help:"Trainer parameter KEY=VALUE; may be repeated." placeholder:"KEY=VALUE" sep:"none"`
	RunID    string   `name:"run-id" help:"Use this run id instead of a new one."`
	Show     string   `placeholder:"RUN" help:"Print the curve of this finished curve run; start nothing."`
	JSON     bool     `name:"json" help:"Print the curve as JSON, run.json's curve."`
	Detach   bool     `help:"Print the run id and return; the run goes on in the background."`
	Detached bool     `hidden:""`
}

// Run starts a learning curve's run, one run as potato-dispatch run starts
// one, waits for its end and prints the curve; with --show it prints the
// curve of a run that has ended.
func (c *curveCmd) Run(ctx *cli.Context) error {
	if c.Show != "" {
		return c.print(ctx, c.Show)
	}
	if c.Trainer == "" || len(c.Schemas) == 0 {
		return cli.Failf(cli.ExitUsage, "give --trainer and --schemas, or --show RUN")
	}
	points, err := curve.ParsePoints(c.Points)
	if err != nil {
		return cli.Failf(cli.ExitUsage, "--points %q: %v", c.Points, err)
	}
	if c.Draws != 0 {
		if err := curve.CheckDraws(c.Draws); err != nil {
			return cli.Failf(cli.ExitUsage, "--draws %d: %v", c.Draws, err)
		}
	}
	r := &runCmd{Config: c.Config, Trainer: c.Trainer, Schemas: c.Schemas, Backend: c.Backend, Param: c.Param,
		RunID: c.RunID, Detach: c.Detach, Detached: c.Detached, curve: points, curveDraws: c.Draws}
	r.report = func(id string, code int) error {
		if code != 0 {
			return nil
		}
		fmt.Fprintln(ctx.Stderr, "potato-dispatch: a learning curve publishes no prelabels")
		return c.print(ctx, id)
	}
	return r.Run(ctx)
}

// print writes the curve of run id to stdout: the report, or its JSON.
func (c *curveCmd) print(ctx *cli.Context, id string) error {
	rec, err := dispatch.CurveOf(c.Config, id)
	if err != nil {
		return exitError(err)
	}
	if rec.State != rundir.StateSuccess || len(rec.Curve.Schemas) == 0 {
		return cli.Failf(cli.ExitNo, "run %s is %s: it has no curve to print", id, rec.State)
	}
	if c.JSON {
		return rundir.WriteJSON(ctx.Stdout, rec.Curve)
	}
	fmt.Fprintf(ctx.Stdout, "learning curve of run %s, trainer %s: macro-F1 and each label's F1 on the test split at %s%% of the train split\n\n",
		id, rec.Trainer, curvePoints(rec.Curve.Points))
	return curve.Write(ctx.Stdout, *rec.Curve)
}

func curvePoints(ps []float64) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = curve.Format(p)
	}
	return strings.Join(s, ",")
}
