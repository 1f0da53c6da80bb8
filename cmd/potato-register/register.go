package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"potato-training/internal/cli"
	"potato-training/lib/agentproto"
	"potato-training/lib/config"
	"potato-training/lib/dispatch"
)

// instructions is what a registration prints: the backend, the token and
// the server's URL. The token goes to the training machine's environment
// through read, which keeps it out of the shell's history; no line to
// copy holds it.
const instructions = `Token for backend '%[1]s' (shown once; registering again replaces it):

  %[2]s

On the training machine:

  # paste the token at the prompt of read: it is not echoed, nor kept in the shell's history
  read -rs POTATO_TRAINING_TOKEN && export POTATO_TRAINING_TOKEN
  potato training agent --server %[3]s --backend %[1]s
`

// fileInstructions is what a registration with --token-file prints: the
// backend, the file and the server's URL, never the token.
const fileInstructions = `Token for backend '%[1]s' written to %[2]s (mode 0600; registering again replaces it).

On the training machine:

  # with the file copied there (scp -p keeps its mode)
  potato training agent --server %[3]s --backend %[1]s --token-file %[4]s
`

func (c *command) Run(ctx *cli.Context) error {
	server, insecure, err := serverURL(c.Server)
	if err != nil {
		return cli.Failf(cli.ExitUsage, "%v", err)
	}
	if insecure {
		fmt.Fprintf(ctx.Stderr, "%s: warning: --server %s is plain http: the agent's token would cross the network in the clear; serve https (potato-server --tls-cert, or a reverse proxy) and register with --server https://...\n", ctx.Name, c.Server)
	}
	cfg, err := dispatch.LoadConfig(c.Config)
	if err != nil {
		return cli.Failf(cli.ExitUsage, "%v", err)
	}
	if err := cfg.BackendError(c.Backend); err != nil {
		return cli.Failf(cli.ExitUsage, "%v", err)
	}
	b, ok := cfg.Backend(c.Backend)
	if !ok {
		return cli.Failf(cli.ExitUsage, "no backend %q in %s", c.Backend, c.Config).
			WithHint("an agent backend is an entry of model_training.backends with type: agent")
	}
	if b.Type != config.TypeAgent {
		return cli.Failf(cli.ExitUsage, "backend %s is of type %s: only agent backends take a token", b.Name, b.Type).
			WithHint("local, ssh and slurm backends need none: the server starts their agent itself")
	}
	root, err := dispatch.Root(cfg)
	if err != nil {
		return err
	}
	if c.TokenFile == "" {
		// The token goes to standard output and nowhere else: the record
		// keeps its SHA-256 only.
		token, err := root.IssueToken(b.Name, time.Now())
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(ctx.Stdout, instructions, b.Name, token, server)
		return err
	}
	// The file is made before the token is issued, so that a path that
	// cannot be written issues nothing and the old token goes on working.
	tf, err := newTokenFile(c.TokenFile)
	if err != nil {
		return cli.Failf(cli.ExitNo, "--token-file %s: %v; no token was issued", c.TokenFile, err)
	}
	defer tf.abandon()
	token, err := root.IssueToken(b.Name, time.Now())
	if err != nil {
		return err
	}
	if err := tf.commit(token); err != nil {
		return cli.Failf(cli.ExitNo, "--token-file %s: %v; the token was issued but not kept, and the old one no longer works", c.TokenFile, err).
			WithHint("register again once the file can be written")
	}
	_, err = fmt.Fprintf(ctx.Stdout, fileInstructions, b.Name, c.TokenFile, server, filepath.Base(c.TokenFile))
	return err
}

// serverURL is the --server URL, checked, or https://HOSTNAME:8000, the
// port potato-server listens on by default (with --tls-cert, https). It
// returns what follows the agent's --server: a plain http:// URL of a
// host outside loopback, which potato-agent refuses unless told, gets
// --insecure-http after it, and insecure set.
func serverURL(s string) (arg string, insecure bool, err error) {
	if s == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "localhost"
		}
		return "https://" + host + ":8000", false, nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", false, fmt.Errorf("--server %q: use a URL such as https://annotate.example.org:8000", s)
	}
	arg = strings.TrimRight(s, "/")
	if u.Scheme == "http" && !agentproto.IsLoopbackHost(u.Hostname()) {
		return arg + " --insecure-http", true, nil
	}
	return arg, false, nil
}
