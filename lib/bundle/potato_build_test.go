package bundle

// The bundle against the released Potato's own: the same project's
// annotations, resolved by Potato 2.12.1's build_bundle (its training
// code, run from the virtual environment scripts/install-deps makes) and
// by Build, give every item the same target in the same split, with
// consensus (Potato's default) and with majority.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"potato-training/internal/testcli"
	"potato-training/lib/config"
)

// potatoPython is the interpreter of the released Potato's virtual
// environment, under $POTATO_TRAINING_VENVS (default /opt/potato-training).
// Without it the test skips, except under CI, where it fails.
func potatoPython(t *testing.T) string {
	t.Helper()
	py, _ := testcli.Venv(t, "potato", "import potato.training.dataset")
	return py
}

// potatoBuild runs Potato's build_bundle on the project of cfgPath into
// dest, with each aggregation, as its training manager does (the export
// context of the config file, the default splits, seed 0).
const potatoBuild = `
import sys
from potato.export.cli import build_export_context
from potato.training.dataset import build_bundle
ctx = build_export_context(sys.argv[1])
for agg in ("consensus", "majority"):
    build_bundle(ctx, sys.argv[2] + "/" + agg, ["mood", "tags"], aggregation=agg)
`

// bundleTargets reads the targets of every split file of a bundle, by
// split and item.
func bundleTargets(t *testing.T, dir string) map[string]map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]map[string]any{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	for _, f := range files {
		split := strings.TrimSuffix(filepath.Base(f), ".jsonl")
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var row struct {
				ID      string         `json:"instance_id"`
				Targets map[string]any `json:"targets"`
			}
			if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if out[split] == nil {
				out[split] = map[string]map[string]any{}
			}
			out[split][row.ID] = row.Targets
		}
		fh.Close()
	}
	return out
}

// TestBuildIsPotatosBuild: seven annotators of unequal care label 240
// items of a radio and a multiselect schema (two to five each, some one),
// and also 60 items that are no longer in the data files (an older data
// file's). Potato's consensus runs Dawid-Skene over the items of the data
// files only, so those votes weigh nothing in it; Build must do the same
// to give the same targets. The test checks that consensus and majority
// disagree on some item, so that it would see the wrong method used.
func TestBuildIsPotatosBuild(t *testing.T) {
	py := potatoPython(t)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 34))
	moods := []string{"calm", "happy", "sad"}
	tags := []string{"x", "y", "z"}
	// Annotator a's chance of giving the true mood; the others are
	// careless in their own way (always "happy" when wrong).
	care := []float64{0.95, 0.9, 0.85, 0.6, 0.45, 0.4, 0.35}
	states := make([]map[string]any, len(care))
	for a := range states {
		states[a] = map[string]any{}
	}
	var data []string
	label := func(id string) {
		truth := moods[rng.IntN(3)]
		n := 2 + rng.IntN(4)
		if rng.IntN(10) == 0 {
			n = 1
		}
		for _, a := range rng.Perm(len(care))[:n] {
			mood := truth
			if rng.Float64() > care[a] {
				mood = "happy"
				if a%2 == 0 {
					mood = moods[rng.IntN(3)]
				}
			}
			// Potato's radio writes either the label's name or "true".
			value := any(mood)
			if a%3 == 0 {
				value = "true"
			}
			pairs := []any{[]any{map[string]string{"schema": "mood", "name": mood}, value}}
			for _, tg := range tags {
				if rng.IntN(3) == 0 || (tg == "x" && truth == "sad" && rng.Float64() < care[a]) {
					pairs = append(pairs, []any{map[string]string{"schema": "tags", "name": tg}, tg})
				}
			}
			states[a][id] = pairs
		}
	}
	for i := range 240 {
		id := fmt.Sprintf("item%03d", i)
		b, _ := json.Marshal(map[string]string{"id": id, "text": "text of " + id})
		data = append(data, string(b))
		label(id)
	}
	for i := range 60 {
		label(fmt.Sprintf("gone%03d", i))
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data", "items.jsonl"), []byte(strings.Join(data, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for a, st := range states {
		name := fmt.Sprintf("ann%d", a)
		if err := os.MkdirAll(filepath.Join(dir, "annotation_output", name), 0o755); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]any{"user_id": name, "instance_id_to_label_to_value": st})
		if err := os.WriteFile(filepath.Join(dir, "annotation_output", name, "user_state.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfgText := `annotation_task_name: agg
task_dir: "."
data_files: ["data/items.jsonl"]
item_properties: {id_key: id, text_key: text}
output_annotation_dir: annotation_output
annotation_schemes:
  - {annotation_type: radio, name: mood, labels: [calm, happy, sad]}
  - {annotation_type: multiselect, name: tags, labels: [x, y, z]}
model_training:
  enabled: true
`
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}

	theirs := filepath.Join(t.TempDir(), "potato")
	cmd := exec.Command(py, "-c", potatoBuild, cfgPath, theirs)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("Potato's build_bundle: %v\n%s", err, out)
	}

	got := map[string]map[string]map[string]map[string]any{}
	for _, agg := range []string{"consensus", "majority"} {
		cfg, err := config.ReadConfigFile(cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		if agg == "consensus" && cfg.Training.Aggregation != "consensus" {
			t.Errorf("model_training.aggregation left out is %q, want Potato's default consensus", cfg.Training.Aggregation)
		}
		cfg.Training.Aggregation = agg
		ours := filepath.Join(t.TempDir(), agg)
		if _, err := Build(cfg, ours, []string{"mood", "tags"}); err != nil {
			t.Fatal(err)
		}
		want := bundleTargets(t, filepath.Join(theirs, agg))
		got[agg] = bundleTargets(t, ours)
		for _, split := range []string{"train", "val", "test"} {
			g, w := got[agg][split], want[split]
			if len(w) == 0 {
				t.Fatalf("%s: Potato's %s split is empty", agg, split)
			}
			for _, id := range slices.Sorted(func(yield func(string) bool) {
				for id := range w {
					if !yield(id) {
						return
					}
				}
				for id := range g {
					if _, ok := w[id]; !ok && !yield(id) {
						return
					}
				}
			}) {
				if !reflect.DeepEqual(g[id], w[id]) {
					t.Errorf("%s, %s split, %s: ours %v, Potato's %v", agg, split, id, g[id], w[id])
				}
			}
		}
	}
	differ := 0
	for split, items := range got["consensus"] {
		for id, tg := range items {
			if !reflect.DeepEqual(tg["mood"], got["majority"][split][id]["mood"]) {
				differ++
			}
		}
	}
	if differ == 0 {
		t.Error("consensus and majority agree on every item: the test cannot tell them apart")
	}
	t.Logf("consensus and majority give %d items a different mood", differ)
}
