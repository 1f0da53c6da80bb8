package writeback

import (
	"fmt"
	"hash/maphash"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

var spanSchema = bundle.Schema{Name: "ner", Kind: config.KindSpan, Labels: []string{"per", "loc", "org"}}

func goldSpan(start, end int, name string) map[string]any {
	return map[string]any{"schema": "ner", "name": name, "title": name, "start": start, "end": end, "id": "x"}
}

func predSpan(start, end int, label string) map[string]any {
	return map[string]any{"start": start, "end": end, "label": label, "confidence": 0.9}
}

func TestScoreSpans(t *testing.T) {
	dir := t.TempDir()
	writeLines(t, filepath.Join(dir, "train.jsonl"), row{"t1", "", map[string]any{"ner": []any{goldSpan(0, 1, "per")}}})
	writeLines(t, filepath.Join(dir, "test.jsonl"),
		// i1: per [0,5) exact; loc [10,16) predicted [10,14): overlap only.
		row{"i1", "", map[string]any{"ner": []any{goldSpan(0, 5, "per"), goldSpan(10, 16, "loc")}}},
		// i2: per [3,8) predicted as org [3,8): wrong label, no match
		// either way; an extra loc [20,25).
		row{"i2", "", map[string]any{"ner": []any{goldSpan(3, 8, "per")}}},
		// i3: predicted exactly.
		row{"i3", "", map[string]any{"ner": []any{goldSpan(2, 4, "org")}}},
		// i4: no prediction at all: a miss.
		row{"i4", "", map[string]any{"ner": []any{goldSpan(0, 2, "loc")}}},
		// i5: two predictions overlap one gold span: one matches, the
		// other is a false positive.
		row{"i5", "", map[string]any{"ner": []any{goldSpan(0, 10, "per")}}},
		// An empty target is no target.
		row{"i6", "", map[string]any{"ner": []any{}}},
	)
	path := filepath.Join(dir, "predictions.jsonl")
	writeLines(t, path,
		pred{"i1", "ner", []any{predSpan(10, 14, "loc"), predSpan(0, 5, "per")}, conf(0.5)},
		pred{"i2", "ner", []any{predSpan(3, 8, "org"), predSpan(20, 25, "loc")}, conf(0.5)},
		pred{"i3", "ner", []any{predSpan(2, 4, "org")}, conf(0.5)},
		pred{"i5", "ner", []any{predSpan(0, 3, "per"), predSpan(5, 9, "per")}, conf(0.5)},
		pred{"i6", "ner", []any{predSpan(0, 1, "per")}, conf(0.5)},
		pred{"i9", "ner", "not spans", conf(0.5)},
	)
	scores, err := Score(dir, path, []bundle.Schema{spanSchema})
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := scores["ner"]
	if !ok || sc.Spans == nil {
		t.Fatalf("no span score: %+v", scores)
	}
	if sc.Kind != config.KindSpan || sc.N != 5 || sc.NMissing != 1 {
		t.Errorf("kind %s, N %d, missing %d; want span, 5, 1", sc.Kind, sc.N, sc.NMissing)
	}
	near(t, "accuracy (items exactly right)", sc.Accuracy, 1.0/5)
	// Exact: gold 6 (per 3, loc 2, org 1), predicted 7.
	// per: tp 1 (i1), fn 2 (i2, i5), fp 2 (i5 twice); loc: tp 0, fn 2, fp 2;
	// org: tp 1, fp 1 (i2). Micro: tp 2, fp 5, fn 4.
	ex := sc.Spans.Exact
	if ex.Gold != 6 || ex.Predicted != 7 {
		t.Errorf("exact: %d gold, %d predicted; want 6, 7", ex.Gold, ex.Predicted)
	}
	near(t, "exact precision", ex.Precision, 2.0/7)
	near(t, "exact recall", ex.Recall, 2.0/6)
	near(t, "exact F1", ex.F1, 4.0/(4+5+4))
	fPer, fLoc, fOrg := 2.0/(2+2+2), 0.0, 2.0/(2+1)
	near(t, "exact macro-F1", ex.MacroF1, (fPer+fLoc+fOrg)/3)
	near(t, "MacroF1", sc.MacroF1, ex.MacroF1)
	// Overlap: per tp 2 (i1, i5 once), fn 1 (i2), fp 1 (i5's second);
	// loc tp 1 (i1), fn 1 (i4), fp 1 (i2); org tp 1, fp 1.
	ov := sc.Spans.Overlap
	near(t, "overlap precision", ov.Precision, 4.0/7)
	near(t, "overlap recall", ov.Recall, 4.0/6)
	if ov.Labels[0].Label != "per" || ov.Labels[0].TP != 2 || ov.Labels[0].FN != 1 || ov.Labels[0].FP != 1 {
		t.Errorf("overlap per: %+v", ov.Labels[0])
	}
	if !strings.Contains(sc.Spans.String(), "exact-match precision 0.286") {
		t.Errorf("the log line: %s", sc.Spans)
	}
}

func TestSpanRefusal(t *testing.T) {
	name := func() string { return `"ner" "i1"` }
	for _, c := range []struct {
		payload, reason, why string
	}{
		{`[]`, "", ""},
		{`[{"start":0,"end":3,"label":"per","confidence":0.5}]`, "", ""},
		{`[{"start":0,"end":3,"label":"per"}]`, "", ""},
		{`{"label":"per"}`, RefusedLabel, "not a list of spans"},
		{`[{"start":3,"end":3,"label":"per"}]`, RefusedLabel, "is not a span of characters"},
		{`[{"start":-1,"end":3,"label":"per"}]`, RefusedLabel, "is not a span of characters"},
		{`[{"start":0.5,"end":3,"label":"per"}]`, RefusedLabel, "whole numbers"},
		{`[{"start":0,"end":3}]`, RefusedLabel, "has no label"},
		{`[{"start":0,"end":3,"label":"time"}]`, RefusedLabel, `"time" is not a label of "ner"`},
		{`[{"start":0,"end":3,"label":"per","confidence":2}]`, RefusedConfidence, "not a number in [0, 1]"},
		{`[{"start":0,"end":3,"label":"per","note":"x"}]`, RefusedKeys, `the key "note"`},
	} {
		reason, why := spanRefusal([]byte(c.payload), spanSchema, name)
		if reason != c.reason || !strings.Contains(why, c.why) {
			t.Errorf("%s: refused %q (%s), want %q (%s)", c.payload, reason, why, c.reason, c.why)
		}
	}
}

func TestSpanComparisonAndBootstrap(t *testing.T) {
	dir := t.TempDir()
	writeLines(t, filepath.Join(dir, "test.jsonl"),
		row{"i1", "", map[string]any{"ner": []any{goldSpan(0, 5, "per")}}},
		row{"i2", "", map[string]any{"ner": []any{goldSpan(0, 5, "loc")}}},
		row{"i3", "", map[string]any{"ner": []any{goldSpan(0, 5, "org")}}},
	)
	path := filepath.Join(dir, "predictions.jsonl")
	writeLines(t, path,
		pred{"i1", "ner", []any{predSpan(0, 5, "per")}, conf(0.5)},
		pred{"i2", "ner", []any{predSpan(0, 5, "loc")}, conf(0.5)},
		pred{"i3", "ner", []any{predSpan(0, 5, "org")}, conf(0.5)},
	)
	other := map[string]string{}
	for _, id := range []string{"i1", "i2", "i3"} {
		l, ok := storedLabel(config.KindSpan, []byte(`[{"start":0,"end":4,"label":"per","confidence":0.5}]`))
		if !ok {
			t.Fatal("storedLabel refused a span payload")
		}
		other[id] = l
	}
	c, err := CompareOnCommon(dir, path, spanSchema, other)
	if err != nil {
		t.Fatal(err)
	}
	if c.N != 3 {
		t.Fatalf("compared %d items, want 3", c.N)
	}
	near(t, "ours", c.Ours.MacroF1, 1)
	near(t, "theirs", c.Theirs.MacroF1, 0)
	b := c.Bootstrap(200, 1)
	near(t, "diff", b.Diff, 1)
	if b.Low <= 0 || b.PWorse != 0 {
		t.Errorf("bootstrap of a run right on every span against one wrong on every span: %+v", b)
	}
}

// TestScoreCurveSpans: a span schema's curve points are scored as Score
// scores them (exact-match macro-F1), Resample runs on their decisions,
// and TrainLabels gives an item's span labels joined by "|".
func TestScoreCurveSpans(t *testing.T) {
	dir := t.TempDir()
	writeLines(t, filepath.Join(dir, "train.jsonl"),
		row{"t1", "", map[string]any{"ner": []any{goldSpan(0, 3, "per"), goldSpan(5, 8, "loc"), goldSpan(9, 12, "per")}}})
	var test, lines []any
	for i := range 20 {
		id := fmt.Sprintf("x%02d", i)
		test = append(test, row{id, "", map[string]any{"ner": []any{goldSpan(0, 4, "per")}}})
		// Point 50 right on every other item, point 100 on all.
		end := 4
		if i%2 == 1 {
			end = 3
		}
		lines = append(lines,
			fmt.Sprintf(`{"instance_id":%q,"schema_name":"ner","payload":[{"start":0,"end":%d,"label":"per"}],"curve_point":50,"n_train":1}`, id, end),
			fmt.Sprintf(`{"instance_id":%q,"schema_name":"ner","payload":[{"start":0,"end":4,"label":"per"}],"curve_point":100,"n_train":1}`, id))
	}
	writeLines(t, filepath.Join(dir, "test.jsonl"), test...)
	path := filepath.Join(dir, "predictions.jsonl")
	writeLines(t, path, lines...)
	cs, err := ScoreCurve(dir, path, []bundle.Schema{spanSchema}, []float64{50, 100}, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := cs["ner"]
	if c == nil || len(c.Points) != 2 {
		t.Fatalf("curve: %+v", cs)
	}
	// Point 50: per tp 10, fp 10, fn 10: F1 0.5.
	near(t, "point 50 macro-F1", c.Points[0].Draws[0].Score.MacroF1, 0.5)
	near(t, "point 100 macro-F1", c.Points[1].Draws[0].Score.MacroF1, 1)
	if l := c.Points[0].Draws[0].Labels; len(l) != 1 || l[0].Label != "per" {
		t.Errorf("point 50's labels: %+v", l)
	}
	var means [2]float64
	n := 0
	c.Resample([]int{0}, func(macro [][]float64, _ map[string][][]float64) {
		means[0] += macro[0][0]
		means[1] += macro[1][0]
		n++
	})
	if n == 0 || math.Abs(means[0]/float64(n)-0.5) > 0.05 || means[1]/float64(n) != 1 {
		t.Errorf("resampled means %v over %d", means, n)
	}
	train, err := TrainLabels(dir, []bundle.Schema{spanSchema})
	if err != nil {
		t.Fatal(err)
	}
	if got := train["ner"]["t1"]; got != "loc|per" {
		t.Errorf("TrainLabels = %q, want loc|per", got)
	}
}

// TestPreviewKeysSpans: the preview keeps a span prelabel whose spans stay
// the same whatever their confidences, and changes one whose spans move.
func TestPreviewKeysSpans(t *testing.T) {
	l := &labeler{seed: maphash.MakeSeed(), raw: make([][]byte, 1)}
	a := l.key(config.KindSpan, []byte(`[{"start":0,"end":3,"label":"per","confidence":0.5}]`))
	b := l.key(config.KindSpan, []byte(`[{"start":0,"end":3,"label":"per","confidence":0.9}]`))
	c := l.key(config.KindSpan, []byte(`[{"start":0,"end":4,"label":"per","confidence":0.5}]`))
	if a != b || a == c {
		t.Errorf("keys %d %d %d: want the first two equal, the third apart", a, b, c)
	}
}
