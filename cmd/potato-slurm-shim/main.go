// Command potato-slurm-shim stands in for SLURM's sbatch, squeue, scancel
// and scontrol, running each job as a local process group; see
// potato-slurm-shim(1).
package main

import (
	"os"
	"path/filepath"
)

const shimName = "potato-slurm-shim"

// imitated are the SLURM commands, by the name they are called under.
var imitated = map[string]func(*proc, []string) int{
	"sbatch": runSbatch, "squeue": runSqueue, "scancel": runScancel, "scontrol": runScontrol,
}

func run() int {
	env := osEnv()
	name := filepath.Base(os.Args[0])
	if f, ok := imitated[name]; ok {
		return f(&proc{name, env.Stdin, env.Stdout, env.Stderr}, env.Args)
	}
	if len(env.Args) > 0 {
		if f, ok := imitated[env.Args[0]]; ok {
			return f(&proc{env.Args[0], env.Stdin, env.Stdout, env.Stderr}, env.Args[1:])
		}
	}
	return shimMain(env)
}

func main() { os.Exit(run()) }
