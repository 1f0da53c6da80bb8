package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/lib/config"
)

// FuzzValidateFile reads arbitrary bytes as a project's config.yaml, as
// potato-validate does. It must not panic; a file it can read gives a
// report and never a Go error; every finding has a message and a line;
// a config with decoding problems is not valid; and the report prints
// as text and as JSON.
func FuzzValidateFile(f *testing.F) {
	if b, err := os.ReadFile("../../examples/reviews/config.yaml"); err == nil {
		f.Add(b)
	}
	laughs := "a: &a [x, x, x, x, x, x, x, x, x]\n"
	for i, prev := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		name := string(rune('b' + i))
		laughs += fmt.Sprintf("%s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n", name, name, prev, prev, prev, prev, prev, prev, prev, prev, prev)
	}
	for _, s := range []string{
		"", "annotation_task_name: x\n", "- a\n- b\n", "model_training: 3\n",
		"model_training:\n  enabled: true\n  backend: gpu\n  backends:\n    gpu: {type: ssh, host: g, gpus: \"0,1\", time: \"7:00:00\"}\n",
		"model_training:\n  backends:\n    c: {type: slurm, host: l, remote_dir: /x, time: \"2-00:00:00\", partition: gpu}\n    lab: {type: agent}\n",
		"model_training:\n  splits: {train: 0.9, val: 0.2}\n  writeback: {schemas: [s], min_confidence: 2}\n",
		"model_training:\n  auto_retrain: {enabled: true, trainer: tfidf-logreg, params: {c: 1}}\nvalidation:\n  acknowledge: [\"is long on a shared cluster\"]\n",
		"model_training:\n  max_wall_seconds: 1e999\n  retain_runs: -1\n  device: cuda:99\n",
		laughs + "model_training:\n  backends: *h\n",
		"x: &m {type: ssh, host: h}\nmodel_training:\n  backends: {a: *m, b: *m}\n",
		"annotation_task_name: caf\xe9\n", strings.Repeat("[", 20000), "\ufeffa: 1\n", "a: !!binary gIGC\n",
		"model_training:\n  backends:\n    gpu: {type: ssh, host: g}\n    gpu: {type: ssh, host: h}\n",
		"model_training: &a {backends: *a}\n",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		c, r, err := File(p)
		if err != nil {
			var re *config.ReadError
			if !errors.As(err, &re) {
				t.Fatalf("%q: error %v is not a ReadError", b, err)
			}
			return
		}
		if len(c.Problems) > 0 && r.Valid(false) {
			t.Fatalf("%q: %d decoding problems and the report is valid", b, len(c.Problems))
		}
		for _, list := range [][]Finding{r.Errors, r.Warnings, r.Acknowledged} {
			for _, fd := range list {
				if fd.Message == "" || fd.Line < 0 || fd.File != p {
					t.Fatalf("%q: finding %+v", b, fd)
				}
			}
		}
		var text, js bytes.Buffer
		if err := WriteText(&text, r, false); err != nil {
			t.Fatal(err)
		}
		if err := WriteJSON(&js, r); err != nil || !json.Valid(js.Bytes()) {
			t.Fatalf("%q: JSON report %q: %v", b, js.Bytes(), err)
		}
	})
}
