package main

import (
	"strings"

	"potato-training/lib/trainer"
)

// Help is the detail of run --help: each trainer's parameters, from the
// registry, as run checks --param against them.
func (c *runCmd) Help() string {
	var b strings.Builder
	b.WriteString("Trainer parameters (--param NAME=VALUE), checked before the run is recorded:\n\n")
	for _, i := range trainer.Runnable() {
		b.WriteString("  " + i.Name + ":\n")
		for _, line := range strings.Split(trainer.ParamsHelp(i.Name, true), "\n") {
			b.WriteString("  " + line + "\n")
		}
		b.WriteString("\n")
	}
	b.WriteString("  " + trainer.ExecPrefix + "PROGRAM:\n  " + trainer.ParamsHelp(trainer.ExecPrefix, false) + "\n")
	return b.String()
}
