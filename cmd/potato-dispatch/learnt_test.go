package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

// oneLabelTrainer is a model that learnt nothing: it predicts "positive"
// at 0.9 for every val, test and unlabeled item of the bundle.
const oneLabelTrainer = `mkdir -p artifacts
cat bundle/val.jsonl bundle/test.jsonl bundle/unlabeled.jsonl | grep -o '"instance_id":"[^"]*"' | sed 's/.*:"//; s/"$//' |
while read id; do
  echo "{\"instance_id\":\"$id\",\"schema_name\":\"sentiment\",\"payload\":{\"label\":\"positive\",\"confidence\":0.9},\"confidence\":0.9}"
done > artifacts/predictions.jsonl
echo '{"v":1,"event":"result","status":"success","predictions_file":"predictions.jsonl"}'`

// TestLearntNothingNotPublished: a run whose model predicts one label
// succeeds and keeps its predictions but publishes none, under either
// writeback.promote, and the run log, run.json, the run's summary and
// status say why: its val accuracy is not above that of always predicting
// the val split's most common label. A run of tfidf-logreg on the same
// project learns, says so in its log, and is published.
func TestLearntNothingNotPublished(t *testing.T) {
	t.Parallel()
	for _, promote := range []string{"always", "if_better"} {
		t.Run(promote, func(t *testing.T) {
			dir, cfg := testproject.Project(t, 240, 200, "")
			text, _ := os.ReadFile(cfg)
			os.WriteFile(cfg, []byte(strings.Replace(string(text), "    min_confidence: 0.5\n",
				"    min_confidence: 0.5\n    promote: "+promote+"\n", 1)), 0o644)
			tr := trainerProgram(t, dir, oneLabelTrainer)
			r := run(t, "run", cfg, "--trainer", tr, "--schemas", "sentiment")
			id := strings.TrimSpace(r.stdout)
			info := testproject.Read(t, dir, id)
			if r.code != 0 || info.State != rundir.StateSuccess {
				t.Fatalf("exit %d, %s\n%s", r.code, info.State, runLog(t, dir, id))
			}
			d, ok := info.Promotion["sentiment"]
			if !ok || d.Published || !strings.HasPrefix(d.Reason, "not published: the model learnt nothing the val split shows: val accuracy 0.") ||
				!strings.Contains(d.Reason, "is not above the 0.") || !strings.Contains(d.Reason, " of always predicting ") ||
				!strings.Contains(d.Reason, "one-sided binomial test: p ") {
				t.Fatalf("promotion %+v", info.Promotion)
			}
			t.Logf("%s", d.Reason)
			if n := storePrelabels(t, dir, "sentiment"); len(n) != 0 {
				t.Errorf("%d prelabels in the store", len(n))
			}
			if info.Writeback["n_written"] != 0 {
				t.Errorf("write-back %v", info.Writeback)
			}
			log := runLog(t, dir, id)
			for _, want := range []string{
				"check of sentiment against its most common label: val accuracy 0.",
				"promotion of sentiment (writeback.promote: " + promote + "): " + d.Reason,
				"0 of ",
			} {
				if !strings.Contains(log, want) {
					t.Errorf("the run log lacks %q:\n%s", want, log)
				}
			}
			if _, err := os.Stat(filepath.Join(testproject.Root(dir).RunDir(id), rundir.PredictionsFile)); err != nil {
				t.Errorf("the run's predictions: %v", err)
			}
			if !strings.Contains(r.stderr, "sentiment: "+d.Reason) {
				t.Errorf("the run's summary does not say it: %q", r.stderr)
			}
			if st := run(t, "status", cfg, id); !strings.Contains(st.stdout, "promotion:   sentiment: "+d.Reason) {
				t.Errorf("status:\n%s", st.stdout)
			}

			// A model that learnt is published.
			r = run(t, "run", cfg, "--trainer", "tfidf-logreg", "--schemas", "sentiment")
			good := strings.TrimSpace(r.stdout)
			gi := testproject.Read(t, dir, good)
			if r.code != 0 || gi.Writeback["n_written"] == 0 || gi.Promotion["sentiment"].Published != (promote == "if_better") {
				t.Fatalf("tfidf-logreg: exit %d, write-back %v, promotion %+v\n%s", r.code, gi.Writeback, gi.Promotion, runLog(t, dir, good))
			}
			if log := runLog(t, dir, good); !strings.Contains(log, "check of sentiment against its most common label: val accuracy ") ||
				!strings.Contains(log, "is above the 0.") {
				t.Errorf("tfidf-logreg's run log:\n%s", log)
			}
		})
	}
}
