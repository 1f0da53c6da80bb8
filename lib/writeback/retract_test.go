package writeback

import (
	"path/filepath"
	"reflect"
	"testing"
)

// RetractRun deletes the run's prelabels of every schema and counts them
// by schema; a newer run's row for the same item, the same run id in
// another project, the run's row and its items stay. Retracting again
// deletes nothing.
func TestRetractRunCountsBySchemaAndKeepsTheRun(t *testing.T) {
	s, _ := openTestStore(t)
	bdir := testBundle(t)
	preds := filepath.Join(t.TempDir(), "predictions.jsonl")
	opt := Options{Project: "p", RunID: "r1", CreatedAt: 100, Schemas: []string{"sentiment", "topic"}}
	if err := s.RecordRun(RunRow{Project: "p", RunID: "r1", Trainer: "tfidf-logreg", Status: "success"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordItems("p", "r1", bdir); err != nil {
		t.Fatal(err)
	}
	writeLines(t, preds,
		pred{"v1", "sentiment", label("pos", 0.9), conf(0.9)},
		pred{"v2", "sentiment", label("pos", 0.9), conf(0.9)},
		pred{"v3", "sentiment", label("pos", 0.9), conf(0.9)},
		pred{"v1", "topic", label("news", 0.9), conf(0.9)})
	if rep, err := s.Publish(bdir, preds, opt); err != nil || rep.NWritten != 4 {
		t.Fatalf("Publish = %+v, %v; want 4 written", rep, err)
	}
	writeLines(t, preds, pred{"v3", "sentiment", label("neg", 0.8), conf(0.8)})
	opt.RunID, opt.CreatedAt = "r2", 200
	if _, err := s.Publish(bdir, preds, opt); err != nil {
		t.Fatal(err)
	}
	opt.Project, opt.RunID = "q", "r1"
	if _, err := s.Publish(bdir, preds, opt); err != nil {
		t.Fatal(err)
	}

	got, err := s.RetractRun("p", "r1")
	if err != nil {
		t.Fatal(err)
	}
	want := Retraction{N: 3, BySchema: map[string]int64{"sentiment": 2, "topic": 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("RetractRun = %+v, want %+v (v3 is r2's now)", got, want)
	}
	if s := got.String(); s != "3 prelabels (sentiment 2, topic 1)" {
		t.Errorf("String() = %q", s)
	}
	rows := []string{
		`p v3 sentiment r2 {"confidence":0.8,"label":"neg"} 0.8 200`,
		`q v3 sentiment r1 {"confidence":0.8,"label":"neg"} 0.8 200`,
	}
	if after := predictionRows(t, s.db); !reflect.DeepEqual(after, rows) {
		t.Errorf("rows after the retraction:\n got %q\nwant %q", after, rows)
	}
	var status string
	if err := s.db.QueryRow(`SELECT status FROM training_runs WHERE project = 'p' AND run_id = 'r1'`).Scan(&status); err != nil || status != "success" {
		t.Errorf("the run's row after the retraction: status %q, %v; want it kept as success", status, err)
	}
	var items int
	if err := s.db.QueryRow(`SELECT count(*) FROM training_run_items WHERE project = 'p' AND run_id = 'r1'`).Scan(&items); err != nil || items != 7 {
		t.Errorf("the run's items after the retraction: %d, %v; want the 7 of the bundle", items, err)
	}

	again, err := s.RetractRun("p", "r1")
	if err != nil || again.N != 0 || len(again.BySchema) != 0 {
		t.Errorf("second RetractRun = %+v, %v; want 0 and no schema", again, err)
	}
	if s := again.String(); s != "0 prelabels" {
		t.Errorf("String() of nothing = %q", s)
	}
	if _, err := s.RetractRun("", "r1"); err == nil {
		t.Error("RetractRun without a project: no error")
	}
}
