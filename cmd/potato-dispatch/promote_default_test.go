package main

import (
	"strings"
	"testing"

	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

// TestPromoteIfBetterIsTheDefault: a project whose config leaves
// writeback.promote out is under if_better. A run trained on flipped
// labels, far worse than the published run on the same test items,
// succeeds and changes no row of the store; its run log says the default
// changed and what to set for the old one. The next run held back does
// not say it again.
func TestPromoteIfBetterIsTheDefault(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 240, 200, "")
	tfidf := []string{"run", cfg, "--trainer", "tfidf-logreg", "--schemas", "sentiment"}
	r := run(t, tfidf...)
	good := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("first run: exit %d\n%s", r.code, runLog(t, dir, good))
	}
	before := storePrelabels(t, dir, "sentiment")
	if len(before) == 0 {
		t.Fatal("the first run published nothing")
	}
	if strings.Contains(runLog(t, dir, good), "note: writeback.promote is not set") {
		t.Errorf("the published run's log has the note:\n%s", runLog(t, dir, good))
	}
	flipTrainLabels(t, dir, good)
	for i, noted := range []bool{true, false} {
		r = run(t, tfidf...)
		bad := strings.TrimSpace(r.stdout)
		info := testproject.Read(t, dir, bad)
		d := info.Promotion["sentiment"]
		if r.code != 0 || info.State != rundir.StateSuccess || d.Published || d.Against != good ||
			!strings.HasPrefix(d.Reason, "not published: macro-F1 0.") {
			t.Fatalf("flipped run %d: exit %d, %s, promotion %+v\n%s", i+1, r.code, info.State, info.Promotion, runLog(t, dir, bad))
		}
		after := storePrelabels(t, dir, "sentiment")
		if len(after) != len(before) {
			t.Errorf("flipped run %d: %d prelabels before, %d after", i+1, len(before), len(after))
		}
		for id, v := range before {
			if after[id] != v {
				t.Errorf("flipped run %d: %s: %q became %q", i+1, id, v, after[id])
			}
		}
		log := runLog(t, dir, bad)
		if got := strings.Contains(log, "promotion of sentiment (writeback.promote: if_better): "+d.Reason); !got {
			t.Errorf("flipped run %d: the run log lacks the promotion line:\n%s", i+1, log)
		}
		note := "note: writeback.promote is not set, and it is now if_better when left out (it was always): " +
			"a run whose held-out macro-F1 is below that of the run published now no longer replaces its prelabels; " +
			"set model_training.writeback.promote: always to publish every successful run again"
		if strings.Contains(log, note) != noted {
			t.Errorf("flipped run %d: the note in its log is %v, want %v:\n%s", i+1, !noted, noted, log)
		}
	}
}
