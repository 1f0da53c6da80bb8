// Command potato-register issues the token of an agent backend and prints
// it once; see potato-register(1).
package main

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"potato-training/internal/cli"
	"potato-training/lib/config"
	"potato-training/lib/dispatch"
)

type command struct {
	Backend string           `arg:"" help:"The agent backend, a name under model_training.backends."`
	Config  string           `arg:"" help:"The project's config file."`
	Server  string           `placeholder:"URL" help:"The server's URL as the training machine reaches it; http://HOSTNAME:8000 when left out." env:"POTATO_TRAINING_SERVER"`
	Version kong.VersionFlag `help:"Print the version and exit."`
}

// instructions is SPEC G3's text, word for word: the backend, the token
// (twice) and the server's URL.
const instructions = `Token for backend '%[1]s' (shown once; registering again replaces it):

  %[2]s

On the training machine:

  export POTATO_TRAINING_TOKEN=%[2]s
  potato training agent --server %[3]s --backend %[1]s
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
	// The token goes to standard output and nowhere else: the record keeps
	// its SHA-256 only.
	token, err := root.IssueToken(b.Name, time.Now())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(ctx.Stdout, instructions, b.Name, token, server)
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

func main() {
	os.Exit(cli.Main("potato-register", "Issue an agent backend's token and print it once, with the commands to run on the training machine.",
		"potato-register(1)", &command{}, cli.OSEnv()))
}
