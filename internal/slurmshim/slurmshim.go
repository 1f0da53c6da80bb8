// Package slurmshim implements potato-slurm-shim(1): a stand-in for
// SLURM's sbatch, squeue, scancel and scontrol that runs each job as a
// local process group, its state in the directory $POTATO_SLURM_SHIM_DIR.
package slurmshim

import (
	"fmt"
	"maps"
	"slices"

	"potato-training/internal/cli"
)

// Name is the binary's name; sbatch restarts it as "Name _supervise ID".
const Name = "potato-slurm-shim"

// imitated are the SLURM commands, by the name they are called under.
var imitated = map[string]func(*proc, []string) int{
	"sbatch": runSbatch, "squeue": runSqueue, "scancel": runScancel, "scontrol": runScontrol,
}

// Imitated lists the SLURM commands the shim stands in for, sorted.
func Imitated() []string {
	return slices.Sorted(maps.Keys(imitated))
}

// Imitates says whether name is one of the Imitated commands.
func Imitates(name string) bool {
	_, ok := imitated[name]
	return ok
}

// Imitate runs the SLURM command name with args (without the command's
// name), as SLURM's own does: its messages, usage and exit statuses,
// not the toolkit's. It returns the exit status.
func Imitate(name string, env cli.Env, args []string) int {
	f, ok := imitated[name]
	if !ok {
		fmt.Fprintf(env.Stderr, "%s: error: %q is not a command the shim imitates\n", Name, name)
		return cli.ExitUsage
	}
	return f(&proc{name, env.Stdin, env.Stdout, env.Stderr}, args)
}
