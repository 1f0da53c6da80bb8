package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

// potato training run --detach=true goes through the front command to
// potato-dispatch: the id comes back at once, the run goes on in the
// background, and it is the one run.
func TestTrainingRunDetachTrue(t *testing.T) {
	dir := t.TempDir()
	r := &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir, Config: testproject.Write(t, dir, 40, 30, "")}
	gate := filepath.Join(dir, "go")
	trainer := testproject.Trainer(t, dir, `while [ ! -e '`+gate+`' ]; do sleep 0.05; done
`+testproject.ResultLines)

	// The bound guards against a command that never returns, never a
	// speed target.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(r.Bin, "potato"), "training", "run", r.Config,
		"--trainer", trainer, "--schemas", "sentiment", "--detach=true")
	cmd.Env = append(os.Environ(), "PATH="+r.Bin+":"+os.Getenv("PATH"))
	code, stdout, stderr := testproject.Exec(t, cmd)
	if ctx.Err() != nil {
		t.Fatal("potato training run --detach=true did not return within 60 s")
	}
	id := strings.TrimSpace(stdout)
	if code != 0 || !rundir.ValidID(id) || stderr != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 0 and the run id alone", code, stdout, stderr)
	}
	if info := r.Info(id); info.Finished {
		t.Fatalf("the run is over (%s) before its trainer was let go", info.State)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if info := r.Wait(id, 60*time.Second); info.State != rundir.StateSuccess {
		t.Fatalf("state %s: %s", info.State, info.Error)
	}
	entries, err := os.ReadDir(filepath.Join(r.Root().Dir, "runs"))
	if err != nil || len(entries) != 1 {
		t.Errorf("run directories %v (%v), want the one run", entries, err)
	}
}
