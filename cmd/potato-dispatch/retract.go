package main

import (
	"encoding/json"
	"fmt"

	"potato-training/internal/cli"
	"potato-training/lib/dispatch"
)

type retractCmd struct {
	Config string `arg:"" help:"The project's config file."`
	RunID  string `arg:"" name:"run-id" help:"The finished run whose prelabels to delete."`
	JSON   bool   `name:"json" help:"Print {\"run_id\", \"retracted\", \"by_schema\", \"store\"} as JSON."`
}

// Run deletes a finished run's prelabels from Potato's store, as Potato's
// DELETE .../runs/<id>/predictions does; the run and its row stay.
func (c *retractCmd) Run(ctx *cli.Context) error {
	r, err := dispatch.Retract(c.Config, c.RunID)
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
	_, err = fmt.Fprintf(ctx.Stdout, "run %s: %s retracted from %s; the run stays in training_runs\n", r.RunID, r.Retraction, r.Store)
	return err
}
