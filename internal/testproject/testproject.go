// Package testproject writes small Potato projects and fake trainers for
// the tests of the dispatch and the backends.
package testproject

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"potato-training/internal/testcli"
)

// T is the part of testing.TB these helpers use, so a benchmark program
// can use them too.
type T interface {
	Helper()
	Fatal(args ...any)
}

// Write makes a project in dir: n items with two labels, one annotator
// labelling the first labelled of them, and config.yaml, whose
// model_training block ends with extra. It returns the config's path.
func Write(t T, dir string, n, labelled int, extra string) string {
	t.Helper()
	words := map[string][]string{
		"positive": {"great", "lovely", "excellent", "wonderful", "superb", "delight"},
		"negative": {"awful", "terrible", "broken", "rude", "dirty", "refund"},
	}
	var items []string
	state := map[string]any{}
	for i := 1; i <= n; i++ {
		label := "positive"
		if i%2 == 0 {
			label = "negative"
		}
		w := words[label]
		text := fmt.Sprintf("the stay was %s and %s, item %d %s", w[i%6], w[(i+2)%6], i, w[(i+4)%6])
		b, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("r%d", i), "text": text})
		items = append(items, string(b))
		if i <= labelled {
			state[fmt.Sprintf("r%d", i)] = []any{[]any{map[string]string{"schema": "sentiment", "name": label}, "true"}}
		}
	}
	must(t, os.MkdirAll(filepath.Join(dir, "data"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "data", "items.jsonl"), []byte(strings.Join(items, "\n")+"\n"), 0o644))
	writeAnnotator(t, dir, state)
	cfg := filepath.Join(dir, "config.yaml")
	text := `annotation_task_name: "Test Project"
task_dir: "."
data_files: ["data/items.jsonl"]
item_properties: {id_key: id, text_key: text}
output_annotation_dir: annotation_output
annotation_schemes:
  - {annotation_type: radio, name: sentiment, labels: [positive, negative]}
pre_annotation: {enabled: true}
model_training:
  enabled: true
  grace_seconds: 1
  writeback:
    schemas: [sentiment]
    include_unlabeled: true
    min_confidence: 0.5
` + extra
	must(t, os.WriteFile(cfg, []byte(text), 0o644))
	return cfg
}

// writeAnnotator writes the user_state.json of annotator "ann" under the
// project's annotation_output, as Potato does: state maps each instance id
// to its [{"schema", "name"}, value] pairs.
func writeAnnotator(t T, dir string, state map[string]any) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(dir, "annotation_output", "ann"), 0o755))
	b, _ := json.Marshal(map[string]any{"user_id": "ann", "instance_id_to_label_to_value": state})
	must(t, os.WriteFile(filepath.Join(dir, "annotation_output", "ann", "user_state.json"), b, 0o644))
}

// Trainer writes a shell script standing in for a training process, so a
// test can make one misbehave on purpose, and returns its trainer name
// (exec:PATH). The script is readable and runnable by every user.
func Trainer(t T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "trainer.sh")
	testcli.WriteExecutable(t, p, []byte("#!/bin/sh\n"+body+"\n"))
	return "exec:" + p
}

// SetAPIKey gives the project's config an admin_api_key, the key of
// potato-server's HTTP API and page.
func SetAPIKey(t T, cfg, key string) {
	t.Helper()
	text, err := os.ReadFile(cfg)
	must(t, err)
	must(t, os.WriteFile(cfg, append([]byte("admin_api_key: "+key+"\n"), text...), 0o644))
}

// ResultLines is the end of a fake trainer that succeeds: an empty
// predictions file and a result event.
const ResultLines = `mkdir -p artifacts; : > artifacts/predictions.jsonl
echo '{"v":1,"event":"result","status":"success","predictions_file":"predictions.jsonl","n_predictions":0}'`

func must(t T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// WaitFor polls cond until it holds. Its bound of 90 s is a guard against
// a hang, never a speed target.
func WaitFor(t T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for " + what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
