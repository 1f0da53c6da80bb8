package report

import (
	"slices"
	"testing"

	"potato-training/lib/project"
)

func TestExplainSpans(t *testing.T) {
	payload := []byte(`[{"start":10,"end":14,"label":"loc","confidence":0.5},{"start":0,"end":3,"label":"per"}]`)
	labels, ok := spanLabels(payload)
	if !ok || !slices.Equal(labels, []string{"loc 10-14", "per 0-3"}) {
		t.Errorf("spanLabels = %q, %v", labels, ok)
	}
	if _, ok := spanLabels([]byte(`{"label":"per"}`)); ok {
		t.Error("spanLabels took a classification payload")
	}
	same := []project.Span{{Name: "per", Start: 0, End: 3}, {Name: "loc", Start: 10, End: 14}}
	for _, c := range []struct {
		target   any
		same, ok bool
	}{
		{same, true, true},
		{same[:1], false, true},
		{[]project.Span{{Name: "org", Start: 0, End: 3}, {Name: "loc", Start: 10, End: 14}}, false, true},
		{[]project.Span{{Name: "per", Start: 0, End: 4}, {Name: "loc", Start: 10, End: 14}}, false, true},
		{nil, false, true},
		{"per", false, false},
	} {
		if s, ok := spansAccepted(c.target, payload); s != c.same || ok != c.ok {
			t.Errorf("spansAccepted(%v) = %v, %v; want %v, %v", c.target, s, ok, c.same, c.ok)
		}
	}
	if got := spansText(same); got != "per 0-3, loc 10-14" {
		t.Errorf("spansText = %q", got)
	}
	if got := targetText([]project.Span{}); got != "no span" {
		t.Errorf("targetText of no span = %q", got)
	}
}
