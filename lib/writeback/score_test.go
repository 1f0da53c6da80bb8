package writeback

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

var scoreSchemas = []bundle.Schema{
	{Name: "rating", Kind: config.KindContinuous},
	{Name: "sentiment", Kind: config.KindNominal},
	{Name: "tags", Kind: config.KindMultilabel},
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9 {
		t.Errorf("%s = %.9f, want %.9f", what, got, want)
	}
}

// scoreCase writes a test split with the given gold targets and the given
// predictions, and scores them.
func scoreCase(t *testing.T, test []row, preds ...any) map[string]SchemaScore {
	t.Helper()
	dir := t.TempDir()
	writeLines(t, filepath.Join(dir, "train.jsonl"), row{"t1", "", map[string]any{"sentiment": "a"}})
	var lines []any
	for _, r := range test {
		lines = append(lines, r)
	}
	writeLines(t, filepath.Join(dir, "test.jsonl"), lines...)
	path := filepath.Join(dir, "predictions.jsonl")
	writeLines(t, path, preds...)
	scores, err := Score(dir, path, scoreSchemas)
	if err != nil {
		t.Fatal(err)
	}
	return scores
}

func TestScoreNominal(t *testing.T) {
	// Ten test items, gold a x6 and b x4. Confusion (gold rows, predicted
	// columns):
	//
	//	       a  b
	//	  a    5  1
	//	  b    1  3
	//
	// accuracy = 8/10 = 0.8
	// F1(a) = 2*5/(2*5+1+1) = 10/12, F1(b) = 2*3/(2*3+1+1) = 6/8
	// macro-F1 = (10/12 + 6/8)/2 = 0.791666...
	// p_o = 0.8; p_e = 0.6*0.6 + 0.4*0.4 = 0.52
	// kappa = (0.8-0.52)/(1-0.52) = 0.28/0.48 = 0.583333...
	gold := "aaaaaabbbb"
	predicted := "aaaaabbbba"
	var test []row
	var preds []any
	for i := range gold {
		id := fmt.Sprintf("e%d", i)
		test = append(test, row{id, "", map[string]any{"sentiment": gold[i : i+1]}})
		preds = append(preds, pred{id, "sentiment", label(predicted[i:i+1], 0.9), conf(0.9)})
	}
	// Predictions outside the test split do not count.
	preds = append(preds, pred{"v1", "sentiment", label("b", 0.9), conf(0.9)},
		pred{"t1", "sentiment", label("b", 0.9), conf(0.9)})
	sc := scoreCase(t, test, preds...)["sentiment"]
	if sc.N != 10 || sc.NMissing != 0 || sc.Kind != config.KindNominal {
		t.Errorf("n %d, n_missing %d, kind %q; want 10, 0, nominal", sc.N, sc.NMissing, sc.Kind)
	}
	near(t, "accuracy", sc.Accuracy, 0.8)
	near(t, "macro_f1", sc.MacroF1, (10.0/12+6.0/8)/2)
	if sc.CohenKappa == nil || sc.MicroF1 != nil {
		t.Fatalf("nominal score has cohen_kappa %v, micro_f1 %v; want kappa only", sc.CohenKappa, sc.MicroF1)
	}
	near(t, "cohen_kappa", *sc.CohenKappa, 0.28/0.48)
}

func TestScoreNominalMissingCountsAsWrong(t *testing.T) {
	// Gold a, a, b; predicted a, (none), b.
	// accuracy = 2/3; F1(a) = 2*1/(2*1+0+1) = 2/3, F1(b) = 1; macro = 5/6
	// gold shares a 2/3, b 1/3; predicted shares a 1/3, b 1/3 (the missing
	// prediction is no label); p_e = 2/9 + 1/9 = 1/3
	// kappa = (2/3 - 1/3)/(1 - 1/3) = 0.5
	// The last prediction for e3 counts, so its first (a) is ignored.
	sc := scoreCase(t, []row{
		{"e1", "", map[string]any{"sentiment": "a"}},
		{"e2", "", map[string]any{"sentiment": "a"}},
		{"e3", "", map[string]any{"sentiment": "b"}},
		{"e4", "", map[string]any{"rating": 3}},
	},
		pred{"e1", "sentiment", label("a", 0.9), conf(0.9)},
		pred{"e3", "sentiment", label("a", 0.9), conf(0.9)},
		pred{"e3", "sentiment", label("b", 0.9), conf(0.9)},
	)["sentiment"]
	if sc.N != 3 || sc.NMissing != 1 {
		t.Errorf("n %d, n_missing %d; want 3, 1", sc.N, sc.NMissing)
	}
	near(t, "accuracy", sc.Accuracy, 2.0/3)
	near(t, "macro_f1", sc.MacroF1, 5.0/6)
	near(t, "cohen_kappa", *sc.CohenKappa, 0.5)
}

func TestScoreMultilabel(t *testing.T) {
	// item  gold   predicted   per label
	// m1    x,y    x           x tp, y fn
	// m2    y      y,z         y tp, z fp
	// m3    z      z           z tp            exact
	// m4    x      (missing)   x fn
	// m5    x,z    x,z         x tp, z tp      exact
	//
	// micro: tp 5, fp 1, fn 2 -> 2*5/(2*5+1+2) = 10/13
	// F1(x) = 2*2/(4+0+1) = 4/5, F1(y) = 2*1/(2+0+1) = 2/3,
	// F1(z) = 2*2/(4+1+0) = 4/5; macro = (4/5 + 2/3 + 4/5)/3
	// subset accuracy = 2/5
	tags := func(names ...string) map[string]any { return map[string]any{"tags": names} }
	sc := scoreCase(t, []row{
		{"m1", "", tags("x", "y")},
		{"m2", "", tags("y")},
		{"m3", "", tags("z")},
		{"m4", "", tags("x")},
		{"m5", "", tags("x", "z")},
	},
		pred{"m1", "tags", label("x", 0.6), conf(0.6)},
		pred{"m2", "tags", label("y|z", 0.6), conf(0.6)},
		pred{"m3", "tags", label("z", 0.6), conf(0.6)},
		pred{"m5", "tags", label("x|z", 0.6), conf(0.6)},
	)["tags"]
	if sc.N != 5 || sc.NMissing != 1 || sc.Kind != config.KindMultilabel {
		t.Errorf("n %d, n_missing %d, kind %q; want 5, 1, multilabel", sc.N, sc.NMissing, sc.Kind)
	}
	if sc.MicroF1 == nil || sc.CohenKappa != nil {
		t.Fatalf("multilabel score has micro_f1 %v, cohen_kappa %v; want micro only", sc.MicroF1, sc.CohenKappa)
	}
	near(t, "micro_f1", *sc.MicroF1, 10.0/13)
	near(t, "macro_f1", sc.MacroF1, (4.0/5+2.0/3+4.0/5)/3)
	near(t, "accuracy", sc.Accuracy, 2.0/5)
}

func TestScoreMultilabelEmptyLabel(t *testing.T) {
	// An empty gold set predicted as "" is exact; a missing prediction is
	// wrong even for an empty gold set.
	sc := scoreCase(t, []row{
		{"m1", "", map[string]any{"tags": []string{}}},
		{"m2", "", map[string]any{"tags": []string{}}},
	},
		pred{"m1", "tags", label("", 0.9), conf(0.9)},
	)["tags"]
	near(t, "accuracy", sc.Accuracy, 0.5)
	if sc.NMissing != 1 {
		t.Errorf("n_missing %d, want 1", sc.NMissing)
	}
}

func TestScoreLeavesOutOtherKindsAndSummarises(t *testing.T) {
	scores := scoreCase(t, []row{
		{"e1", "", map[string]any{"sentiment": "a", "rating": 3, "tags": []string{"x"}}},
	},
		pred{"e1", "sentiment", label("a", 0.9), conf(0.9)},
		pred{"e1", "rating", map[string]any{"value": 3}, nil},
	)
	if _, ok := scores["rating"]; ok || len(scores) != 2 {
		t.Errorf("scores for %v, want sentiment and tags only", scores)
	}
	h, ok := HeldoutOf(scoreSchemas, scores)
	if !ok || h != (Heldout{N: 1, Accuracy: 1, MacroF1: 1}) {
		t.Errorf("HeldoutOf = %+v, %v; want sentiment's", h, ok)
	}
	b, _ := json.Marshal(h)
	if string(b) != `{"n":1,"accuracy":1,"macro_f1":1}` {
		t.Errorf("heldout JSON %s", b)
	}
	b, _ = json.Marshal(scores["tags"])
	// The fields of old, then each label's.
	if string(b) != `{"kind":"multilabel","n":1,"n_missing":1,"accuracy":0,"macro_f1":0,"micro_f1":0,`+
		`"labels":[{"label":"x","support":1,"tp":0,"fp":0,"fn":1,"tn":0,"precision":0,"recall":0,"f1":0}]}` {
		t.Errorf("multilabel JSON %s", b)
	}
}

func TestScoreMalformedPrediction(t *testing.T) {
	dir := t.TempDir()
	writeLines(t, filepath.Join(dir, "test.jsonl"), row{"e1", "", map[string]any{"sentiment": "a"}})
	path := filepath.Join(dir, "predictions.jsonl")
	writeLines(t, path, pred{"e1", "sentiment", label("a", 1), nil}, `{"instance_id": 7}`)
	_, err := Score(dir, path, scoreSchemas)
	if err == nil || !strings.Contains(err.Error(), "line 2:") {
		t.Errorf("Score error = %v, want one naming line 2", err)
	}
}

func TestScorePayloadForms(t *testing.T) {
	for _, c := range []struct {
		payload string
		want    string
	}{
		{`{"label": "a", "confidence": 0.5}`, "a"},
		{`"a"`, "a"},
		{`{"label": ["x", "y"]}`, "x|y"},
		{`{"confidence": 0.5}`, ""},
		{`7`, ""},
		{``, ""},
	} {
		if got := labelOf(json.RawMessage(c.payload)); got != c.want {
			t.Errorf("labelOf(%s) = %q, want %q", c.payload, got, c.want)
		}
	}
}

func TestScoreLabelsAndConfusion(t *testing.T) {
	// Schema labels pos, neg, neu, mixed; ten test items:
	//
	//	item  gold  predicted
	//	e1    pos   pos
	//	e2    pos   pos
	//	e3    pos   neg
	//	e4    pos   (none)
	//	e5    neg   neg
	//	e6    neg   neg
	//	e7    neg   pos
	//	e8    neu   neu
	//	e9    neu   sarcasm   (a label outside the schema)
	//	e10   neu   ""        (no label)
	//
	//	label    tp fp fn tn  precision  recall  F1
	//	pos       2  1  2  5  2/3        2/4     4/7
	//	neg       2  1  1  6  2/3        2/3     2/3
	//	neu       1  0  2  7  1          1/3     1/2
	//	mixed     0  0  0 10  (0)        (0)     (0)   not tested
	//	sarcasm   0  1  0  9  0          (0)     0
	//
	// macro-F1 is over the labels with a decision: (4/7 + 2/3 + 1/2 + 0)/4.
	// Confusion, gold rows and predicted columns pos neg neu mixed
	// sarcasm, then no label:
	//
	//	pos      2 1 0 0 0 | 1
	//	neg      1 2 0 0 0 | 0
	//	neu      0 0 1 0 1 | 1
	//	mixed    0 0 0 0 0 | 0
	//	sarcasm  0 0 0 0 0 | 0
	schemas := []bundle.Schema{{Name: "sentiment", Kind: config.KindNominal, Labels: []string{"pos", "neg", "neu", "mixed"}}}
	gold := []string{"pos", "pos", "pos", "pos", "neg", "neg", "neg", "neu", "neu", "neu"}
	predicted := []string{"pos", "pos", "neg", "-", "neg", "neg", "pos", "neu", "sarcasm", ""}
	dir := t.TempDir()
	var test, preds []any
	for i, g := range gold {
		id := fmt.Sprintf("e%d", i+1)
		test = append(test, row{id, "", map[string]any{"sentiment": g}})
		if predicted[i] != "-" {
			preds = append(preds, pred{id, "sentiment", label(predicted[i], 0.9), conf(0.9)})
		}
	}
	writeLines(t, filepath.Join(dir, "test.jsonl"), test...)
	path := filepath.Join(dir, "predictions.jsonl")
	writeLines(t, path, preds...)
	scores, err := Score(dir, path, schemas)
	if err != nil {
		t.Fatal(err)
	}
	sc := scores["sentiment"]
	near(t, "accuracy", sc.Accuracy, 0.5)
	near(t, "macro_f1", sc.MacroF1, (4.0/7+2.0/3+0.5+0)/4)
	want := []LabelFigures{
		{"pos", 4, 2, 1, 2, 5, 2.0 / 3, 0.5, 4.0 / 7, nil},
		{"neg", 3, 2, 1, 1, 6, 2.0 / 3, 2.0 / 3, 2.0 / 3, nil},
		{"neu", 3, 1, 0, 2, 7, 1, 1.0 / 3, 0.5, nil},
		{"mixed", 0, 0, 0, 0, 10, 0, 0, 0, nil},
		{"sarcasm", 0, 0, 1, 0, 9, 0, 0, 0, nil},
	}
	if len(sc.Labels) != len(want) {
		t.Fatalf("labels %+v, want %+v", sc.Labels, want)
	}
	var sum float64
	for i, w := range want {
		g := sc.Labels[i]
		if g.Label != w.Label || g.Support != w.Support || g.TP != w.TP || g.FP != w.FP || g.FN != w.FN || g.TN != w.TN {
			t.Errorf("label %d: %+v, want %+v", i, g, w)
		}
		near(t, w.Label+" precision", g.Precision, w.Precision)
		near(t, w.Label+" recall", g.Recall, w.Recall)
		near(t, w.Label+" f1", g.F1, w.F1)
		if g.TP+g.FP+g.FN > 0 {
			sum += g.F1
		}
	}
	near(t, "macro_f1 as the mean of the table's F1", sc.MacroF1, sum/4)
	c := sc.Confusion
	if c == nil {
		t.Fatal("no confusion matrix")
	}
	wantCounts := [][]int{{2, 1, 0, 0, 0}, {1, 2, 0, 0, 0}, {0, 0, 1, 0, 1}, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}}
	if fmt.Sprint(c.Labels) != "[pos neg neu mixed sarcasm]" || fmt.Sprint(c.Counts) != fmt.Sprint(wantCounts) || fmt.Sprint(c.NoLabel) != "[1 0 1 0 0]" {
		t.Errorf("confusion %+v, want labels [pos neg neu mixed sarcasm], counts %v, no_label [1 0 1 0 0]", c, wantCounts)
	}

	// run.json keeps them; a score written before they existed still reads.
	b, err := json.Marshal(sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"labels":[{"label":"pos","support":4,"tp":2,"fp":1,"fn":2,"tn":5,`, `"confusion":{"labels":["pos","neg","neu","mixed","sarcasm"],"counts":[[2,1,0,0,0],`, `"no_label":[1,0,1,0,0]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON %s lacks %s", b, want)
		}
	}
	var old SchemaScore
	if err := json.Unmarshal([]byte(`{"kind":"nominal","n":3,"n_missing":0,"accuracy":1,"macro_f1":1}`), &old); err != nil || old.Labels != nil || old.Confusion != nil {
		t.Errorf("an old score reads as %+v, %v", old, err)
	}
}

func TestScoreMultilabelLabels(t *testing.T) {
	// The items of TestScoreMultilabel: per label, one against the rest,
	//
	//	label  tp fp fn tn
	//	x       2  0  1  2
	//	y       1  0  1  3
	//	z       2  1  0  2
	//
	// and no confusion matrix, which a set of labels does not have.
	schemas := []bundle.Schema{{Name: "tags", Kind: config.KindMultilabel, Labels: []string{"z", "y", "x"}}}
	dir := t.TempDir()
	tags := func(names ...string) map[string]any { return map[string]any{"tags": names} }
	writeLines(t, filepath.Join(dir, "test.jsonl"), row{"m1", "", tags("x", "y")}, row{"m2", "", tags("y")},
		row{"m3", "", tags("z")}, row{"m4", "", tags("x")}, row{"m5", "", tags("x", "z")})
	path := filepath.Join(dir, "predictions.jsonl")
	writeLines(t, path, pred{"m1", "tags", label("x", 0.6), conf(0.6)}, pred{"m2", "tags", label("y|z", 0.6), conf(0.6)},
		pred{"m3", "tags", label("z", 0.6), conf(0.6)}, pred{"m5", "tags", label("x|z", 0.6), conf(0.6)})
	scores, err := Score(dir, path, schemas)
	if err != nil {
		t.Fatal(err)
	}
	sc := scores["tags"]
	if got, want := fmt.Sprint(sc.Labels), "[{z 2 2 1 0 2 0.6666666666666666 1 0.8 <nil>} {y 2 1 0 1 3 1 0.5 0.6666666666666666 <nil>} {x 3 2 0 1 2 1 0.6666666666666666 0.8 <nil>}]"; got != want {
		t.Errorf("labels %s, want %s", got, want)
	}
	if sc.Confusion != nil {
		t.Errorf("a multilabel schema has a confusion matrix %+v", sc.Confusion)
	}
}
