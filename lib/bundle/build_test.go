package bundle_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/internal/testproject"
	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

// A build that fails midway (here a data file with a broken line after
// the first items; a full disk alike) removes the half-written bundle.
func TestFailedBuildRemovesTheBundle(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.ReadConfigFile(testproject.Write(t, dir, 50, 20, ""))
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data", "items.jsonl")
	b, _ := os.ReadFile(data)
	if err := os.WriteFile(data, append(b, "{broken\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	bdir := filepath.Join(dir, "bundle")
	if _, err := bundle.Build(cfg, bdir, []string{"sentiment"}); err == nil || !strings.Contains(err.Error(), "line 51") {
		t.Fatalf("Build of a broken data file: %v", err)
	}
	if _, err := os.Stat(bdir); !os.IsNotExist(err) {
		t.Errorf("the half-written bundle stays: %v", err)
	}
}
