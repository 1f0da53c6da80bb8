package writeback

import (
	"fmt"
	"path/filepath"
	"testing"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

// TestScoreOrdinal scores a three-point likert scale by hand: gold points
// 1 1 2 3 3 (targets as numbers, as a likert stores them), predicted 1 2
// "2.0" 1 and none.
//
//	errors in points: 0 1 0 2 2 (the missing one as the point farthest
//	from 3, which is 1): MAE 5/5 = 1
//	O (gold rows, predicted columns): [1 1 0; 0 1 0; 2 0 0], margins
//	rows 2 1 2, columns 3 2 0; w = (i-j)²/4
//	sum(w O) = 0.25 + 2 = 2.25; sum(w E) = (1 + 0.75 + 6 + 1)/5 = 1.75
//	QWK = 1 - 2.25/1.75 = -2/7
func TestScoreOrdinal(t *testing.T) {
	dir := t.TempDir()
	gold := []float64{1, 1, 2, 3, 3}
	predicted := []string{"1", "2", "2.0", "1", "-"}
	var test, preds []any
	for i, g := range gold {
		id := string(rune('a' + i))
		test = append(test, row{id, "", map[string]any{"rating": g}})
		if predicted[i] != "-" {
			preds = append(preds, pred{id, "rating", label(predicted[i], 0.6), conf(0.6)})
		}
	}
	writeLines(t, filepath.Join(dir, "test.jsonl"), test...)
	path := filepath.Join(dir, "predictions.jsonl")
	writeLines(t, path, preds...)
	s := bundle.Schema{Name: "rating", Kind: config.KindOrdinal, AnnotationType: "likert", Labels: []string{"1", "2", "3"}}
	scores, err := Score(dir, path, []bundle.Schema{s})
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := scores["rating"]
	if !ok {
		t.Fatal("the likert schema was not scored")
	}
	if sc.Kind != config.KindOrdinal || sc.N != 5 || sc.NMissing != 1 {
		t.Fatalf("kind %s, n %d, missing %d; want ordinal, 5, 1", sc.Kind, sc.N, sc.NMissing)
	}
	near(t, "accuracy", sc.Accuracy, 0.4)
	if sc.MAE == nil || sc.QWK == nil {
		t.Fatalf("no MAE or QWK: %+v", sc)
	}
	near(t, "mae", *sc.MAE, 1)
	near(t, "qwk", *sc.QWK, -2.0/7)
	want := map[string]float64{"1": 0.5, "2": 0, "3": 2}
	for _, l := range sc.Labels {
		if l.MAE == nil {
			t.Fatalf("point %s has no MAE", l.Label)
		}
		near(t, "mae of "+l.Label, *l.MAE, want[l.Label])
	}
	if sc.Confusion == nil || sc.Confusion.Counts[2][0] != 1 || sc.Confusion.NoLabel[2] != 1 {
		t.Fatalf("confusion %+v: want gold 3 predicted 1 once and no label once", sc.Confusion)
	}
}

// TestScoreOrdinalPerfect: predicting every gold point is MAE 0 and QWK 1;
// a word scale places targets by the labels' names.
func TestScoreOrdinalPerfect(t *testing.T) {
	dir := t.TempDir()
	labels := []string{"bad", "so-so", "good"}
	var test, preds []any
	for i, g := range []string{"bad", "good", "so-so", "good"} {
		id := string(rune('a' + i))
		test = append(test, row{id, "", map[string]any{"q": g}})
		preds = append(preds, pred{id, "q", label(g, 0.9), conf(0.9)})
	}
	writeLines(t, filepath.Join(dir, "test.jsonl"), test...)
	path := filepath.Join(dir, "predictions.jsonl")
	writeLines(t, path, preds...)
	scores, err := Score(dir, path, []bundle.Schema{{Name: "q", Kind: config.KindOrdinal, Labels: labels}})
	if err != nil {
		t.Fatal(err)
	}
	sc := scores["q"]
	near(t, "mae", *sc.MAE, 0)
	near(t, "qwk", *sc.QWK, 1)
	near(t, "accuracy", sc.Accuracy, 1)
}

// ordinalCompare compares, on n test items of gold point 1 ("1" of a
// 5-point scale, stored as a number), a run that predicts oursOff points
// off on the first k items with a published one off by theirsOff on them.
func ordinalCompare(t *testing.T, n, k, oursOff, theirsOff int) Comparison {
	t.Helper()
	s := bundle.Schema{Name: "rating", Kind: config.KindOrdinal, Labels: []string{"1", "2", "3", "4", "5"}}
	bdir := simBundle(t, s, 0, n, func(string, int) any { return 1.0 })
	var lines []any
	theirs := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("test%d", i)
		o, th := 1, 1
		if i < k {
			o, th = 1+oursOff, 1+theirsOff
		}
		theirs[id] = fmt.Sprint(th)
		lines = append(lines, pred{id, "rating", label(fmt.Sprint(o), 0.5), conf(0.5)})
	}
	path := filepath.Join(bdir, "predictions.jsonl")
	writeLines(t, path, lines...)
	c, err := CompareOnCommon(bdir, path, s, theirs)
	if err != nil || c.N != n {
		t.Fatalf("compare: %+v %v", c, err)
	}
	return c
}

// TestBootstrapOrdinal: the gate judges an ordinal schema by MAE. A run
// one point off where the published run is four points off, on the same
// items, has the same accuracy and macro-F1 but is better by MAE, in
// every draw; the reverse is worse in every draw.
func TestBootstrapOrdinal(t *testing.T) {
	better := ordinalCompare(t, 200, 50, 1, 4)
	if better.Ours.Accuracy != better.Theirs.Accuracy {
		t.Fatalf("accuracy %v and %v: the case wants them equal", better.Ours.Accuracy, better.Theirs.Accuracy)
	}
	near(t, "ours mae", *better.Ours.MAE, 0.25)
	near(t, "theirs mae", *better.Theirs.MAE, 1)
	b := better.Bootstrap(GateResamples, GateSeed)
	near(t, "diff", b.Diff, 0.75)
	if b.PWorse != 0 || b.Low <= 0 {
		t.Errorf("one point off against four: %+v", b)
	}
	w := ordinalCompare(t, 200, 50, 4, 1).Bootstrap(GateResamples, GateSeed)
	if w.PWorse < 0.999 || w.High >= 0 {
		t.Errorf("four points off against one: %+v", w)
	}
	same := ordinalCompare(t, 200, 50, 2, 2).Bootstrap(GateResamples, GateSeed)
	if same.Diff != 0 || same.PWorse != 0 {
		t.Errorf("alike: %+v", same)
	}
}
