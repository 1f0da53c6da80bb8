package writeback

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// RecordItems and Publish insert in the order of the tables' keys, not of
// the files (rawIDs, publish's sort); what they store is the files' all the
// same: an id twice in a split file is one row, an id in two split files
// has the split read last (splits are read in order of name: test, then
// train), and of two predictions for the same
// item and schema the later line stays, wherever the two lines sort. The
// unlabeled split has no rows; its items are the run's unlabeled ones all
// the same (ItemSplit, RunPrelabels).
func TestRecordAndPublishKeepFileOrderRules(t *testing.T) {
	s, _ := openTestStore(t)
	bdir := t.TempDir()
	writeLines(t, filepath.Join(bdir, "train.jsonl"), row{"t9", "", nil}, row{"b", "", nil})
	writeLines(t, filepath.Join(bdir, "test.jsonl"),
		row{"z", "", nil}, row{"b", "", nil}, row{"a", "", nil}, row{"z", "", nil}, row{"m", "", nil})
	writeLines(t, filepath.Join(bdir, "unlabeled.jsonl"), row{"u", "", nil}, row{"c", "", nil})
	manifest, _ := json.Marshal(map[string]any{"v": 1, "schemas": []map[string]any{
		{"name": "s", "annotation_type": "radio", "kind": "nominal", "labels": []string{"first", "last", "x"}},
	}, "splits": map[string]any{
		"train":     map[string]any{"path": "train.jsonl", "format": "jsonl", "n": 2},
		"test":      map[string]any{"path": "test.jsonl", "format": "jsonl", "n": 5},
		"unlabeled": map[string]any{"path": "unlabeled.jsonl", "format": "jsonl", "n": 2},
	}})
	if err := os.WriteFile(filepath.Join(bdir, "manifest.json"), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := s.RecordItems("p", "r1", bdir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"t9": "train", "b": "train", "z": "test", "a": "test", "m": "test"}
	if got := itemRows(t, s.db, "p", "r1"); n != 7 || !reflect.DeepEqual(got, want) {
		t.Errorf("RecordItems = %d, rows %v; want 7, %v", n, got, want)
	}

	opt := Options{Project: "p", RunID: "r1", Schemas: []string{"s"}, CreatedAt: 1}
	rep := publish(t, s, bdir, opt,
		pred{"z", "s", label("first", 0.9), conf(0.9)},
		pred{"a", "s", label("x", 0.8), conf(0.8)},
		pred{"m", "s", label("first", 0.7), conf(0.7)},
		pred{"z", "s", label("last", 0.6), conf(0.6)},
		pred{"m", "s", label("last", 0.5), conf(0.5)},
		pred{"u", "s", label("x", 0.5), conf(0.5)})
	if rep.NRead != 6 || rep.NRefused != 0 {
		t.Fatalf("report %+v", rep)
	}
	got := map[string]string{}
	rs, err := s.db.Query(`SELECT instance_id, payload->>'label' FROM training_predictions`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for rs.Next() {
		var id, lab string
		if err := rs.Scan(&id, &lab); err != nil {
			t.Fatal(err)
		}
		got[id] = lab
	}
	if want := map[string]string{"z": "last", "a": "x", "m": "last", "u": "x"}; !reflect.DeepEqual(got, want) {
		t.Errorf("prelabels %v, want %v", got, want)
	}
	for id, want := range map[string]string{"t9": "train", "z": "test", "u": "unlabeled", "c": "", "nope": ""} {
		if got, err := s.ItemSplit("p", "r1", id); err != nil || got != want {
			t.Errorf("ItemSplit(%s) = %q, %v; want %q", id, got, err, want)
		}
	}
	pre, err := s.RunPrelabels("p", "r1", "s", "unlabeled")
	if err != nil || len(pre) != 1 || pre[0].InstanceID != "u" {
		t.Errorf("the run's unlabeled prelabels: %+v, %v; want u's", pre, err)
	}
	if pre, err := s.RunPrelabels("p", "r1", "s", "test"); err != nil || len(pre) != 3 {
		t.Errorf("the run's test prelabels: %+v, %v; want a, m and z's", pre, err)
	}
	// A store written before the unlabeled split went unrecorded has rows
	// "unlabeled": the same items.
	if _, err := s.db.Exec(`INSERT INTO training_run_items VALUES ('p', 'r1', 'u', 'unlabeled')`); err != nil {
		t.Fatal(err)
	}
	pre, err = s.RunPrelabels("p", "r1", "s", "unlabeled")
	if err != nil || len(pre) != 1 || pre[0].InstanceID != "u" {
		t.Errorf("the run's unlabeled prelabels, u recorded: %+v, %v; want u's", pre, err)
	}
	if got, err := s.ItemSplit("p", "r1", "u"); err != nil || got != "unlabeled" {
		t.Errorf("ItemSplit(u), u recorded = %q, %v", got, err)
	}
}
