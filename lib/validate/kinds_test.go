package validate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSchemaKindWarnings: a schema of writeback.schemas that no trainer
// learns is warned of with what would learn it (auto_retrain's trainer on
// a schema it does not learn is an error: cmd/potato-validate's
// kinds.txtar); a likert scale given labels is learnt and shown, one
// given by size is learnt but not pre-selected by Potato.
func TestSchemaKindWarnings(t *testing.T) {
	for _, c := range []struct {
		schema, training, want string // want "": no warning
	}{
		{"{annotation_type: likert, name: s, labels: [bad, ok, good]}", "  writeback: {schemas: [s]}\n", ""},
		{"{annotation_type: likert, name: s, size: 5, min_label: bad, max_label: good}", "  writeback: {schemas: [s]}\n",
			"a likert scale given by size without labels: Potato (2.12.1) pre-selects no prelabel on such a scale"},
		{"{annotation_type: slider, name: s, min_value: 0, max_value: 9, starting_value: 0}", "  writeback: {schemas: [s]}\n",
			"a slider schema: no trainer of this version learns continuous schemas (slider, number); the kinds no trainer learns are"},
		{"{annotation_type: text, name: s}", "  writeback: {schemas: [s]}\n",
			"no trainer of this version learns other schemas (text and the rest)"},
		{"{annotation_type: likert, name: s, labels: [bad, ok, good]}",
			"  auto_retrain: {enabled: true, trainer: tfidf-logreg, schemas: [s]}\n", ""},
	} {
		dir := t.TempDir()
		p := filepath.Join(dir, "config.yaml")
		yaml := "annotation_task_name: t\nannotation_schemes:\n  - " + c.schema + "\nmodel_training:\n  enabled: true\n" + c.training
		if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, r, err := File(p)
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, w := range r.Warnings {
			if strings.Contains(w.Message, "names \"s\"") {
				kinds = append(kinds, w.Message)
			}
		}
		switch {
		case c.want == "" && len(kinds) > 0:
			t.Errorf("%s: warnings %q, want none about the schema", c.schema, kinds)
		case c.want != "" && (len(kinds) != 1 || !strings.Contains(kinds[0], c.want)):
			t.Errorf("%s, %s: warnings %q, want one saying %q", c.schema, strings.TrimSpace(c.training), kinds, c.want)
		}
	}
}
