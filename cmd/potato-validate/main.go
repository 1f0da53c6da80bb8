// Command potato-validate checks a Potato project config's model_training
// block; see potato-validate(1).
package main

import (
	"errors"
	"os"

	"github.com/alecthomas/kong"

	"potato-training/internal/cli"
	"potato-training/lib/config"
	"potato-training/lib/validate"
)

type command struct {
	Config  string           `arg:"" help:"The project's config file (config.yaml)."`
	Strict  bool             `help:"Fail on warnings too." env:"POTATO_VALIDATE_STRICT"`
	JSON    bool             `name:"json" help:"Print the report as JSON: {file, errors, warnings, acknowledged}."`
	Version kong.VersionFlag `help:"Print the version and exit."`
}

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

func run() int {
	return cli.Main("potato-validate", "Check a Potato project config's model_training block (errors, warnings, acknowledged warnings).",
		"potato-validate(1)", &command{}, cli.OSEnv())
}

func main() { os.Exit(run()) }
