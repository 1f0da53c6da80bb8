package main

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

// predictingTrainer predicts "positive" for every test and unlabeled item
// of the bundle, so that its run writes prelabels.
const predictingTrainer = `mkdir -p artifacts
cat bundle/test.jsonl bundle/unlabeled.jsonl | grep -o '"instance_id":"[^"]*"' | sed 's/.*:"//; s/"$//' |
while read id; do
  echo "{\"instance_id\":\"$id\",\"schema_name\":\"sentiment\",\"payload\":{\"label\":\"positive\",\"confidence\":0.9},\"confidence\":0.9}"
done > artifacts/predictions.jsonl
echo '{"v":1,"event":"result","status":"success","predictions_file":"predictions.jsonl"}'`

// storeCount is one number from Potato's store of the project in dir.
func storeCount(t *testing.T, dir, query string, args ...any) int {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dir, "project.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// potato-dispatch retract deletes a finished run's prelabels and says how
// many; the run's row, its directory and its record stay, and run.json
// and run.log say what was retracted. A second retraction deletes nothing
// and answers 0. An unknown run and a run still going are refused with
// exit 1, and nothing changes.
func TestRetract(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir, Config: testproject.Write(t, dir, 60, 40, "")}
	tr := testproject.Trainer(t, dir, predictingTrainer)
	res := r.Run("--trainer", tr, "--schemas", "sentiment")
	if res.Code != 0 {
		t.Fatalf("run: exit %d: %s", res.Code, res.Stderr)
	}
	id := res.ID
	const preds = `SELECT count(*) FROM training_predictions WHERE project = 'Test Project' AND run_id = ?`
	n := storeCount(t, dir, preds, id)
	if n == 0 || r.Info(id).Writeback["n_written"] != n {
		t.Fatalf("the run wrote %d prelabels, run.json says %v", n, r.Info(id).Writeback)
	}

	code, stdout, stderr := runDispatch(t, r, nil, "retract", r.Config, id)
	want := "run " + id + ": " + itoa(n) + " prelabels (sentiment " + itoa(n) + ") retracted from " + filepath.Join(dir, "project.sqlite") + "; the run stays in training_runs\n"
	if code != 0 || stdout != want || stderr != "" {
		t.Fatalf("retract: exit %d, stdout %q, stderr %q; want exit 0 and %q", code, stdout, stderr, want)
	}
	if left := storeCount(t, dir, preds, id); left != 0 {
		t.Errorf("%d of the run's prelabels are left in the store", left)
	}
	if rows := storeCount(t, dir, `SELECT count(*) FROM training_runs WHERE run_id = ? AND status = 'success'`, id); rows != 1 {
		t.Errorf("the run's row of training_runs: %d rows with status success, want it kept", rows)
	}
	info := r.Info(id)
	if info.State != rundir.StateSuccess || info.Writeback["n_retracted"] != n || info.Writeback["n_written"] != n || info.RetractedAt == nil {
		t.Fatalf("run.json after the retraction: state %s, writeback %v, retracted_at %v", info.State, info.Writeback, info.RetractedAt)
	}
	first := *info.RetractedAt
	if log := r.File(id, "run.log"); !strings.Contains(log, "potato-dispatch retract: "+itoa(n)+" prelabels (sentiment "+itoa(n)+") deleted from ") {
		t.Errorf("run.log does not tell of the retraction:\n%s", log)
	}

	// Again, as JSON: nothing is left to delete.
	code, stdout, stderr = runDispatch(t, r, nil, "retract", r.Config, id, "--json")
	var got struct {
		RunID     string         `json:"run_id"`
		Retracted *int           `json:"retracted"`
		BySchema  map[string]int `json:"by_schema"`
		Store     string         `json:"store"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || code != 0 {
		t.Fatalf("retract --json: exit %d, %v, stdout %q, stderr %q", code, err, stdout, stderr)
	}
	if got.RunID != id || got.Retracted == nil || *got.Retracted != 0 || len(got.BySchema) != 0 || got.Store != filepath.Join(dir, "project.sqlite") {
		t.Errorf("a second retraction answers %s; want retracted 0", stdout)
	}
	if again := r.Info(id); again.Writeback["n_retracted"] != n || !again.RetractedAt.Equal(first) {
		t.Errorf("a second retraction changed run.json: writeback %v, retracted_at %v (was %v)", again.Writeback, again.RetractedAt, first)
	}

	// potato-dispatch writeback publishes the prelabels again; the record
	// no longer says they are retracted.
	code, stdout, stderr = runDispatch(t, r, nil, "writeback", r.Config, id)
	if code != 0 {
		t.Fatalf("writeback: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if back, info := storeCount(t, dir, preds, id), r.Info(id); back != n || info.RetractedAt != nil || info.Writeback["n_retracted"] != 0 {
		t.Errorf("after writeback: %d of %d prelabels, retracted_at %v, writeback %v", back, n, info.RetractedAt, info.Writeback)
	}

	// An unknown run.
	code, stdout, stderr = runDispatch(t, r, nil, "retract", r.Config, "20261202T135501-000000")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "potato-dispatch: error: no run 20261202T135501-000000") {
		t.Errorf("an unknown run: exit %d, stdout %q, stderr %q; want exit 1 and no run", code, stdout, stderr)
	}

	// A run still going: its dispatch writes its prelabels as it ends.
	gate := filepath.Join(dir, "go")
	slow := testproject.Trainer(t, t.TempDir(), `while [ ! -e '`+gate+`' ]; do sleep 0.05; done
`+predictingTrainer)
	going := r.Detach("--trainer", slow, "--schemas", "sentiment")
	code, stdout, stderr = runDispatch(t, r, nil, "retract", r.Config, going)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "run "+going+" is not finished") {
		t.Errorf("a run still going: exit %d, stdout %q, stderr %q; want exit 1, not finished", code, stdout, stderr)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if info := r.Wait(going, 60*time.Second); info.State != rundir.StateSuccess || info.RetractedAt != nil || info.Writeback["n_retracted"] != 0 {
		t.Errorf("the run refused a retraction: state %s, retracted_at %v, writeback %v", info.State, info.RetractedAt, info.Writeback)
	}
	if m := storeCount(t, dir, preds, going); m == 0 {
		t.Error("the run refused a retraction wrote no prelabels")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
