package main

import (
	"fmt"

	"potato-training/internal/cli"
	"potato-training/lib/dispatch"
)

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
