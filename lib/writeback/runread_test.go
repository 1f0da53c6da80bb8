package writeback

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

// readingBundle writes a bundle with a manifest of a nominal, a
// multilabel and an ordinal schema: 60 labelled items over train, val
// and test, 10 unlabeled. It returns its directory and its schemas.
func readingBundle(t *testing.T) (string, []bundle.Schema) {
	t.Helper()
	dir := t.TempDir()
	schemas := []bundle.Schema{
		{Name: "sentiment", AnnotationType: "radio", Kind: config.KindNominal, Labels: []string{"neg", "neu", "pos"}},
		{Name: "topics", AnnotationType: "multiselect", Kind: config.KindMultilabel, Labels: []string{"a", "b", "c"}},
		{Name: "rating", AnnotationType: "likert", Kind: config.KindOrdinal, Labels: []string{"1", "2", "3"}},
	}
	rows := map[string][]any{}
	for i := range 70 {
		id := fmt.Sprintf("i%02d", i)
		split := []string{"train", "val", "test"}[i%3]
		targets := map[string]any{"sentiment": []string{"neg", "neu", "pos"}[i%3], "topics": [][]string{{"a"}, {"b", "a"}, {}}[i%3%2], "rating": 2}
		if i%7 == 0 {
			delete(targets, "sentiment")
		}
		if i >= 60 {
			split, targets = bundle.UnlabeledSplit, map[string]any{}
		}
		rows[split] = append(rows[split], row{id, "text " + id, targets})
	}
	m := bundle.Manifest{V: 1, Schemas: schemas, Splits: map[string]bundle.SplitFile{}}
	for split, rs := range rows {
		writeLines(t, filepath.Join(dir, split+".jsonl"), rs...)
		m.Splits[split] = bundle.SplitFile{Path: split + ".jsonl", Format: "jsonl", N: len(rs)}
	}
	j, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, bundle.ManifestName), j, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, schemas
}

// readingPredictions writes predictions of every item, some twice, some
// refused (an unknown item or label), some below min_confidence, and
// extra lines.
func readingPredictions(t *testing.T, extra ...any) string {
	t.Helper()
	var lines []any
	for i := range 70 {
		id := fmt.Sprintf("i%02d", i)
		c := float64(i%10) / 10
		lines = append(lines,
			pred{id, "sentiment", label([]string{"neg", "neu", "pos"}[(i/2)%3], c), conf(c)},
			pred{id, "topics", map[string]any{"label": []string{"a|b", "a", "b|a", ""}[i%4]}, conf(0.8)})
		if i%5 == 0 {
			lines = append(lines, pred{id, "sentiment", label("pos", 0.9), conf(0.9)})
		}
		if i%4 == 0 {
			lines = append(lines, pred{id, "rating", map[string]any{"label": "2"}, nil})
		}
	}
	lines = append(lines, pred{"nope", "sentiment", label("pos", 0.9), conf(0.9)},
		pred{"i04", "sentiment", label("unknown", 0.9), conf(0.9)})
	lines = append(lines, extra...)
	path := filepath.Join(t.TempDir(), "predictions.jsonl")
	writeLines(t, path, lines...)
	return path
}

// checkReading checks that every step of r gives what the step gives
// reading for itself: the same values, or the same error.
func checkReading(t *testing.T, r *RunReading, bdir, preds string, schemas []bundle.Schema, opt Options, labeled func(string, string) bool) {
	t.Helper()
	same := func(what string, got, want any, gotErr, wantErr error) {
		t.Helper()
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Errorf("%s: error %v, want %v", what, gotErr, wantErr)
		} else if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
		}
	}
	gotS, gotErr := r.Scores()
	wantS, wantErr := Score(bdir, preds, schemas)
	same("scores", gotS, wantS, gotErr, wantErr)
	for _, s := range schemas {
		for _, split := range []string{"val", "test"} {
			g1, p1, err1 := r.Split(split, s)
			g2, p2, err2 := SplitPredictions(bdir, preds, split, s)
			same(split+" of "+s.Name, [2]any{g1, p1}, [2]any{g2, p2}, err1, err2)
		}
		if s.Kind == config.KindOrdinal {
			continue // CompareOnCommon reads no ordinal target
		}
		other := map[string]string{"i02": "neu", "i05": "a", "i08": "pos", "i11": "b|a", "i14": ""}
		c1, err1 := r.Compare(s, other)
		c2, err2 := CompareOnCommon(bdir, preds, s, other)
		same("comparison of "+s.Name, c1, c2, err1, err2)
	}
	st1, _ := openTestStore(t)
	st2, _ := openTestStore(t)
	older := Options{Project: opt.Project, RunID: "r0", Schemas: opt.Schemas, CreatedAt: 1}
	_, err1 := st1.Publish(bdir, preds, older)
	_, err2 := st2.Publish(bdir, preds, older)
	same("the older run's publish", nil, nil, err1, err2)
	p1, err1 := r.Preview(st1)
	if err1 == nil && p1.Schemas[0].Kept == 0 {
		t.Errorf("the preview keeps no prelabel: %+v", p1)
	}
	p2, err2 := st2.Preview(bdir, preds, opt, labeled)
	same("preview", p1, p2, err1, err2)
	rep1, err1 := r.Publish(st1, opt)
	rep2, err2 := st2.Publish(bdir, preds, opt)
	same("publish", rep1, rep2, err1, err2)
	if rows1, rows2 := predictionRows(t, st1.db), predictionRows(t, st2.db); !slices.Equal(rows1, rows2) {
		t.Errorf("publish stored\n%s\nwant\n%s", strings.Join(rows1, "\n"), strings.Join(rows2, "\n"))
	}
	// The reading publishes the prelabels its preview kept for fewer
	// schemas too (as the promotion gate may choose), and reads again for
	// another min_confidence or a schema the preview did not see.
	for _, o := range []Options{
		{Project: opt.Project, RunID: "r2", Schemas: opt.Schemas[:1], MinConfidence: opt.MinConfidence, CreatedAt: 3},
		{Project: opt.Project, RunID: "r2", Schemas: opt.Schemas[1:], MinConfidence: opt.MinConfidence, CreatedAt: 3},
		{Project: opt.Project, RunID: "r2", MinConfidence: opt.MinConfidence, CreatedAt: 3},
		{Project: opt.Project, RunID: "r2", Schemas: opt.Schemas, MinConfidence: opt.MinConfidence + 0.3, CreatedAt: 3},
		{Project: opt.Project, RunID: "r2", Schemas: append([]string{"rating"}, opt.Schemas...), MinConfidence: opt.MinConfidence, CreatedAt: 3},
	} {
		st3, _ := openTestStore(t)
		st4, _ := openTestStore(t)
		rep3, err3 := r.Publish(st3, o)
		rep4, err4 := st4.Publish(bdir, preds, o)
		same(fmt.Sprintf("publish of %v at %g", o.Schemas, o.MinConfidence), rep3, rep4, err3, err4)
		if rows3, rows4 := predictionRows(t, st3.db), predictionRows(t, st4.db); !slices.Equal(rows3, rows4) {
			t.Errorf("publish of %v stored\n%s\nwant\n%s", o.Schemas, strings.Join(rows3, "\n"), strings.Join(rows4, "\n"))
		}
	}
}

// One reading of a run's predictions gives each step of its write-back
// what it gives reading for itself, on a bundle of three kinds of schema,
// and on a run whose files break each step's reading in turn: then every
// step fails, or not, as it does alone, with its own error.
func TestRunReadingIsEachStep(t *testing.T) {
	labeled := func(item, schema string) bool { return item < "i30" && schema == "sentiment" }
	opt := Options{Project: "p", RunID: "r1", Schemas: []string{"sentiment", "topics"}, MinConfidence: 0.3, CreatedAt: 2}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, bdir string) []any
		ok    bool
	}{
		{"whole", func(*testing.T, string) []any { return nil }, true},
		{"bad prediction line", func(*testing.T, string) []any { return []any{`{"instance_id": "i01"`} }, false},
		{"payload that is not Potato's", func(*testing.T, string) []any {
			return []any{`{"instance_id":"i05","schema_name":"topics","payload":{"label":["a"]},"probs":{"a":"x"}}`}
		}, true},
		{"bad val target", func(t *testing.T, bdir string) []any {
			f, err := os.OpenFile(filepath.Join(bdir, "val.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fmt.Fprintln(f, `{"instance_id":"v9","targets":{"sentiment":3}}`)
			return nil
		}, false},
		{"unlabeled row without an id", func(t *testing.T, bdir string) []any {
			writeLines(t, filepath.Join(bdir, bundle.UnlabeledSplit+".jsonl"), `{"text":"x"}`)
			return nil
		}, false},
		{"no test split file", func(t *testing.T, bdir string) []any {
			if err := os.Remove(filepath.Join(bdir, "test.jsonl")); err != nil {
				t.Fatal(err)
			}
			return nil
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bdir, schemas := readingBundle(t)
			preds := readingPredictions(t, tc.setup(t, bdir)...)
			r := ReadRun(bdir, preds, schemas, &opt, labeled)
			if r.ok != tc.ok {
				t.Errorf("the reading read it all: %v, want %v", r.ok, tc.ok)
			}
			if tc.name == "whole" && (r.pv == nil || r.pv.kept == nil || len(r.pv.kept.rows) == 0) {
				t.Error("the whole run's preview kept no prelabel to publish")
			}
			checkReading(t, r, bdir, preds, schemas, opt, labeled)
		})
	}
}
