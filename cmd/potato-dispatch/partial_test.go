package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

// TestPartialModelRemoved: a trainer killed before it could clean up (it
// kills itself with SIGKILL once it has saved half a model under
// .partial-, as the SIGKILL after a cancel's grace would) leaves nothing
// half written in artifacts/: the dispatch removes the .partial- entries
// and says so in the run log; what else the trainer wrote stays.
func TestPartialModelRemoved(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	tr := trainerProgram(t, dir, `mkdir -p artifacts/.partial-model-sentiment artifacts/kept
echo half > artifacts/.partial-model-sentiment/model.safetensors
echo whole > artifacts/kept/notes.txt
kill -9 $$`)
	r := run(t, "run", cfg, "--trainer", tr, "--schemas", "sentiment")
	id := strings.TrimSpace(r.stdout)
	info := testproject.Read(t, dir, id)
	if r.code == 0 || info.State != rundir.StateError {
		t.Fatalf("exit %d, %s\n%s", r.code, info.State, runLog(t, dir, id))
	}
	entries, _ := os.ReadDir(filepath.Join(testproject.Root(dir).RunDir(id), rundir.ArtifactsDir))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "kept" {
		t.Errorf("artifacts/ holds %v, want [kept]", names)
	}
	if log := runLog(t, dir, id); !strings.Contains(log, "removed artifacts/.partial-model-sentiment, which the trainer left unfinished") {
		t.Errorf("the run log does not say it:\n%s", log)
	}
}
