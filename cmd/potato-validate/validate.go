package main

import (
	"errors"

	"potato-training/internal/cli"
	"potato-training/lib/config"
	"potato-training/lib/validate"
)

func (c *command) Run(ctx *cli.Context) error {
	_, report, err := validate.File(c.Config)
	var re *config.ReadError
	if errors.As(err, &re) {
		return cli.Failf(cli.ExitUsage, "%v", err)
	}
	if c.JSON {
		err = validate.WriteJSON(ctx.Stdout, report)
	} else {
		err = validate.WriteText(ctx.Stdout, report, c.Strict)
	}
	if err != nil {
		return err
	}
	if !report.Valid(c.Strict) {
		return cli.Exit(cli.ExitNo)
	}
	return nil
}
