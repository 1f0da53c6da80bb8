package report

import (
	"math"
	"strings"
	"testing"

	"potato-training/lib/config"
)

// The label flag's threshold at its edges: a label accepted 4 times in 10
// is flagged, 5 in 10 and 0 in 9 (too few) are not.
func TestLabelFlagThreshold(t *testing.T) {
	for _, c := range []struct {
		n, k int
		want bool
	}{{10, 4, true}, {10, 5, false}, {9, 0, false}, {11, 5, true}} {
		if got := weakLabel(Tally{N: c.n, Accepted: c.k}); got != c.want {
			t.Errorf("label %d of %d accepted: flagged %v, want %v", c.k, c.n, got, c.want)
		}
	}
}

// The Wilson interval against values worked out by hand: 8 of 10 gives
// [0.490, 0.943]; 0 of 10 keeps 0 as its lower bound.
func TestStats(t *testing.T) {
	lo, hi := wilson(8, 10)
	if math.Abs(lo-0.4902) > 1e-3 || math.Abs(hi-0.9433) > 1e-3 {
		t.Errorf("wilson(8, 10) = %.4f, %.4f; want 0.4902, 0.9433", lo, hi)
	}
	if lo, hi := wilson(0, 10); lo != 0 || math.Abs(hi-0.2775) > 1e-3 {
		t.Errorf("wilson(0, 10) = %.4f, %.4f; want 0, 0.2775", lo, hi)
	}
}

// A multiselect schema is accepted as a whole set; by label, each label
// of the prelabel counts on its own, and a prelabel of no label is
// counted under NoLabel.
func TestTallyMultilabel(t *testing.T) {
	sa := SchemaAcceptance{Schema: "signals", Kind: config.KindMultilabel}
	tallySchema(&sa, []Judgement{
		{Annotator: "a", Item: "1", Prelabel: []string{"html", "link"}, Label: []string{"html", "link"}},
		{Annotator: "a", Item: "2", Prelabel: []string{"html", "link"}, Label: []string{"link"}},
		{Annotator: "b", Item: "3", Prelabel: []string{}, Label: nil},
		{Annotator: "b", Item: "4", Prelabel: []string{}, Label: []string{"reply"}},
	})
	if sa.All.N != 4 || sa.All.Accepted != 2 || sa.All.Share != 0.5 {
		t.Errorf("all: %+v, want 2 of 4", sa.All)
	}
	want := map[string][2]int{"html": {2, 1}, "link": {2, 2}, NoLabel: {2, 1}}
	if len(sa.Labels) != len(want) {
		t.Fatalf("by label: %+v", sa.Labels)
	}
	for _, l := range sa.Labels {
		if w := want[l.Name]; l.N != w[0] || l.Accepted != w[1] {
			t.Errorf("label %s: %d of %d, want %d of %d", l.Name, l.Accepted, l.N, w[1], w[0])
		}
	}
}

// An annotator's name and an item's id reach the terminal as text: the
// escape sequence in a name registered on Potato is shown, not obeyed.
func TestTextEscapesNames(t *testing.T) {
	name := "mallory\x1b]0;pwned\x07\x1b[2J"
	sa := SchemaAcceptance{Schema: "s", Kind: config.KindNominal}
	tallySchema(&sa, []Judgement{{Annotator: name, Item: "i\x1b[1A", Prelabel: []string{"a"}, Label: []string{"a"}}})
	var b strings.Builder
	if err := WriteAcceptance(&b, &Acceptance{Schemas: []SchemaAcceptance{sa}}); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(b.String(), "\x1b\x07") || !strings.Contains(b.String(), `mallory\x1b]0;pwned\x07\x1b[2J`) {
		t.Errorf("report:\n%q", b.String())
	}
	b.Reset()
	e := &Explanation{Item: "i\x1b[1A", Schemas: []ItemSchema{{Schema: "s", Annotators: []AnnotatorLabel{{Annotator: name, Label: "a"}}}}}
	if err := WriteExplanation(&b, e); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(b.String(), "\x1b\x07") {
		t.Errorf("explain:\n%q", b.String())
	}
}
