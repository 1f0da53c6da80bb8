package main

import (
	"context"
	"os/signal"
	"syscall"

	"potato-training/internal/cli"
	"potato-training/lib/agent"
)

// agentCmd is the agent itself. Started over ssh by a dispatch it gets
// --socket (the remote end of the ssh reverse forward) and reads the run's
// token from the first line of standard input; standard input reaching
// EOF means the ssh session is gone.
type agentCmd struct {
	Server    string `help:"The server: https://HOST:PORT, or unix:PATH (http:// only on loopback, or with --insecure-http)." env:"POTATO_TRAINING_SERVER"`
	Socket    string `help:"The unix socket of a dispatch (ssh and slurm backends); the token is read from standard input."`
	EnvStdin  bool   `name:"env-stdin" help:"With --socket: read the backend's env, a JSON object, from the line of standard input after the token."`
	Backend   string `help:"The backend this agent serves." env:"POTATO_TRAINING_BACKEND"`
	TokenFile string `name:"token-file" help:"File holding the token, mode 0600 or stricter (else $POTATO_TRAINING_TOKEN)." type:"path"`
	Python    string `help:"Interpreter for Python trainers." default:"python3" env:"POTATO_TRAINING_PYTHON"`
	Once      bool   `help:"Exit after one job."`
	Workdir   string `help:"Where jobs are unpacked and run." default:"~/.cache/potato-training" env:"POTATO_TRAINING_WORKDIR"`
	Keep      bool   `help:"Keep each job's bundle."`
	// SLURMConfig makes the agent submit each job's training process with
	// sbatch (SPEC M5, M9): a JSON object of the backend's SLURM keys.
	AllowExec    []string `name:"allow-exec" help:"A program of this machine that a job may name as its trainer (exec:PROGRAM); repeat it for more. Without it a polling agent runs only the toolkit's trainers." type:"path" sep:"none" placeholder:"PROGRAM"`
	InsecureHTTP bool     `name:"insecure-http" help:"Reach a server outside loopback over plain http://, the token in the clear: only on a network you trust."`
	CAFile       string   `name:"ca-file" help:"PEM file of the certificate authorities the https:// server's certificate is checked against (a private CA)." type:"path" env:"POTATO_TRAINING_CA_FILE"`
	SLURMConfig  string   `name:"slurm-config" help:"JSON file of SLURM keys (job_python, partition, gres, time, ...): submit each job with sbatch." type:"path" env:"POTATO_TRAINING_SLURM_CONFIG"`
}

func (c *agentCmd) Run(ctx *cli.Context) error {
	// What the agent and its jobs write (job directories, bundles,
	// models) is the user's alone: 0700 directories, 0600 files.
	syscall.Umask(0o077)
	o, err := agent.Settings{Server: c.Server, Socket: c.Socket, Backend: c.Backend, TokenFile: c.TokenFile,
		Python: c.Python, Once: c.Once, Workdir: c.Workdir, Keep: c.Keep, SLURMConfig: c.SLURMConfig, EnvStdin: c.EnvStdin,
		AllowExec: c.AllowExec, InsecureHTTP: c.InsecureHTTP, CAFile: c.CAFile, Name: ctx.Name}.Options(ctx.Stdin, ctx.Stderr)
	if err != nil {
		return exitError(err)
	}
	sctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	return exitError(agent.Run(sctx, o))
}
