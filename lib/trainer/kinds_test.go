package trainer

import (
	"testing"

	"potato-training/lib/config"
)

// TestKindRefusal: the refusal reads the registry's kinds, names what the
// trainer learns, and what would learn the schema.
func TestKindRefusal(t *testing.T) {
	for _, c := range []struct {
		trainer string
		s       config.Scheme
		want    string
	}{
		{"tfidf-logreg", config.Scheme{Name: "r", AnnotationType: "likert", Kind: config.KindOrdinal}, ""},
		{"hf-text-classification", config.Scheme{Name: "r", AnnotationType: "likert", Kind: config.KindOrdinal}, ""},
		{"exec:/bin/true", config.Scheme{Name: "w", AnnotationType: "text", Kind: config.KindOther}, ""},
		{"tfidf-logreg", config.Scheme{Name: "w", AnnotationType: "text", Kind: config.KindOther},
			"schema w is a text schema (kind other): tfidf-logreg learns radio, select, multiselect and likert schemas; no trainer of this version learns text and the other types schemas (kind other): an exec:PROGRAM trainer of your own, given them in the bundle (potato-events(5)), can"},
		{"hf-text-classification", config.Scheme{Name: "n", AnnotationType: "number", Kind: config.KindContinuous},
			"schema n is a number schema (kind continuous): hf-text-classification learns radio, select, multiselect and likert schemas; no trainer of this version learns slider and number schemas (kind continuous): an exec:PROGRAM trainer of your own, given them in the bundle (potato-events(5)), can"},
		{"decision-calibrate", config.Scheme{Name: "m", AnnotationType: "multiselect", Kind: config.KindMultilabel},
			"schema m is a multiselect schema (kind multilabel): decision-calibrate learns radio and select schemas; tfidf-logreg and hf-text-classification learn multiselect schemas"},
	} {
		if got := KindRefusal(c.trainer, c.s); got != c.want {
			t.Errorf("%s on %s:\n got %q\nwant %q", c.trainer, c.s.AnnotationType, got, c.want)
		}
	}
}
