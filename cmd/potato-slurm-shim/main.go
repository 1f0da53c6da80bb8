// Command potato-slurm-shim stands in for SLURM's sbatch, squeue, scancel
// and scontrol, running each job as a local process group; see
// potato-slurm-shim(1).
package main

import (
	"os"
	"path/filepath"

	"potato-training/internal/cli"
	"potato-training/internal/slurmshim"
)

// run picks the command by the name the binary is called under (a link
// named sbatch), then by the first argument (potato-slurm-shim sbatch).
func run() int {
	env := cli.OSEnv()
	if name := filepath.Base(os.Args[0]); slurmshim.Imitates(name) {
		return slurmshim.Imitate(name, env, env.Args)
	}
	if len(env.Args) > 0 && slurmshim.Imitates(env.Args[0]) {
		return slurmshim.Imitate(env.Args[0], env, env.Args[1:])
	}
	return slurmshim.Main(env)
}

func main() { os.Exit(run()) }
