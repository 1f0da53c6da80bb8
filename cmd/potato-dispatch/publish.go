package main

import (
	"fmt"

	"potato-training/internal/cli"
	"potato-training/lib/dispatch"
)

type publishCmd struct {
	Config string `arg:"" help:"The project's config file."`
	RunID  string `arg:"" name:"run-id" help:"The successful run whose predictions to publish."`
}

// Run publishes a successful run's predictions as prelabels by hand,
// whatever the promotion gate (writeback.promote: if_better) decided.
func (c *publishCmd) Run(ctx *cli.Context) error {
	s, err := dispatch.Publish(c.Config, c.RunID)
	if err != nil {
		return exitError(err)
	}
	_, err = fmt.Fprintln(ctx.Stdout, s)
	return err
}
