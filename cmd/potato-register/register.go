package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"potato-training/internal/cli"
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
	server, err := serverURL(c.Server)
	if err != nil {
		return cli.Failf(cli.ExitUsage, "%v", err)
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

// serverURL is the --server URL, checked, or http://HOSTNAME:8000, the
// address potato-server listens on by default.
func serverURL(s string) (string, error) {
	if s == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "localhost"
		}
		return "http://" + host + ":8000", nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--server %q: use a URL such as http://annotate.example.org:8000", s)
	}
	return strings.TrimRight(s, "/"), nil
}
