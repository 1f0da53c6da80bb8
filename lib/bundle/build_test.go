package bundle_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// Build reads the data once: the items with votes wait in a hidden file
// while the votes are resolved, and the others' texts are copied into
// unlabeled.jsonl as the data has them. What it writes is as before
// (every item once with its text, the labelled ones in their splits in
// data order, the others unlabeled), and the hidden file is gone from the
// bundle it leaves.
func TestBuildLeavesOnlyTheBundle(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.ReadConfigFile(testproject.Write(t, dir, 60, 25, ""))
	if err != nil {
		t.Fatal(err)
	}
	bdir := filepath.Join(dir, "bundle")
	m, err := bundle.Build(cfg, bdir, []string{"sentiment"})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(bdir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"manifest.json", "test.jsonl", "train.jsonl", "unlabeled.jsonl", "val.jsonl"}; !slices.Equal(names, want) {
		t.Errorf("the bundle holds %q, want %q", names, want)
	}
	texts := map[string]string{}
	b, err := os.ReadFile(filepath.Join(dir, "data", "items.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		var it struct{ ID, Text string }
		if err := json.Unmarshal([]byte(line), &it); err != nil {
			t.Fatal(err)
		}
		texts[it.ID] = it.Text
	}
	seen := map[string]string{}
	for split := range m.Splits {
		b, err := os.ReadFile(filepath.Join(bdir, split+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		last := 0
		for line := range strings.Lines(string(b)) {
			var row struct {
				ID      string         `json:"instance_id"`
				Text    *string        `json:"text"`
				Targets map[string]any `json:"targets"`
			}
			if err := json.Unmarshal([]byte(line), &row); err != nil {
				t.Fatal(err)
			}
			if row.Text == nil || *row.Text != texts[row.ID] || row.Targets == nil {
				t.Errorf("%s: row %s", split, line)
			}
			if prev, dup := seen[row.ID]; dup {
				t.Fatalf("%s in %s and %s", row.ID, prev, split)
			}
			seen[row.ID] = split
			n, _ := strconv.Atoi(strings.TrimPrefix(row.ID, "r"))
			labelled := n <= 25
			if labelled == (split == bundle.UnlabeledSplit) {
				t.Errorf("item %s (labelled: %v) in split %s", row.ID, labelled, split)
			}
			if n < last {
				t.Errorf("%s: %s after r%d, not in data order", split, row.ID, last)
			}
			last = n
		}
	}
	if len(seen) != 60 {
		t.Errorf("%d items in the bundle, want 60", len(seen))
	}
}
