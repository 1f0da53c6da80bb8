// Command potato-agent is the far side of a run: the agent that claims
// jobs, and potato-agent worker, which runs a built-in trainer; see
// potato-agent(1).
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"potato-training/internal/cli"
	"potato-training/lib/agent"
	"potato-training/lib/agentproto"
	"potato-training/lib/slurm"
	"potato-training/lib/trainer"
)

type workerCmd struct {
	Spec string `required:"" help:"The run's spec.json." type:"path"`
}

// Run runs the trainer; SIGTERM stops it at its next checkpoint (exit 4).
func (c *workerCmd) Run(ctx *cli.Context) error {
	sctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return cli.Exit(trainer.Worker(sctx, c.Spec, ctx.Stdout, ctx.Stderr))
}

type execCmd struct {
	MaxRAMMB int      `name:"max-ram-mb" required:"" help:"Address-space limit (RLIMIT_AS) in MB."`
	Command  []string `arg:"" passthrough:"" help:"The program and its arguments."`
}

// Run sets RLIMIT_AS and replaces this process with the program, so the
// limit applies from the program's first instruction.
func (c *execCmd) Run(ctx *cli.Context) error {
	if len(c.Command) > 0 && c.Command[0] == "--" {
		c.Command = c.Command[1:]
	}
	if len(c.Command) == 0 {
		return cli.Failf(cli.ExitUsage, "exec: no program given")
	}
	path, err := exec.LookPath(c.Command[0])
	if err != nil {
		return cli.Failf(cli.ExitUsage, "exec: %v", err)
	}
	lim := uint64(c.MaxRAMMB) << 20
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: lim, Max: lim}); err != nil {
		return cli.Failf(cli.ExitNo, "exec: setting RLIMIT_AS: %v", err)
	}
	err = syscall.Exec(path, c.Command, os.Environ())
	return cli.Failf(126, "exec: %s: %v", path, err)
}

// agentCmd is the agent itself. Started over ssh by a dispatch it gets
// --socket (the remote end of the ssh reverse forward) and reads the run's
// token from the first line of standard input; standard input reaching
// EOF means the ssh session is gone.
type agentCmd struct {
	Server    string `help:"The server: http://HOST:PORT, or unix:PATH." env:"POTATO_TRAINING_SERVER"`
	Socket    string `help:"The unix socket of a dispatch (ssh and slurm backends); the token is read from standard input."`
	Backend   string `help:"The backend this agent serves." env:"POTATO_TRAINING_BACKEND"`
	TokenFile string `name:"token-file" help:"File holding the token, mode 0600 or stricter (else $POTATO_TRAINING_TOKEN)." type:"path"`
	Python    string `help:"Interpreter for Python trainers." default:"python3" env:"POTATO_TRAINING_PYTHON"`
	Once      bool   `help:"Exit after one job."`
	Workdir   string `help:"Where jobs are unpacked and run." default:"~/.cache/potato-training" env:"POTATO_TRAINING_WORKDIR"`
	Keep      bool   `help:"Keep each job's bundle."`
	// SLURMConfig makes the agent submit each job's training process with
	// sbatch (SPEC M5, M9): a JSON object of the backend's SLURM keys.
	SLURMConfig string `name:"slurm-config" help:"JSON file of SLURM keys (job_python, partition, gres, time, ...): submit each job with sbatch." type:"path" env:"POTATO_TRAINING_SLURM_CONFIG"`
}

func (c *agentCmd) Run(ctx *cli.Context) error {
	// Every path is made absolute here, once: jobs run in directories of
	// their own, where a relative one would name something else.
	if err := c.absPaths(); err != nil {
		return cli.Failf(cli.ExitUsage, "%v", err)
	}
	server, token, lost, err := c.credentials(ctx)
	if err != nil {
		return err
	}
	client, err := agentproto.NewClient(server, token)
	if err != nil {
		return cli.Failf(cli.ExitUsage, "%v", err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var so *slurm.Options
	if c.SLURMConfig != "" {
		o, err := slurm.ReadOptions(c.SLURMConfig)
		if err != nil {
			return cli.Failf(cli.ExitUsage, "--slurm-config: %v", err)
		}
		if o.JobPython, err = agent.ProgramPath(o.JobPython); err != nil {
			return cli.Failf(cli.ExitUsage, "--slurm-config: job_python: %v", err)
		}
		so = &o
	}
	sctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	err = agent.Run(sctx, agent.Options{Client: client, Backend: c.Backend, Workdir: c.Workdir, Python: c.Python,
		Once: c.Once, Keep: c.Keep, Worker: self, Lost: lost, Log: ctx.Stderr, Name: ctx.Name, AllowExec: c.Socket != "", SLURM: so, Unreachable: unreachable(),
		Polling: c.Socket == ""})
	// A job that failed is exit status 1, even when a signal stopped it; a
	// signal that stops an agent between jobs is 0.
	if err != nil && !errors.Is(err, context.Canceled) {
		return cli.Failf(cli.ExitNo, "%v", err)
	}
	return nil
}

// absPaths makes the path flags absolute, against the directory the agent
// was started in, and expands a leading ~/. --python stays a name to look
// up on PATH when it has no slash. --socket is left as it is: only the
// agent itself dials it, from where it was started, and a unix socket's
// address has room for 107 bytes, which the absolute form of a short
// relative path can exceed.
func (c *agentCmd) absPaths() error {
	for _, f := range []struct {
		name string
		p    *string
	}{{"--workdir", &c.Workdir}, {"--token-file", &c.TokenFile}, {"--slurm-config", &c.SLURMConfig}} {
		if *f.p == "" {
			continue
		}
		abs, err := agent.AbsPath(*f.p)
		if err != nil {
			return fmt.Errorf("%s %s: %v", f.name, *f.p, err)
		}
		*f.p = abs
	}
	python, err := agent.ProgramPath(c.Python)
	if err != nil {
		return fmt.Errorf("--python %s: %v", c.Python, err)
	}
	c.Python = python
	return nil
}

func (c *agentCmd) credentials(ctx *cli.Context) (server, token string, lost chan struct{}, err error) {
	lost = make(chan struct{})
	switch {
	case c.Socket != "":
		server = "unix:" + c.Socket
		r := bufio.NewReader(ctx.Stdin)
		line, rerr := r.ReadString('\n')
		token = strings.TrimSpace(line)
		if token == "" {
			return "", "", nil, cli.Failf(cli.ExitUsage, "--socket: no token on standard input (%v)", rerr)
		}
		go func() {
			_, _ = io.Copy(io.Discard, r)
			close(lost)
		}()
		return server, token, lost, nil
	case c.Server == "":
		return "", "", nil, cli.Failf(cli.ExitUsage, "give --server URL (or --socket PATH)")
	}
	server = c.Server
	if c.TokenFile != "" {
		token, err = readTokenFile(c.TokenFile)
		if err != nil {
			return "", "", nil, cli.Failf(cli.ExitUsage, "--token-file: %v", err)
		}
	} else {
		token = strings.TrimSpace(os.Getenv("POTATO_TRAINING_TOKEN"))
	}
	if token == "" {
		return "", "", nil, cli.Failf(cli.ExitUsage, "no token: set POTATO_TRAINING_TOKEN or give --token-file")
	}
	return server, token, lost, nil
}

// readTokenFile reads a token file, refusing one that other users could
// read or change, as ssh refuses such a key: chmod 600 it.
func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%q is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%q is readable or writable by group or others (mode %04o): run chmod 600 %q", path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("%q is empty", path)
	}
	return token, nil
}

// unreachable is how long the server may be out of reach during a job;
// POTATO_TRAINING_UNREACHABLE_S shortens G9's 300 s (for tests).
func unreachable() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("POTATO_TRAINING_UNREACHABLE_S")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return agent.DefaultUnreachable
}

func expandHome(p string) string { return agent.ExpandHome(p) }

type command struct {
	Agent   agentCmd         `cmd:"" default:"withargs" help:"Claim jobs from the server and run them (the default)."`
	Worker  workerCmd        `cmd:"" help:"Run a built-in trainer for a spec.json, writing v1 events on standard output."`
	Exec    execCmd          `cmd:"" hidden:"" help:"Run a program under an address-space limit."`
	Send    sendCmd          `cmd:"" name:"send-tree" hidden:"" help:"Write a directory's regular files as a tar stream on standard output (the ssh backend's copy back)."`
	Version kong.VersionFlag `help:"Print the version and exit."`
}

func main() {
	os.Exit(cli.Main("potato-agent", "The far side of a training run; potato-agent worker runs a built-in trainer.",
		"potato-agent(1)", &command{}, cli.OSEnv()))
}
