package main

import (
	"potato-training/internal/cli"
	"potato-training/lib/dispatch"
)

type statusCmd struct {
	Config string `arg:"" help:"The project's config file."`
	RunID  string `arg:"" optional:"" name:"run-id" help:"Show this run in detail."`
	JSON   bool   `name:"json" help:"Print run.json records as JSON."`
	Lines  int    `default:"10" help:"Lines of the run log shown with a run id."`
}

func (c *statusCmd) Run(ctx *cli.Context) error {
	return exitError(dispatch.Status(ctx.Stdout, dispatch.StatusOptions{ConfigPath: c.Config, RunID: c.RunID, JSON: c.JSON, LogLines: c.Lines}))
}
