package main

import (
	"context"
	"fmt"
	"net"
	"os/signal"
	"syscall"
	"time"

	"potato-training/internal/cli"
	"potato-training/lib/rundir"
	"potato-training/lib/server"
	"potato-training/lib/trainer"
	"potato-training/lib/validate"
)

func (c *command) Run(ctx *cli.Context) error {
	cfg, report, err := validate.File(c.Config)
	if err != nil {
		return cli.Failf(cli.ExitUsage, "%v", err)
	}
	// SPEC V2, V3: errors stop the server at start-up; warnings and notes
	// are printed.
	for _, p := range report.Warnings {
		fmt.Fprintf(ctx.Stderr, "potato-server: warning: %s:%d: %s\n", c.Config, p.Line, p.Message)
	}
	for _, p := range report.Notes {
		fmt.Fprintf(ctx.Stderr, "potato-server: note: %s:%d: %s\n", c.Config, p.Line, p.Message)
	}
	if len(report.Errors) > 0 {
		for _, p := range report.Errors {
			fmt.Fprintf(ctx.Stderr, "potato-server: %s:%d: error: %s\n", c.Config, p.Line, p.Message)
		}
		return cli.Failf(cli.ExitUsage, "%s has %d error(s): not starting", c.Config, len(report.Errors))
	}
	root, err := rundir.Open(cfg.TrainingDir())
	if err != nil {
		return cli.Failf(cli.ExitNo, "%v", err)
	}
	disp, err := trainer.FindProgram("potato-dispatch")
	if err != nil {
		return cli.Failf(cli.ExitNo, "%v", err)
	}
	check, err := trainer.FindProgram("potato-check")
	if err != nil {
		return cli.Failf(cli.ExitNo, "%v", err)
	}
	s := &server.Server{ConfigPath: c.Config, Config: cfg, Root: root, Dispatch: disp, Check: check,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(ctx.Stderr, "%s potato-server: %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
		}}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return cli.Failf(cli.ExitNo, "%v", err)
	}
	sctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Fprintf(ctx.Stderr, "potato-server: serving %s on http://%s\n", c.Config, c.Listen)
	// Serve bounds slow requests and connections (potato-server(1),
	// LIMITS).
	if err := s.Serve(sctx, ln); err != nil {
		return cli.Failf(cli.ExitNo, "%v", err)
	}
	return nil
}
