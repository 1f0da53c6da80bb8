package testproject

import (
	"path/filepath"
	"testing"

	"potato-training/lib/rundir"
)

// Project writes a project of n items, labelled of them labelled, in a
// new temporary directory (see Write), and returns the directory and the
// config's path.
func Project(t testing.TB, n, labelled int, extra string) (dir, cfg string) {
	t.Helper()
	dir = t.TempDir()
	return dir, Write(t, dir, n, labelled, extra)
}

// AutoProject is a project of 60 items, 40 of them labelled by one
// annotator, with auto_retrain set by extra (indented under it).
func AutoProject(t testing.TB, extra string) (dir, cfg string) {
	t.Helper()
	return Project(t, 60, 40, "  auto_retrain:\n    trainer: tfidf-logreg\n    schemas: [sentiment]\n"+extra)
}

// Root is the training directory of the project in dir.
func Root(dir string) *rundir.Root {
	return &rundir.Root{Dir: filepath.Join(dir, "annotation_output", "training")}
}

// Read reads a run of the project in dir.
func Read(t T, dir, id string) rundir.Info {
	t.Helper()
	info, err := Root(dir).Read(id)
	if err != nil {
		t.Fatal(err)
	}
	return info
}
