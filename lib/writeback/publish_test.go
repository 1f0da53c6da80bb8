package writeback

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func publish(t *testing.T, s *Store, bdir string, opt Options, lines ...any) Report {
	t.Helper()
	preds := filepath.Join(t.TempDir(), "predictions.jsonl")
	writeLines(t, preds, lines...)
	rep, err := s.Publish(bdir, preds, opt)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func sentiment(run string, created float64) Options {
	return Options{Project: "p", RunID: run, Schemas: []string{"sentiment"}, MinConfidence: 0.5, CreatedAt: created}
}

func TestPublishSkipsTrainSplit(t *testing.T) {
	s, _ := openTestStore(t)
	// Enabled schema and a confident prediction: only the split keeps it out.
	rep := publish(t, s, testBundle(t), sentiment("r1", 1),
		pred{"t1", "sentiment", label("pos", 0.99), conf(0.99)},
		pred{"t2", "sentiment", label("pos", 1), nil})
	want := Report{NRead: 2, NSkippedTrainSplit: 2}
	if !reflect.DeepEqual(rep, want) {
		t.Errorf("report %+v, want %+v", rep, want)
	}
	if rows := predictionRows(t, s.db); len(rows) != 0 {
		t.Errorf("train items were published: %q", rows)
	}
}

func TestPublishSkipsSchemaNotEnabled(t *testing.T) {
	s, _ := openTestStore(t)
	rep := publish(t, s, testBundle(t), sentiment("r1", 1),
		pred{"v1", "topic", label("sports", 0.99), conf(0.99)},
		pred{"v2", "sentiment", label("pos", 0.99), conf(0.99)})
	want := Report{NRead: 2, NWritten: 1, NSkippedSchemaNotEnabled: 1}
	if !reflect.DeepEqual(rep, want) {
		t.Errorf("report %+v, want %+v", rep, want)
	}
	if got := runOf(t, s.db, "p", "v1", "topic"); got != "" {
		t.Errorf("a schema not enabled was published by %q", got)
	}
	if got := runOf(t, s.db, "p", "v2", "sentiment"); got != "r1" {
		t.Errorf("enabled schema: run %q, want r1", got)
	}
}

func TestPublishMinConfidence(t *testing.T) {
	s, _ := openTestStore(t)
	rep := publish(t, s, testBundle(t), sentiment("r1", 7),
		pred{"v1", "sentiment", label("pos", 0.49), conf(0.49)},
		pred{"v2", "sentiment", label("pos", 0.5), conf(0.5)},
		pred{"v3", "sentiment", map[string]any{"label": "neg"}, nil},
		pred{"e1", "sentiment", label("neg", 0.4999999), conf(0.4999999)})
	// A null confidence cannot show that it reaches min_confidence.
	want := Report{NRead: 4, NWritten: 1, NSkippedLowConfidence: 3}
	if !reflect.DeepEqual(rep, want) {
		t.Errorf("report %+v, want %+v", rep, want)
	}
	wantRows := []string{
		`p v2 sentiment r1 {"confidence":0.5,"label":"pos"} 0.5 7`,
	}
	if got := predictionRows(t, s.db); !reflect.DeepEqual(got, wantRows) {
		t.Errorf("rows:\n got %q\nwant %q", got, wantRows)
	}
}

// The gates apply in order, and a prediction is counted under the first it
// fails.
func TestPublishGateOrder(t *testing.T) {
	s, _ := openTestStore(t)
	rep := publish(t, s, testBundle(t), sentiment("r1", 1),
		pred{"t1", "topic", label("x", 0.1), conf(0.1)},
		pred{"v1", "topic", label("x", 0.1), conf(0.1)})
	want := Report{NRead: 2, NSkippedTrainSplit: 1, NSkippedSchemaNotEnabled: 1}
	if !reflect.DeepEqual(rep, want) {
		t.Errorf("report %+v, want %+v", rep, want)
	}
}

func TestPublishNoSchemasPublishesNothing(t *testing.T) {
	s, _ := openTestStore(t)
	opt := sentiment("r1", 1)
	opt.Schemas = nil
	rep := publish(t, s, testBundle(t), opt, pred{"v1", "sentiment", label("pos", 1), conf(1)})
	if rep.NWritten != 0 || rep.NSkippedSchemaNotEnabled != 1 {
		t.Errorf("report %+v, want the prediction skipped as schema not enabled", rep)
	}
}

func TestPublishNewerRunReplaces(t *testing.T) {
	s, _ := openTestStore(t)
	bdir := testBundle(t)
	publish(t, s, bdir, sentiment("r1", 100),
		pred{"v1", "sentiment", label("pos", 0.9), conf(0.9)},
		pred{"v2", "sentiment", label("pos", 0.9), conf(0.9)})
	rep := publish(t, s, bdir, sentiment("r2", 200),
		pred{"v1", "sentiment", label("neg", 0.8), conf(0.8)})
	if rep.NWritten != 1 {
		t.Errorf("second run wrote %d rows, want 1", rep.NWritten)
	}
	want := []string{
		`p v1 sentiment r2 {"confidence":0.8,"label":"neg"} 0.8 200`,
		`p v2 sentiment r1 {"confidence":0.9,"label":"pos"} 0.9 100`,
	}
	if got := predictionRows(t, s.db); !reflect.DeepEqual(got, want) {
		t.Errorf("rows:\n got %q\nwant %q", got, want)
	}
}

func TestPublishOlderRunDoesNotOverwrite(t *testing.T) {
	s, _ := openTestStore(t)
	bdir := testBundle(t)
	publish(t, s, bdir, sentiment("r2", 200),
		pred{"v1", "sentiment", label("neg", 0.8), conf(0.8)})
	rep := publish(t, s, bdir, sentiment("r1", 100),
		pred{"v1", "sentiment", label("pos", 0.9), conf(0.9)},
		pred{"v2", "sentiment", label("pos", 0.9), conf(0.9)})
	want := Report{NRead: 2, NWritten: 1, NSkippedNewerRun: 1}
	if !reflect.DeepEqual(rep, want) {
		t.Errorf("report %+v, want %+v", rep, want)
	}
	if got := runOf(t, s.db, "p", "v1", "sentiment"); got != "r2" {
		t.Errorf("v1 belongs to %q after an older run published, want r2", got)
	}
	if got := runOf(t, s.db, "p", "v2", "sentiment"); got != "r1" {
		t.Errorf("v2 belongs to %q, want r1", got)
	}
}

func TestPublishSameRunAgainIsIdempotent(t *testing.T) {
	s, _ := openTestStore(t)
	bdir := testBundle(t)
	line := pred{"v1", "sentiment", label("pos", 0.9), conf(0.9)}
	publish(t, s, bdir, sentiment("r1", 100), line)
	before := predictionRows(t, s.db)
	rep := publish(t, s, bdir, sentiment("r1", 100), line)
	if rep.NWritten != 1 {
		t.Errorf("republish wrote %d, want 1", rep.NWritten)
	}
	if after := predictionRows(t, s.db); !reflect.DeepEqual(before, after) {
		t.Errorf("rows changed: %q -> %q", before, after)
	}
}

// Fault: a malformed line in the middle of predictions.jsonl. Expected: an
// error naming the line. What must survive: every row of the store exactly
// as it was, even when statements ran before the bad line was read.
func TestPublishMalformedLineLosesNothing(t *testing.T) {
	good := func(id string) pred {
		return pred{id, "sentiment", label("neg", 0.7), conf(0.7)}
	}
	var many []any
	for i := range 3 * predsPerInsert {
		many = append(many, good(fmt.Sprintf("n%05d", i)))
	}
	cases := []struct {
		name  string
		lines []any
		line  int
	}{
		{"bad json", []any{good("v1"), good("v2"), `{"instance_id": "v3", "schema_name": `, good("e1")}, 3},
		{"not an object", []any{good("v1"), `[1, 2]`}, 2},
		{"no instance_id", []any{good("v2"), `{"schema_name": "sentiment", "payload": {}, "confidence": 0.9}`, good("v3")}, 2},
		{"no schema_name", []any{good("v2"), good("v3"), good("e1"), `{"instance_id": "v1", "payload": {}, "confidence": 0.9}`}, 4},
		{"after many batches", append(append([]any{}, many...), `{"instance_id": "v1"`, good("v2")), len(many) + 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _ := openTestStore(t)
			bdir := testBundle(t)
			publish(t, s, bdir, sentiment("r1", 100),
				pred{"v1", "sentiment", label("pos", 0.9), conf(0.9)},
				pred{"v2", "sentiment", label("pos", 0.9), conf(0.9)})
			if err := s.RecordRun(RunRow{Project: "p", RunID: "r1", Status: "success"}); err != nil {
				t.Fatal(err)
			}
			before := predictionRows(t, s.db)

			preds := filepath.Join(t.TempDir(), "predictions.jsonl")
			writeLines(t, preds, c.lines...)
			rep, err := s.Publish(bdir, preds, sentiment("r2", 200))
			if err == nil {
				t.Fatalf("Publish succeeded with report %+v, want an error", rep)
			}
			if want := fmt.Sprintf("line %d:", c.line); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
			if after := predictionRows(t, s.db); !reflect.DeepEqual(before, after) {
				t.Errorf("rows changed by a failed publish:\nbefore %q\n after %q", before, after)
			}
			// The store is still usable.
			publish(t, s, bdir, sentiment("r2", 200), good("v3"))
		})
	}
}

// Without a manifest or train.jsonl the train split is unknown, and
// publishing could leak train items; it is refused.
func TestPublishWithoutTrainSplitFails(t *testing.T) {
	s, _ := openTestStore(t)
	bdir := testBundle(t)
	if err := os.Remove(filepath.Join(bdir, "train.jsonl")); err != nil {
		t.Fatal(err)
	}
	preds := filepath.Join(t.TempDir(), "predictions.jsonl")
	writeLines(t, preds, pred{"v1", "sentiment", label("pos", 0.9), conf(0.9)})
	if _, err := s.Publish(bdir, preds, sentiment("r1", 1)); err == nil {
		t.Fatal("Publish succeeded without a train split")
	}
	if rows := predictionRows(t, s.db); len(rows) != 0 {
		t.Errorf("rows written: %q", rows)
	}
}

func TestPublishStoresPayloadAsCompactJSON(t *testing.T) {
	s, _ := openTestStore(t)
	rep := publish(t, s, testBundle(t), sentiment("r1", 1),
		`{"instance_id": "v1", "schema_name": "sentiment", "payload": {"label" : "a|b",  "confidence": 0.75}, "confidence": 0.75, "extra": true}`,
		`{"instance_id": "v2", "schema_name": "sentiment", "payload": "pos", "confidence": 0.5}`,
		"",
		`  `)
	if rep.NRead != 2 || rep.NWritten != 2 {
		t.Errorf("report %+v, want 2 read and written (blank lines are not predictions)", rep)
	}
	want := []string{
		`p v1 sentiment r1 {"label":"a|b","confidence":0.75} 0.75 1`,
		`p v2 sentiment r1 "pos" 0.5 1`,
	}
	if got := predictionRows(t, s.db); !reflect.DeepEqual(got, want) {
		t.Errorf("rows:\n got %q\nwant %q", got, want)
	}
}

// Rows go to SQLite in statements of predsPerInsert; each row must keep its
// own values across full statements and the remainder.
func TestPublishManyRows(t *testing.T) {
	s, _ := openTestStore(t)
	n := 2*predsPerInsert + 7
	bdir := testBundle(t)
	var items []any
	for i := range n {
		items = append(items, row{fmt.Sprintf("u%04d", i), "u", map[string]any{"sentiment": "pos"}})
	}
	writeLines(t, filepath.Join(bdir, "unlabeled.jsonl"), items...)
	var lines []any
	for i := range n {
		lines = append(lines, pred{fmt.Sprintf("u%04d", i), "sentiment", label(fmt.Sprint(i), float64(i)/float64(n)), conf(float64(i) / float64(n))})
	}
	opt := sentiment("r1", 5)
	opt.MinConfidence = 0
	if rep := publish(t, s, bdir, opt, lines...); rep.NWritten != n {
		t.Fatalf("report %+v, want %d written", rep, n)
	}
	rs, err := s.db.Query(`SELECT instance_id, payload->>'label', confidence FROM training_predictions ORDER BY instance_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	i := 0
	for ; rs.Next(); i++ {
		var id, lab string
		var c float64
		if err := rs.Scan(&id, &lab, &c); err != nil {
			t.Fatal(err)
		}
		if id != fmt.Sprintf("u%04d", i) || lab != fmt.Sprint(i) || c != float64(i)/float64(n) {
			t.Fatalf("row %d: %s %s %v", i, id, lab, c)
		}
	}
	if i != n {
		t.Errorf("%d rows, want %d", i, n)
	}
}

// A multilabel schema's prelabel is stored as Potato's annotation page
// pre-selects it: one {"label", "confidence"} a chosen name. The manifest
// says which schemas are multilabel; a nominal label with a "|" in it is
// no label of its schema, and a payload without a label names none: both
// are refused.
func TestPublishMultilabelAsPotatoList(t *testing.T) {
	s, _ := openTestStore(t)
	bdir := testBundle(t)
	writeLines(t, filepath.Join(bdir, "manifest.json"), map[string]any{
		"v": 1,
		"schemas": []map[string]any{
			{"name": "sentiment", "annotation_type": "radio", "kind": "nominal", "labels": []string{"pos", "neg"}},
			{"name": "topics", "annotation_type": "multiselect", "kind": "multilabel", "labels": []string{"a", "b", "c"}},
		},
		"splits": map[string]any{
			"train": map[string]any{"path": "train.jsonl", "format": "jsonl", "n": 2},
			"val":   map[string]any{"path": "val.jsonl", "format": "jsonl", "n": 3},
			"test":  map[string]any{"path": "test.jsonl", "format": "jsonl", "n": 2},
		},
	})
	opt := Options{Project: "p", RunID: "r1", Schemas: []string{"sentiment", "topics"}, CreatedAt: 1}
	rep := publish(t, s, bdir, opt,
		pred{"v1", "topics", label("a|c", 0.75), conf(0.75)},
		pred{"v2", "topics", label("", 0.5), conf(0.5)},
		pred{"v3", "topics", map[string]any{"label": []string{"b"}}, nil},
		pred{"e1", "topics", []map[string]any{{"label": "c"}}, nil},
		pred{"e2", "topics", nil, nil},
		pred{"v1", "sentiment", label("pos|neg", 0.6), conf(0.6)},
		pred{"t1", "topics", label("a", 0.9), conf(0.9)})
	if rep.NWritten != 4 || rep.NSkippedTrainSplit != 1 || rep.NRefused != 2 {
		t.Errorf("report %+v, want 4 written, 1 of the train split and 2 refused", rep)
	}
	want := []string{
		`p e1 topics r1 [{"label":"c"}] NULL 1`,
		`p v1 topics r1 [{"label":"a","confidence":0.75},{"label":"c","confidence":0.75}] 0.75 1`,
		`p v2 topics r1 [] 0.5 1`,
		`p v3 topics r1 [{"label":"b"}] NULL 1`,
	}
	if got := predictionRows(t, s.db); !reflect.DeepEqual(got, want) {
		t.Errorf("rows:\n got %q\nwant %q", got, want)
	}
}

// withManifest adds to a testBundle a manifest of a radio schema
// "sentiment" (pos, neg) and a multiselect schema "topics" (a, b, c).
func withManifest(t *testing.T, bdir string) string {
	t.Helper()
	writeLines(t, filepath.Join(bdir, "manifest.json"), map[string]any{
		"v": 1,
		"schemas": []map[string]any{
			{"name": "sentiment", "annotation_type": "radio", "kind": "nominal", "labels": []string{"pos", "neg"}},
			{"name": "topics", "annotation_type": "multiselect", "kind": "multilabel", "labels": []string{"a", "b", "c"}},
		},
		"splits": map[string]any{
			"train": map[string]any{"path": "train.jsonl", "format": "jsonl", "n": 2},
			"val":   map[string]any{"path": "val.jsonl", "format": "jsonl", "n": 3},
			"test":  map[string]any{"path": "test.jsonl", "format": "jsonl", "n": 2},
		},
	})
	return bdir
}

// A trainer's payloads carry more than a prelabel: 3 MB of labels that
// are all the schema's, a "|"-joined label that grows past 64 KiB in the
// list form the store holds, a __proto__ key, a key Potato does not read,
// "Label" (which Go's decoder, not Potato, takes for label) and a stray
// key in a multiselect list's entry. None is stored; each is counted by
// its reason and named with its line; the good lines are stored, and
// every stored payload has only label and confidence, and at most 64 KiB.
// Preview counts the same.
func TestPublishRefusesPayloadsNoPrelabelHas(t *testing.T) {
	s, _ := openTestStore(t)
	bdir := withManifest(t, testBundle(t))
	huge := make([]string, 3<<20/4)
	for i := range huge {
		huge[i] = "a"
	}
	grows := strings.Repeat("a|b|", 40<<10/4) // 40 KiB, about 600 KiB as a list
	preds := filepath.Join(t.TempDir(), "predictions.jsonl")
	writeLines(t, preds,
		pred{"v1", "sentiment", label("pos", 0.9), conf(0.9)},                                                                  // 1: stored
		pred{"v2", "topics", map[string]any{"label": huge, "confidence": 0.9}, conf(0.9)},                                      // 2: size
		pred{"v3", "topics", map[string]any{"label": grows, "confidence": 0.123456789}, conf(0.123456789)},                     // 3: size, as stored
		`{"instance_id":"e1","schema_name":"sentiment","payload":{"label":"neg","__proto__":{"admin":true}},"confidence":0.8}`, // 4: keys
		pred{"e2", "sentiment", map[string]any{"label": "neg", "confidence": 0.8, "rationale": "<b>x</b>"}, conf(0.8)},         // 5: keys
		pred{"v2", "sentiment", map[string]any{"Label": "pos"}, conf(0.8)},                                                     // 6: keys
		pred{"v3", "topics", []map[string]any{{"label": "b"}, {"label": "c", "html": "<i>"}}, conf(0.7)},                       // 7: keys
		pred{"e1", "topics", label("b|c", 0.7), conf(0.7)},                                                                     // 8: stored
	)
	opt := Options{Project: "p", RunID: "r1", Schemas: []string{"sentiment", "topics"}, CreatedAt: 1}
	p, err := s.Preview(bdir, preds, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Publish(bdir, preds, opt)
	if err != nil {
		t.Fatal(err)
	}
	if rep.NRead != 8 || rep.NWritten != 2 || rep.NRefused != 6 ||
		!reflect.DeepEqual(rep.RefusedBy, map[string]int{RefusedSize: 2, RefusedKeys: 4}) {
		t.Errorf("report %+v, want 8 read, 2 written, 6 refused: 2 by size, 4 by keys", rep)
	}
	if !reflect.DeepEqual(p.Report, rep) {
		t.Errorf("preview's report %+v, publish's %+v", p.Report, rep)
	}
	hugeJSON, _ := json.Marshal(map[string]any{"label": huge, "confidence": 0.9})
	sum := rep.RefusedSummary()
	for _, want := range []string{
		"6 predictions refused (2 with a payload over 64 KiB, 4 with keys a prelabel does not have): " + PredictionRules,
		fmt.Sprintf(`the first 5, line 2: the payload of "topics" "v2" is %d bytes, over the 64 KiB`, len(hugeJSON)),
		`line 3: the payload of "topics" "v3" is `,
		`line 4: the payload of "sentiment" "e1" has the key "__proto__", which a prelabel does not have`,
		`line 5: the payload of "sentiment" "e2" has the key "rationale"`,
		`line 6: the payload of "sentiment" "v2" has the key "Label"`,
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
	if strings.Contains(sum, "line 7") || len(sum) > 2000 {
		t.Errorf("summary names more than the first 5, or carries the payloads:\n%s", sum)
	}
	want := []string{
		`p e1 topics r1 [{"label":"b","confidence":0.7},{"label":"c","confidence":0.7}] 0.7 1`,
		`p v1 sentiment r1 {"confidence":0.9,"label":"pos"} 0.9 1`,
	}
	if got := predictionRows(t, s.db); !reflect.DeepEqual(got, want) {
		t.Errorf("rows:\n got %.300q\nwant %q", got, want)
	}
	rows, err := s.db.Query(`SELECT payload FROM training_predictions`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var payload string
		if err := rows.Scan(&payload); err != nil {
			t.Fatal(err)
		}
		if k := storedKeys(t, payload); len(payload) > MaxPayload || len(k) != 0 {
			t.Errorf("stored payload of %d bytes with keys %q beside label and confidence", len(payload), k)
		}
	}
}

// storedKeys are the keys other than label and confidence of the objects
// in a stored payload, at any depth.
func storedKeys(t *testing.T, payload string) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(payload), &v); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if k != "label" && k != "confidence" {
					out = append(out, k)
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}
