package main

import (
	"encoding/json"
	"fmt"

	"potato-training/internal/cli"
	"potato-training/lib/dispatch"
)

type latestCmd struct {
	Config  string `arg:"" help:"The project's config file."`
	Schema  string `help:"Only runs that trained this schema."`
	Trainer string `help:"Only runs of this trainer."`
	JSON    bool   `name:"json" help:"Print the run as a JSON object."`
}

// Run prints the newest successful run: its id and its model's directory,
// separated by a tab, or a JSON object; exit 1 when there is none.
func (c *latestCmd) Run(ctx *cli.Context) error {
	r, err := dispatch.Latest(c.Config, c.Schema, c.Trainer)
	if err != nil {
		return exitError(err)
	}
	if c.JSON {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(ctx.Stdout, "%s\n", b)
		return err
	}
	_, err = fmt.Fprintf(ctx.Stdout, "%s\t%s\n", r.RunID, r.Artifacts)
	return err
}
