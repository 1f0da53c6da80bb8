package slurm

import (
	"strings"
	"testing"

	"potato-training/lib/config"
	"potato-training/lib/probe"
)

// A login node without one of sbatch, squeue and scancel is told apart
// from one with all three, each missing command named with what it is
// for (F8).
func TestMissingCommands(t *testing.T) {
	b := &config.Backend{Name: "cluster", Host: "login.example.org"}
	all := probe.Facts{Commands: map[string]string{"sbatch": "/usr/bin/sbatch", "squeue": "/usr/bin/squeue", "scancel": "/usr/bin/scancel"}}
	if got := MissingCommands(b, all); len(got) != 0 {
		t.Errorf("all three present: %q", got)
	}
	none := probe.Facts{Commands: map[string]string{"squeue": "/usr/bin/squeue"}}
	got := MissingCommands(b, none)
	want := []string{"login.example.org has no sbatch on PATH, so it cannot submit jobs",
		"login.example.org has no scancel on PATH, so it cannot cancel its jobs"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got %q, want %q", got, want)
	}
}
