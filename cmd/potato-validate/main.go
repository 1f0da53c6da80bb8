// Command potato-validate checks a Potato project config's model_training
// block; see potato-validate(1).
package main

import (
	"os"

	"github.com/alecthomas/kong"

	"potato-training/internal/cli"
)

type command struct {
	Config  string           `arg:"" help:"The project's config file (config.yaml)."`
	Strict  bool             `help:"Fail on warnings too." env:"POTATO_VALIDATE_STRICT"`
	JSON    bool             `name:"json" help:"Print the report as JSON: {file, errors, warnings, acknowledged}."`
	Version kong.VersionFlag `help:"Print the version and exit."`
}

func run() int {
	return cli.Main("potato-validate", "Check a Potato project config's model_training block (errors, warnings, acknowledged warnings).",
		"potato-validate(1)", &command{}, cli.OSEnv())
}

func main() { os.Exit(run()) }
