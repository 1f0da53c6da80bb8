package testproject

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// WriteSources makes a Potato project in dir of two real corpora side by
// side, the emails of testdata/spamassassin and the reviews of
// examples/reviews (both read from the repository at root), every item
// labelled in the radio schema "source": "email" or "review". A model
// tells them apart from a few dozen of each, so that its learning curve
// is flat from there on. config.yaml's model_training block ends with
// extra; it returns the config's path.
func WriteSources(t T, dir, root, extra string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "examples", "reviews", "data", "reviews.json"))
	must(t, err)
	var reviews []struct{ ID, Text string }
	must(t, json.Unmarshal(b, &reviews))
	must(t, os.MkdirAll(filepath.Join(dir, "data"), 0o755))
	data, err := os.Create(filepath.Join(dir, "data", "texts.jsonl"))
	must(t, err)
	enc := json.NewEncoder(data)
	state := map[string]any{}
	add := func(id, text, source string) {
		must(t, enc.Encode(map[string]string{"id": id, "text": text}))
		state[id] = []any{[]any{map[string]string{"schema": "source", "name": source}, "true"}}
	}
	for _, e := range Emails(t, root) {
		add(e.ID, e.Text, "email")
	}
	for _, r := range reviews {
		add(r.ID, r.Text, "review")
	}
	must(t, data.Close())
	writeAnnotator(t, dir, state)
	cfg := filepath.Join(dir, "config.yaml")
	must(t, os.WriteFile(cfg, []byte(`annotation_task_name: "Sources"
task_dir: "."
data_files: ["data/texts.jsonl"]
item_properties: {id_key: id, text_key: text}
output_annotation_dir: annotation_output
annotation_schemes:
  - {annotation_type: radio, name: source, labels: [email, review]}
model_training:
  enabled: true
  grace_seconds: 30
`+extra), 0o644))
	return cfg
}
