package main

import (
	"os"
	"strings"
	"testing"

	"potato-training/internal/testproject"
	"potato-training/lib/trainer"
)

// TestKindRefusals: a run of a trainer on a schema of a kind it does not
// learn is refused before it is recorded (exit 2), naming the trainers
// that learn the kind, or, for a kind no trainer learns, the kinds none
// learns and what would learn them; an exec: program is given any schema.
func TestKindRefusals(t *testing.T) {
	dir, cfg := testproject.Project(t, 40, 30, "")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	radio := "  - {annotation_type: radio, name: sentiment, labels: [positive, negative]}\n"
	if !strings.Contains(string(b), radio) {
		t.Fatalf("%s has no sentiment schema line", cfg)
	}
	more := radio + "  - {annotation_type: likert, name: mood, size: 5, min_label: low, max_label: high}\n" +
		"  - {annotation_type: text, name: notes}\n"
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), radio, more, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	refused := func(tr, schema string, want ...string) {
		t.Helper()
		r := run(t, "run", cfg, "--trainer", tr, "--schemas", schema)
		if r.code != 2 {
			t.Errorf("%s on %s: exit %d, want 2: %s", tr, schema, r.code, r.stderr)
		}
		for _, w := range want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s on %s: stderr lacks %q:\n%s", tr, schema, w, r.stderr)
			}
		}
	}
	if !trainer.Learns("tfidf-logreg", "ordinal") {
		refused("tfidf-logreg", "sentiment,mood", "schema mood is a likert schema (ordinal): tfidf-logreg learns nominal and multilabel schemas;",
			strings.Join(trainer.ForKind("ordinal"), ", "))
	}
	refused("embed-logreg", "notes", "schema notes is a text schema (other): no trainer of this version learns other schemas;",
		"the kinds no trainer learns are ", "other (text and the rest)", "exec:PROGRAM")
	if infos, _ := testproject.Root(dir).List(); len(infos) != 0 {
		t.Errorf("a refused run was recorded: %+v", infos[0])
	}
}
