// Command potato-agent is the far side of a run: the agent that claims
// jobs, and potato-agent worker, which runs a built-in trainer; see
// potato-agent(1).
package main

import (
	"os"

	"github.com/alecthomas/kong"

	"potato-training/internal/cli"
)

type command struct {
	Agent   agentCmd         `cmd:"" default:"withargs" help:"Claim jobs from the server and run them (the default)."`
	Worker  workerCmd        `cmd:"" help:"Run a built-in trainer for a spec.json, writing v1 events on standard output."`
	Exec    execCmd          `cmd:"" hidden:"" help:"Run a program under an address-space limit."`
	Send    sendCmd          `cmd:"" name:"send-tree" hidden:"" help:"Write a directory's regular files as a tar stream on standard output (the ssh backend's copy back)."`
	Version kong.VersionFlag `help:"Print the version and exit."`
}

func main() {
	surviveClosedStreams()
	env := cli.OSEnv()
	stderr := newStderrLog(env.Stderr)
	env.Stderr = stderr
	code := cli.Main("potato-agent", "The far side of a training run; potato-agent worker runs a built-in trainer.",
		"potato-agent(1)", &command{}, env)
	stderr.Close(exitFlush)
	os.Exit(code)
}
