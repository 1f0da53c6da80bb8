package main

import (
	"cmp"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"potato-training/internal/cli"
	"potato-training/lib/agentproto"
	"potato-training/lib/atomicfile"
	"potato-training/lib/backend"
	_ "potato-training/lib/backend/all" // the registry, read below
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
	srv, err := serverURL(c.Server, os.Getenv)
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
	if !backend.Of(b).Tokens {
		return cli.Failf(cli.ExitUsage, "backend %s is of type %s: only agent backends take a token", b.Name, b.Type).
			WithHint("local, ssh and slurm backends need none: the server starts their agent itself")
	}
	// What keeps the agent's line from working goes to standard error
	// before that line is printed.
	for _, w := range srv.warnings(c.Config, cfg.AdminAPIKey) {
		fmt.Fprintf(ctx.Stderr, "%s: %s\n", ctx.Name, w)
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
		_, err = fmt.Fprintf(ctx.Stdout, instructions, b.Name, token, srv.arg)
		return err
	}
	// The file is made before the token is issued, so that a path that
	// cannot be written issues nothing and the old token goes on working.
	tf, err := atomicfile.CreateSecret(c.TokenFile)
	if err != nil {
		return cli.Failf(cli.ExitNo, "--token-file %s: %v; no token was issued", c.TokenFile, err)
	}
	defer tf.Abort()
	token, err := root.IssueToken(b.Name, time.Now())
	if err != nil {
		return err
	}
	if _, err := io.WriteString(tf, token+"\n"); err == nil {
		err = tf.Commit()
	}
	if err != nil {
		return cli.Failf(cli.ExitNo, "--token-file %s: %v; the token was issued but not kept, and the old one no longer works", c.TokenFile, err).
			WithHint("register again once the file can be written")
	}
	_, err = fmt.Fprintf(ctx.Stdout, fileInstructions, b.Name, c.TokenFile, srv.arg, filepath.Base(c.TokenFile))
	return err
}

// The environment potato-server reads for the defaults of --listen,
// --tls-cert (potato-server(1), ENVIRONMENT), and the default of --listen.
const (
	listenVar     = "POTATO_SERVER_LISTEN"
	tlsCertVar    = "POTATO_SERVER_TLS_CERT"
	defaultListen = "127.0.0.1:8000"
)

// server is the server's URL as the agent's line gives it, and where it
// came from.
type server struct {
	// arg is what follows the agent's --server: the URL, and
	// --insecure-http after a plain http:// URL of a host outside
	// loopback, which potato-agent refuses without it.
	arg string
	// raw is the URL as given, or as made.
	raw string
	url *url.URL
	// given is set when --server (or POTATO_TRAINING_SERVER) named the
	// URL; else it is the one potato serve listens with in this
	// environment, listening on listen.
	given  bool
	listen string
}

// serverURL is the --server URL s, checked; or, when s is empty, the URL
// potato serve listens with when started in this environment (getenv):
// https when POTATO_SERVER_TLS_CERT names a certificate, else http; the
// port of POTATO_SERVER_LISTEN, else 8000; the host of
// POTATO_SERVER_LISTEN, or this machine's name when that host is a
// wildcard or loopback (or the default, 127.0.0.1): the agent runs on
// another machine.
func serverURL(s string, getenv func(string) string) (*server, error) {
	if s != "" {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--server %q: use a URL such as https://annotate.example.org:8000", s)
		}
		return newServer(s, strings.TrimRight(s, "/"), u, true, ""), nil
	}
	listen := getenv(listenVar)
	if listen == "" {
		listen = defaultListen
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port == "" {
		return nil, fmt.Errorf("%s=%q, which potato serve would listen on, is not HOST:PORT; set it as potato serve has it, or give --server", listenVar, listen)
	}
	scheme := "http"
	if getenv(tlsCertVar) != "" {
		scheme = "https"
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() || agentproto.IsLoopbackHost(host) {
		host = hostname()
	}
	u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port)}
	return newServer(u.String(), u.String(), u, false, listen), nil
}

func newServer(raw, s string, u *url.URL, given bool, listen string) *server {
	arg := s
	if u.Scheme == "http" && !agentproto.IsLoopbackHost(u.Hostname()) {
		arg += " --insecure-http"
	}
	return &server{arg: arg, raw: raw, url: u, given: given, listen: listen}
}

// hostname is this machine's name, or localhost when it has none.
func hostname() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "localhost"
}

// warnings are the lines, "warning: ..." and "hint: ...", that say what
// keeps the agent's line from working, or from being safe, on a machine
// other than this one: a weak admin_api_key in the config at cfgPath,
// with which potato serve listens on loopback alone; potato serve's
// address in this environment, when it is loopback; plain http. An agent
// on this machine (a --server on loopback) gets none.
func (s *server) warnings(cfgPath, adminKey string) []string {
	if agentproto.IsLoopbackHost(s.url.Hostname()) {
		return nil
	}
	var out []string
	port := s.url.Port()
	if !s.given || port == "" {
		_, port, _ = net.SplitHostPort(cmp.Or(s.listen, defaultListen))
	}
	anywhere := net.JoinHostPort("0.0.0.0", port)
	listenHost, _, _ := net.SplitHostPort(s.listen)
	if why := config.WeakAdminKey(adminKey); why != "" {
		out = append(out,
			fmt.Sprintf("warning: %s: %s, with which potato serve listens on loopback alone: no agent on another machine can reach it", cfgPath, why),
			fmt.Sprintf("hint: set a long random admin_api_key in %s (openssl rand -hex 32), then start potato serve %s --listen %s", cfgPath, cfgPath, anywhere))
	} else if !s.given && agentproto.IsLoopbackHost(listenHost) {
		from := "by default"
		if s.listen != defaultListen {
			from = "as " + listenVar + " says"
		}
		out = append(out,
			fmt.Sprintf("warning: potato serve listens on %s %s, where no agent on another machine can reach it", s.listen, from),
			fmt.Sprintf("hint: start it with --listen %s, and register with %s=%s, or with --server and the URL the training machine reaches", anywhere, listenVar, anywhere))
	}
	if s.url.Scheme == "http" {
		what := "--server " + s.raw
		if !s.given {
			what = s.raw + ", potato serve's URL here,"
		}
		out = append(out, fmt.Sprintf("warning: %s is plain http: the agent's token would cross the network in the clear; serve https (potato-server --tls-cert, or a reverse proxy) and register with --server https://...", what))
	}
	return out
}
