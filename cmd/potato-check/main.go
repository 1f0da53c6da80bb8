// Command potato-check tells whether a run can start on a backend now;
// see potato-check(1).
package main

import (
	"context"
	"os"

	"github.com/alecthomas/kong"

	"potato-training/internal/cli"
	"potato-training/lib/check"
	"potato-training/lib/dispatch"
	"potato-training/lib/gpu"
)

type command struct {
	Backend string           `arg:"" help:"The backend to check: local or a name under model_training.backends."`
	Config  string           `arg:"" help:"The project's config file."`
	JSON    bool             `name:"json" help:"Print the report as JSON."`
	Version kong.VersionFlag `help:"Print the version and exit."`
}

func (c *command) Run(ctx *cli.Context) error {
	cfg, err := dispatch.LoadConfig(c.Config)
	if err != nil {
		return cli.Failf(cli.ExitUsage, "%v", err)
	}
	if err := cfg.BackendError(c.Backend); err != nil {
		return cli.Failf(cli.ExitUsage, "%v", err)
	}
	b, ok := cfg.Backend(c.Backend)
	if !ok {
		return cli.Failf(cli.ExitUsage, "no backend %q in %s", c.Backend, c.Config)
	}
	r := check.Backend(context.Background(), cfg, b, gpu.Probe{})
	if c.JSON {
		err = check.WriteJSON(ctx.Stdout, r)
	} else {
		err = check.WriteText(ctx.Stdout, r)
	}
	if err != nil {
		return err
	}
	if !r.OK {
		return cli.Exit(cli.ExitNo)
	}
	return nil
}

func main() {
	os.Exit(cli.Main("potato-check", "Tell whether a run can start on a backend now, and on what device.",
		"potato-check(1)", &command{}, cli.OSEnv()))
}
