package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"potato-training/internal/cli"
	"potato-training/lib/agentproto"
	"potato-training/lib/config"
	"potato-training/lib/rundir"
	"potato-training/lib/server"
	"potato-training/lib/trainer"
	"potato-training/lib/validate"
)

func (c *command) Run(ctx *cli.Context) error {
	// A hang-up (the terminal closed, a reload asked for) must not stop
	// the server: SIGHUP reads the TLS certificate again, and is noted
	// otherwise (onHangUp). Caught from the start, so that none comes
	// before the server listens.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// Nor must the end of whatever reads the log (a pipe into a program
	// that went with the terminal, a journal restarted): a write to a
	// closed standard error then fails instead of killing the process.
	// Caught, not ignored, so that the programs the server starts get
	// SIGPIPE as usual.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
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
	// A weak key is a note of validate, since the tutorial's config holds
	// one; it is here, where the server would face a network, that it
	// stops: such a key is for loopback alone.
	if why := config.WeakAdminKey(cfg.AdminAPIKey); why != "" && !loopbackAddr(c.Listen) {
		return cli.Failf(cli.ExitUsage, "%s: %s, and --listen %s is not loopback: anyone who reaches it could guess the key; set a long random admin_api_key (openssl rand -hex 32), or listen on 127.0.0.1", c.Config, why, c.Listen)
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
	proto := "http"
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return cli.Failf(cli.ExitUsage, "--tls-cert and --tls-key go together")
	}
	if c.TLSCert != "" {
		if s.TLS, err = server.LoadCerts(c.TLSCert, c.TLSKey); err != nil {
			return cli.Failf(cli.ExitUsage, "%v", err)
		}
		proto = "https"
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return cli.Failf(cli.ExitNo, "%v", err)
	}
	sctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go onHangUp(sctx, s, hup)
	fmt.Fprintf(ctx.Stderr, "potato-server: serving %s on %s://%s\n", c.Config, proto, ln.Addr())
	// Serve bounds slow requests and connections (potato-server(1),
	// LIMITS).
	if err := s.Serve(sctx, ln); err != nil {
		return cli.Failf(cli.ExitNo, "%v", err)
	}
	return nil
}

// loopbackAddr reports whether HOST:PORT listens on loopback alone:
// localhost or a loopback address; an empty host or a wildcard is every
// address, a name other than localhost may be any.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return agentproto.IsLoopbackHost(host)
}

// onHangUp answers each SIGHUP: with --tls-cert it reads the certificate
// and key again, as a renewal (certbot's deploy hook, say) asks, and a
// pair that does not load leaves the one in use; without, there is
// nothing to read again (admin_api_key is read as it changes, the rest of
// the config at a restart). Either way the log says so and the server
// goes on.
func onHangUp(ctx context.Context, s *server.Server, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if s.TLS == nil {
				s.Logf("SIGHUP: nothing to read again (no --tls-cert); serving on")
				continue
			}
			if err := s.TLS.Reload(); err != nil {
				s.Logf("SIGHUP: %v; the certificate in use stays", err)
				continue
			}
			s.Logf("SIGHUP: TLS certificate read again (%s, valid until %s)", strings.Join(s.TLS.Names(), ", "), s.TLS.NotAfter())
		}
	}
}
