package main

import (
	"context"
	"strings"
	"time"

	"potato-training/internal/cli"
	"potato-training/lib/backend"
	_ "potato-training/lib/backend/all" // the registry, read below
	"potato-training/lib/check"
	"potato-training/lib/dispatch"
	"potato-training/lib/gpu"
	"potato-training/lib/trainer"
)

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
	d, ok := backend.Lookup(b.Type)
	if !ok {
		return cli.Failf(cli.ExitUsage, "backend %s is of type %s, which this version cannot check", b.Name, b.Type)
	}
	j, err := check.Judge(cfg, d.OnServer, c.Trainer)
	if err != nil {
		return cli.Failf(cli.ExitUsage, "%v", err)
	}
	if len(c.Param) > 0 {
		j.Params = map[string]string{}
		for _, p := range c.Param {
			k, v, ok := strings.Cut(p, "=")
			if !ok || k == "" {
				return cli.Failf(cli.ExitUsage, "--param %q: use KEY=VALUE", p)
			}
			j.Params[k] = v
		}
		if err := trainer.CheckParams(j.Name, j.Params); err != nil {
			return cli.Failf(cli.ExitUsage, "%v", err)
		}
	}
	r := backend.Check(context.Background(), check.Input{Config: cfg, Backend: b, GPU: gpu.Probe{}, Judged: j, Now: time.Now()})
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
