package rundir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Remove deletes a finished run whole and refuses a run that is not
// finished or whose dispatch holds it.
func TestRemove(t *testing.T) {
	root, _ := Open(t.TempDir())
	live, err := root.Create(Record{Trainer: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Remove(live.ID); !errors.Is(err, ErrBusy) {
		t.Errorf("Remove of a run its dispatch holds: %v, want ErrBusy", err)
	}
	if err := live.Finish(0); err != nil {
		t.Fatal(err)
	}
	if err := root.Remove(live.ID); !errors.Is(err, ErrBusy) {
		t.Errorf("Remove of a finished run its dispatch still holds: %v, want ErrBusy", err)
	}
	live.Close()

	// A run whose dispatch is gone without exit_code is not finished.
	lost, err := root.Create(Record{Trainer: "t"})
	if err != nil {
		t.Fatal(err)
	}
	lost.Close()
	if err := root.Remove(lost.ID); err == nil || !strings.Contains(err.Error(), "no exit_code") {
		t.Errorf("Remove of a run without exit_code: %v", err)
	}

	os.MkdirAll(filepath.Join(live.Dir, ArtifactsDir, "model"), 0o755)
	os.WriteFile(filepath.Join(live.Dir, ArtifactsDir, "model", "weights"), []byte("w"), 0o644)
	if err := root.Remove(live.ID); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(root.Dir, "runs"))
	if len(entries) != 1 || entries[0].Name() != lost.ID {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("runs/ after Remove: %q, want only %s", names, lost.ID)
	}
	if err := root.Remove(live.ID); err != nil {
		t.Errorf("Remove of a run that is gone: %v", err)
	}
}

// latest/<schema> is a relative link to a run's artifacts, replaced by
// rename: the old link is never missing on the way.
func TestSetLatest(t *testing.T) {
	root, _ := Open(t.TempDir())
	if id, err := root.Latest("sentiment"); err != nil || id != "" {
		t.Errorf("Latest with no link: %q %v", id, err)
	}
	const a, b = "20261203T151024-6ad8dd", "20261203T161024-0a0b0c"
	for _, id := range []string{a, b} {
		os.MkdirAll(filepath.Join(root.RunDir(id), ArtifactsDir), 0o755)
		os.WriteFile(filepath.Join(root.RunDir(id), ArtifactsDir, "model.json"), []byte(id), 0o644)
	}
	if err := root.SetLatest("sentiment", a); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root.LatestLink("sentiment"), "model.json")); string(got) != a {
		t.Errorf("latest/sentiment/model.json = %q, want run %s's", got, a)
	}
	if err := root.SetLatest("sentiment", b); err != nil {
		t.Fatal(err)
	}
	target, _ := os.Readlink(root.LatestLink("sentiment"))
	if target != "../runs/"+b+"/artifacts" {
		t.Errorf("link target %q", target)
	}
	if id, err := root.Latest("sentiment"); err != nil || id != b {
		t.Errorf("Latest = %q %v, want %s", id, err, b)
	}
	entries, _ := os.ReadDir(filepath.Join(root.Dir, LatestDir))
	if len(entries) != 1 {
		t.Errorf("latest/ holds %d entries, want the one link (no temporary left)", len(entries))
	}
	for _, bad := range []string{"", "a/b", ".hidden", "../x"} {
		if err := root.SetLatest(bad, b); err == nil {
			t.Errorf("SetLatest(%q) made a link", bad)
		}
	}
}
