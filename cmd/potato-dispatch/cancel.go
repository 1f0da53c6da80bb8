package main

import (
	"potato-training/internal/cli"
	"potato-training/lib/dispatch"
)

type cancelCmd struct {
	Config string `arg:"" help:"The project's config file."`
	RunID  string `arg:"" name:"run-id" help:"The run to cancel."`
}

func (c *cancelCmd) Run(ctx *cli.Context) error {
	return exitError(dispatch.Cancel(c.Config, c.RunID))
}
