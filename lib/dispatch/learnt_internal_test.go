package dispatch

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/writeback"
)

// TestBinomialTail: P(X >= k) against sums written out by hand.
func TestBinomialTail(t *testing.T) {
	for _, c := range []struct {
		n, k int
		p    float64
		want float64
	}{
		{10, 0, 0.5, 1},
		{10, 11, 0.5, 0},
		{10, 10, 0.5, 1.0 / 1024},
		{10, 9, 0.5, 11.0 / 1024},
		{10, 8, 0.5, 56.0 / 1024},
		{3, 2, 0.2, 3*0.04*0.8 + 0.008},
		{5, 5, 1, 1},
		{5, 1, 0, 0},
	} {
		if got := binomialTail(c.n, c.k, c.p); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("binomialTail(%d, %d, %g) = %g, want %g", c.n, c.k, c.p, got, c.want)
		}
	}
	// Large n: the normal approximation's neighbourhood, no overflow.
	if got := binomialTail(100000, 50500, 0.5); got < 0.0007 || got > 0.0009 {
		t.Errorf("binomialTail(1e5, 50500, 0.5) = %g, want about 0.0008", got)
	}
}

// learntBundle writes a bundle whose val split holds items v0.. with the
// gold labels gold (a nominal schema "s"), and predictions pred (item
// index to label; "-" predicts nothing) for it.
func learntBundle(t *testing.T, gold, pred []string) (bdir, predPath string) {
	t.Helper()
	bdir = t.TempDir()
	var val, preds strings.Builder
	for i, g := range gold {
		b, _ := json.Marshal(map[string]any{"instance_id": fmt.Sprintf("v%d", i), "text": "x", "targets": map[string]any{"s": g}})
		val.Write(append(b, '\n'))
		if pred[i] != "-" {
			fmt.Fprintf(&preds, `{"instance_id":"v%d","schema_name":"s","payload":{"label":%q,"confidence":0.9},"confidence":0.9}`+"\n", i, pred[i])
		}
	}
	// A test item's prediction does not count.
	preds.WriteString(`{"instance_id":"e0","schema_name":"s","payload":{"label":"a"},"confidence":0.9}` + "\n")
	m := bundle.Manifest{V: 1, Splits: map[string]bundle.SplitFile{"val": {Path: "val.jsonl", Format: "jsonl", N: len(gold)}}}
	mb, _ := json.Marshal(m)
	for name, text := range map[string]string{"manifest.json": string(mb), "val.jsonl": val.String()} {
		if err := os.WriteFile(filepath.Join(bdir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	predPath = filepath.Join(t.TempDir(), "predictions.jsonl")
	if err := os.WriteFile(predPath, []byte(preds.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return bdir, predPath
}

func repeat(l string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = l
	}
	return out
}

// TestLearnt: a model that predicts one label, or is right within chance
// of it, is held back; one right well above it passes; an item the run
// did not predict is left out of both counts; no prediction of a val item
// is not checked.
func TestLearnt(t *testing.T) {
	s := bundle.Schema{Name: "s", Kind: config.KindNominal, Labels: []string{"a", "b"}}
	gold := append(repeat("a", 60), repeat("b", 40)...)
	for _, c := range []struct {
		name         string
		pred         []string
		checked, ok  bool
		correct, n   int
		majority     int
		label, inMsg string
	}{
		{"one label", repeat("a", 100), true, false, 60, 100, 60, "a", "is not above the 0.600 of always predicting a"},
		{"the other label", repeat("b", 100), true, false, 40, 100, 60, "a", "val accuracy 0.400 (40 of 100) is not above"},
		// 67 right of 100 where 60 is the baseline: p about 0.09.
		{"within chance", append(append(repeat("a", 60), repeat("b", 7)...), repeat("a", 33)...), true, false, 67, 100, 60, "a", "not above"},
		// 75 right: p about 0.001.
		{"learnt", append(append(repeat("a", 60), repeat("b", 15)...), repeat("a", 25)...), true, true, 75, 100, 60, "a", "is above the 0.600"},
		{"unpredicted items left out", append(repeat("-", 30), repeat("b", 70)...), true, false, 40, 70, 40, "b", "(40 of 70) is not above the 0.571 of always predicting b"},
		{"no val prediction", repeat("-", 100), false, false, 0, 0, 0, "", "not checked: the run predicted no labelled item of the val split"},
		{"val items of one label", append(repeat("-", 60), repeat("a", 40)...), false, false, 0, 40, 40, "b", "not checked: the 40 labelled val items it predicted are all b, so no model can be above always predicting it"},
	} {
		bdir, pred := learntBundle(t, gold, c.pred)
		got, err := learnt(writeback.ReadRun(bdir, pred, []bundle.Schema{s}, nil, nil), s)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got.Checked != c.checked || got.LearntEnough != c.ok || got.Correct != c.correct || got.N != c.n ||
			got.Majority != c.majority || got.Label != c.label {
			t.Errorf("%s: %+v", c.name, got)
		}
		if !strings.Contains(got.reason(), c.inMsg) {
			t.Errorf("%s: reason %q lacks %q", c.name, got.reason(), c.inMsg)
		}
	}
	// Too few val items for the test: above the most common label is
	// enough, and one label still fails.
	few := []string{"a", "b", "a", "b"}
	for _, c := range []struct {
		pred  []string
		ok    bool
		inMsg string
	}{
		{[]string{"a", "b", "a", "a"}, true, "val accuracy 0.750 (3 of 4) is above the 0.500 of always predicting a; 4 val items are too few for the one-sided binomial test (all right would give p 0.062, not < 0.05), so above it is enough"},
		{repeat("b", 4), false, "val accuracy 0.500 (2 of 4) is not above the 0.500 of always predicting a; 4 val items are too few"},
	} {
		bdir, pred := learntBundle(t, few, c.pred)
		got, err := learnt(writeback.ReadRun(bdir, pred, []bundle.Schema{s}, nil, nil), s)
		if err != nil || !got.Checked || !got.Few || got.LearntEnough != c.ok || got.reason() != c.inMsg && !strings.HasPrefix(got.reason(), c.inMsg) {
			t.Errorf("few items, %v: %+v %q, %v", c.pred, got, got.reason(), err)
		}
	}
	// Six of two labels, half each: all right passes the test (p 1/64),
	// one wrong does not (p 7/64).
	six := []string{"a", "b", "a", "b", "a", "b"}
	for k, ok := range map[int]bool{6: true, 5: false} {
		pred := slices.Clone(six)
		if k == 5 {
			pred[1] = "a"
		}
		bdir, predPath := learntBundle(t, six, pred)
		got, err := learnt(writeback.ReadRun(bdir, predPath, []bundle.Schema{s}, nil, nil), s)
		if err != nil || got.Few || got.LearntEnough != ok || got.Correct != k {
			t.Errorf("%d of 6 right: %+v, %v", k, got, err)
		}
	}
	// A multiselect schema: the label set is the label.
	ms := bundle.Schema{Name: "s", Kind: config.KindMultilabel, Labels: []string{"x", "y"}}
	bdir := t.TempDir()
	var val, preds strings.Builder
	for i := range 30 {
		set := []string{"x"}
		if i%3 == 0 {
			set = []string{"y", "x"}
		}
		b, _ := json.Marshal(map[string]any{"instance_id": fmt.Sprintf("v%d", i), "targets": map[string]any{"s": set}})
		val.Write(append(b, '\n'))
		fmt.Fprintf(&preds, `{"instance_id":"v%d","schema_name":"s","payload":{"label":%q}}`+"\n", i, "x")
	}
	os.WriteFile(filepath.Join(bdir, "manifest.json"), []byte(`{"v":1,"splits":{"val":{"path":"val.jsonl","format":"jsonl","n":30}}}`), 0o644)
	os.WriteFile(filepath.Join(bdir, "val.jsonl"), []byte(val.String()), 0o644)
	pred := filepath.Join(bdir, "p.jsonl")
	os.WriteFile(pred, []byte(preds.String()), 0o644)
	// Per label decision: x always right (30), y right on the 20 items
	// without it: 50 of 60, as choosing each label as most items have it.
	got, err := learnt(writeback.ReadRun(bdir, pred, []bundle.Schema{ms}, nil, nil), ms)
	if err != nil || !got.Checked || got.LearntEnough || got.Correct != 50 || got.N != 60 || got.Majority != 50 || got.Label != "x" ||
		!strings.HasPrefix(got.reason(), "val accuracy 0.833 (50 of 60 label decisions on 30 items) is not above the 0.833 of always predicting x by more than chance") {
		t.Errorf("multiselect, one set predicted: %+v %q, %v", got, got.reason(), err)
	}
	// Right sets pass.
	var right strings.Builder
	for i := range 30 {
		l := "x"
		if i%3 == 0 {
			l = "x|y"
		}
		fmt.Fprintf(&right, `{"instance_id":"v%d","schema_name":"s","payload":{"label":%q}}`+"\n", i, l)
	}
	os.WriteFile(pred, []byte(right.String()), 0o644)
	if got, err := learnt(writeback.ReadRun(bdir, pred, []bundle.Schema{ms}, nil, nil), ms); err != nil || !got.LearntEnough || got.Correct != 60 {
		t.Errorf("multiselect, the right sets: %+v, %v", got, err)
	}
}
