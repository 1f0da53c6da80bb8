package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/internal/testproject"
	"potato-training/internal/teststore"
	"potato-training/lib/rundir"
)

// storePrelabels is the store's prelabels of schema: item to run and
// payload.
func storePrelabels(t *testing.T, dir, schema string) map[string]string {
	t.Helper()
	rows, err := teststore.OpenDB(t, filepath.Join(dir, "project.sqlite")).Query(
		`SELECT instance_id, run_id, payload FROM training_predictions WHERE schema_name = ?`, schema)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, run, payload string
		if err := rows.Scan(&id, &run, &payload); err != nil {
			t.Fatal(err)
		}
		out[id] = run + " " + payload
	}
	return out
}

// flipTrainLabels flips, in the annotator's user_state.json, the label of
// every item of the train split of run id's bundle: a model trained on
// them learns the opposite, while the test split's gold labels stay.
func flipTrainLabels(t *testing.T, dir, id string) int {
	t.Helper()
	train, err := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(id), rundir.BundleDir, "train.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	inTrain := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(train)), "\n") {
		var row struct {
			ID string `json:"instance_id"`
		}
		json.Unmarshal([]byte(line), &row)
		inTrain[row.ID] = true
	}
	path := filepath.Join(dir, "annotation_output", "ann", "user_state.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var state map[string]any
	json.Unmarshal(b, &state)
	n := 0
	for item, v := range state["instance_id_to_label_to_value"].(map[string]any) {
		if !inTrain[item] {
			continue
		}
		pair := v.([]any)[0].([]any)
		label := pair[0].(map[string]any)
		label["name"] = map[string]string{"positive": "negative", "negative": "positive"}[label["name"].(string)]
		n++
	}
	b, _ = json.Marshal(state)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// ifBetterProject is a project of 240 items, 200 labelled, whose write-back
// publishes under promote: if_better; its model_training block ends with
// extra.
func ifBetterProject(t *testing.T, extra string) (dir, cfg string) {
	t.Helper()
	dir, cfg = testproject.Project(t, 240, 200, extra)
	text, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, []byte(strings.Replace(string(text), "    min_confidence: 0.5\n", "    min_confidence: 0.5\n    promote: if_better\n", 1)), 0o644)
	return dir, cfg
}

// TestPromoteIfBetter: under writeback.promote: if_better, a run trained
// on labels flipped on purpose (the train split's; the test split's gold
// labels are those of the first run) scores far below the published run
// on the same test items. It succeeds and keeps its predictions, but is
// not published: the store's prelabels stay those of the first run, row
// for row, and the run log, run.json and status say why. potato-dispatch
// publish then publishes it by hand. With the true labels back, a run is
// published again (it ties or beats the one published).
func TestPromoteIfBetter(t *testing.T) {
	t.Parallel()
	dir, cfg := ifBetterProject(t, "")
	tfidf := []string{"run", cfg, "--trainer", "tfidf-logreg", "--schemas", "sentiment"}

	r := run(t, tfidf...)
	good := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("first run: exit %d\n%s", r.code, runLog(t, dir, good))
	}
	first := testproject.Read(t, dir, good)
	if d := first.Promotion["sentiment"]; !d.Published || d.Reason != "published: no run's prelabels of sentiment are published yet" {
		t.Fatalf("first run's promotion: %+v", first.Promotion)
	}
	// A first run records its own score, not zeros.
	if d := first.Promotion["sentiment"]; first.Heldout == nil || d.N != first.Heldout.N || d.N == 0 || d.MacroF1 != first.Heldout.MacroF1 || d.MacroF1 < 0.5 {
		t.Errorf("first run's promotion %+v, held-out %+v", d, first.Heldout)
	}
	if c, ok := first.Calibration["sentiment"]; !ok || c.ECEBefore == nil || c.Binning == "" {
		t.Errorf("first run's calibration: %+v", first.Calibration)
	} else {
		t.Logf("calibration: %+v", c)
	}
	before := storePrelabels(t, dir, "sentiment")
	if len(before) == 0 {
		t.Fatal("the first run published nothing")
	}

	if n := flipTrainLabels(t, dir, good); n < 100 {
		t.Fatalf("%d train labels flipped", n)
	}
	r = run(t, tfidf...)
	bad := strings.TrimSpace(r.stdout)
	info := testproject.Read(t, dir, bad)
	d := info.Promotion["sentiment"]
	if r.code != 0 || info.State != rundir.StateSuccess {
		t.Fatalf("the flipped run: exit %d, %s\n%s", r.code, info.State, runLog(t, dir, bad))
	}
	if d.Published || d.Against != good || d.N < 20 || d.MacroF1 > 0.3 || d.AgainstMacroF1 < 0.9 {
		t.Fatalf("the flipped run's promotion: %+v", d)
	}
	if d.Bootstrap == nil || d.Bootstrap.PWorse < 0.95 || d.Bootstrap.Resamples == 0 {
		t.Errorf("the flipped run's bootstrap: %+v", d.Bootstrap)
	}
	if !strings.HasPrefix(d.Reason, "not published: macro-F1 0.") || !strings.Contains(d.Reason, " of run "+good+" on ") || !strings.Contains(d.Reason, "worse beyond noise") {
		t.Errorf("reason %q", d.Reason)
	}
	if !strings.Contains(runLog(t, dir, bad), "promotion of sentiment (writeback.promote: if_better): "+d.Reason) {
		t.Errorf("the run log does not say it:\n%s", runLog(t, dir, bad))
	}
	if _, err := os.Stat(filepath.Join(testproject.Root(dir).RunDir(bad), rundir.PredictionsFile)); err != nil {
		t.Errorf("the kept run's predictions: %v", err)
	}
	after := storePrelabels(t, dir, "sentiment")
	if len(after) != len(before) {
		t.Errorf("%d prelabels before, %d after", len(before), len(after))
	}
	for id, v := range before {
		if after[id] != v {
			t.Errorf("%s: %q became %q", id, v, after[id])
		}
	}
	if st := run(t, "status", cfg, bad); !strings.Contains(st.stdout, "promotion:") || !strings.Contains(st.stdout, d.Reason) {
		t.Errorf("status:\n%s", st.stdout)
	}

	// Published by hand: the store now holds the flipped run's prelabels.
	p := run(t, "publish", cfg, bad)
	if p.code != 0 || !strings.Contains(p.stdout, "predictions published as prelabels") {
		t.Fatalf("publish: exit %d\n%s%s", p.code, p.stdout, p.stderr)
	}
	for id, v := range storePrelabels(t, dir, "sentiment") {
		if !strings.HasPrefix(v, bad+" ") {
			t.Errorf("%s: %q is not the published run's", id, v)
		}
	}
	if d := testproject.Read(t, dir, bad).Promotion["sentiment"]; !d.Published || !strings.HasPrefix(d.Reason, "published by hand") {
		t.Errorf("after publish: %+v", d)
	}

	// The true labels back: the next run beats the flipped one.
	flipTrainLabels(t, dir, good)
	r = run(t, tfidf...)
	again := testproject.Read(t, dir, strings.TrimSpace(r.stdout))
	if d := again.Promotion["sentiment"]; r.code != 0 || !d.Published || d.Against != bad || d.MacroF1 < d.AgainstMacroF1 {
		t.Errorf("the run on true labels: exit %d, %+v", r.code, d)
	}
}

// TestAutoRetrainPassesTheGate: a run that auto_retrain starts, as cron
// would, passes the same gate: trained on flipped labels, it succeeds and
// is not published, and the store keeps the published run's prelabels.
func TestAutoRetrainPassesTheGate(t *testing.T) {
	t.Parallel()
	dir, cfg := ifBetterProject(t, "  auto_retrain:\n    enabled: true\n    trainer: tfidf-logreg\n    schemas: [sentiment]\n    update_frequency: 10\n    min_interval_s: 0\n")
	r := run(t, "run", cfg, "--trainer", "tfidf-logreg", "--schemas", "sentiment")
	good := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("first run: exit %d\n%s", r.code, runLog(t, dir, good))
	}
	before := storePrelabels(t, dir, "sentiment")
	flipTrainLabels(t, dir, good)
	r = run(t, "auto", cfg)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !rundir.ValidID(id) {
		t.Fatalf("auto: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	info := testproject.Read(t, dir, id)
	if d := info.Promotion["sentiment"]; info.Trigger != "auto" || info.State != rundir.StateSuccess || d.Published || d.Against != good {
		t.Fatalf("the automatic run: trigger %s, %s, promotion %+v", info.Trigger, info.State, info.Promotion)
	}
	if !strings.Contains(r.stderr, "sentiment: not published: macro-F1 ") {
		t.Errorf("auto's summary does not say it: %q", r.stderr)
	}
	after := storePrelabels(t, dir, "sentiment")
	for id, v := range before {
		if after[id] != v {
			t.Errorf("%s: %q became %q", id, v, after[id])
		}
	}
}
