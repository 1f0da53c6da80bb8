package slurmshim

import (
	"slices"
	"strings"
	"testing"

	"potato-training/internal/cli"
)

// TestImitate checks the dispatch main relies on: the four SLURM names,
// each answering --version as SLURM does, and a refusal of any other name.
func TestImitate(t *testing.T) {
	if got, want := Imitated(), []string{"sbatch", "scancel", "scontrol", "squeue"}; !slices.Equal(got, want) {
		t.Fatalf("Imitated() = %q, want %q", got, want)
	}
	for _, name := range Imitated() {
		if !Imitates(name) {
			t.Errorf("Imitates(%q) = false", name)
		}
		var out, errb strings.Builder
		env := cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb}
		if code := Imitate(name, env, []string{"--version"}); code != 0 || out.String() != slurmVersion+"\n" {
			t.Errorf("%s --version: exit %d, stdout %q, stderr %q", name, code, out.String(), errb.String())
		}
	}
	var out, errb strings.Builder
	env := cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb}
	if Imitates("srun") {
		t.Error(`Imitates("srun") = true`)
	}
	code := Imitate("srun", env, nil)
	if want := `potato-slurm-shim: error: "srun" is not a command the shim imitates` + "\n"; code != cli.ExitUsage || out.Len() != 0 || errb.String() != want {
		t.Errorf("srun: exit %d, stdout %q, stderr %q; want exit 2, stderr %q", code, out.String(), errb.String(), want)
	}
}
