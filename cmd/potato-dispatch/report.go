package main

import (
	"encoding/json"
	"fmt"

	"potato-training/internal/cli"
	"potato-training/lib/dispatch"
	"potato-training/lib/report"
)

type reportCmd struct {
	Config string `arg:"" help:"The project's config file."`
	RunID  string `name:"run" help:"Report on this run's prelabels instead of each schema's published run."`
	Schema string `name:"schema" help:"Only this schema."`
	JSON   bool   `name:"json" help:"Print the report as JSON."`
}

// Run prints how annotators took the published prelabels: of the items a
// run predicted while they were unlabeled and that annotators labelled
// since, the share of labels equal to the prelabel, per schema, label and
// annotator, with each annotator's automation-bias test and the flags;
// and beside them the run's precision as the reviewers of Potato's model
// review judged its prelabels (report.ReviewRule).
func (c *reportCmd) Run(ctx *cli.Context) error {
	cfg, err := dispatch.LoadConfig(c.Config)
	if err != nil {
		return exitError(err)
	}
	if _, ok := cfg.Scheme(c.Schema); c.Schema != "" && !ok {
		return exitError(&dispatch.UsageError{Err: fmt.Errorf("schema %q is not in the config's annotation_schemes", c.Schema)})
	}
	a, err := report.BuildAcceptance(cfg, report.Options{RunID: c.RunID, Schema: c.Schema})
	if err != nil {
		return exitError(err)
	}
	if c.JSON {
		return printJSON(ctx, a)
	}
	return report.WriteAcceptance(ctx.Stdout, a)
}

type explainCmd struct {
	Config string `arg:"" help:"The project's config file."`
	Item   string `arg:"" name:"item-id" help:"The item's id, as item_properties.id_key gives it."`
	JSON   bool   `name:"json" help:"Print the explanation as JSON."`
}

// Run prints, per schema, the item's prelabel and confidence, the run that
// made it with its held-out score and bundle digest, and the annotators'
// labels now. An item with no prelabel and no label exits 1.
func (c *explainCmd) Run(ctx *cli.Context) error {
	cfg, err := dispatch.LoadConfig(c.Config)
	if err != nil {
		return exitError(err)
	}
	e, err := report.Explain(cfg, c.Item)
	if err != nil {
		return exitError(err)
	}
	if c.JSON {
		return printJSON(ctx, e)
	}
	return report.WriteExplanation(ctx.Stdout, e)
}

func printJSON(ctx *cli.Context, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(ctx.Stdout, "%s\n", b)
	return err
}
