package writeback

import (
	"path/filepath"
	"reflect"
	"testing"
)

// PruneRuns deletes a run's row and items, never a run whose prelabels
// are still cited, and never another project's run of the same id.
func TestPruneRunsKeepsCitedRuns(t *testing.T) {
	s, _ := openTestStore(t)
	bdir := testBundle(t)
	preds := filepath.Join(t.TempDir(), "predictions.jsonl")
	for _, p := range []string{"p", "q"} {
		for _, id := range []string{"r1", "r2", "r3"} {
			if err := s.RecordRun(RunRow{Project: p, RunID: id, Trainer: "t", Status: "success"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.RecordItems(p, id, bdir); err != nil {
				t.Fatal(err)
			}
		}
	}
	// r2 wrote v1; r3 replaced r1's only prelabel, so r1 is cited no more.
	writeLines(t, preds, pred{"v1", "sentiment", label("pos", 0.9), conf(0.9)}, pred{"v2", "sentiment", label("pos", 0.9), conf(0.9)})
	if _, err := s.Publish(bdir, preds, Options{Project: "p", RunID: "r1", Schemas: []string{"sentiment"}, CreatedAt: 100}); err != nil {
		t.Fatal(err)
	}
	writeLines(t, preds, pred{"v1", "sentiment", label("neg", 0.9), conf(0.9)})
	if _, err := s.Publish(bdir, preds, Options{Project: "p", RunID: "r2", Schemas: []string{"sentiment"}, CreatedAt: 200}); err != nil {
		t.Fatal(err)
	}
	writeLines(t, preds, pred{"v2", "sentiment", label("neg", 0.9), conf(0.9)})
	if _, err := s.Publish(bdir, preds, Options{Project: "p", RunID: "r3", Schemas: []string{"sentiment"}, CreatedAt: 300}); err != nil {
		t.Fatal(err)
	}
	cited, err := s.CitedRuns("p")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{"r2": true, "r3": true}; !reflect.DeepEqual(cited, want) {
		t.Errorf("CitedRuns = %v, want %v", cited, want)
	}
	pruned, err := s.PruneRuns("p", []string{"r1", "r2"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pruned, []string{"r1"}) {
		t.Errorf("PruneRuns = %q, want [r1] (r2's prelabel of v1 is still there)", pruned)
	}
	count := func(table, project, id string) int {
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM `+table+` WHERE project = ? AND run_id = ?`, project, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if count("training_runs", "p", "r1") != 0 || count("training_run_items", "p", "r1") != 0 {
		t.Error("r1's row or items are still in the store")
	}
	if count("training_runs", "p", "r2") != 1 || count("training_run_items", "p", "r2") == 0 {
		t.Error("the cited r2 lost its row or items")
	}
	if count("training_runs", "q", "r1") != 1 || count("training_run_items", "q", "r1") == 0 {
		t.Error("project q's r1 was pruned with p's")
	}
	if got, err := s.PruneRuns("p", []string{"r1"}); err != nil || len(got) != 1 {
		t.Errorf("pruning r1 again = %q, %v; want it reported again, nothing left to delete", got, err)
	}
}
