package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
)

// negativeTrainer predicts "negative" at 0.9 for every test and unlabeled
// item of the bundle.
const negativeTrainer = `mkdir -p artifacts
cat bundle/test.jsonl bundle/unlabeled.jsonl | grep -o '"instance_id":"[^"]*"' | sed 's/.*:"//; s/"$//' |
while read id; do
  echo "{\"instance_id\":\"$id\",\"schema_name\":\"sentiment\",\"payload\":{\"label\":\"negative\",\"confidence\":0.9},\"confidence\":0.9}"
done > artifacts/predictions.jsonl
echo '{"v":1,"event":"result","status":"success","predictions_file":"predictions.jsonl"}'`

type previewJSON struct {
	RunID  string `json:"run_id"`
	Report struct {
		NWritten int `json:"n_written"`
	} `json:"report"`
	Schemas []struct {
		Schema                                   string
		Added, Changed, Removed, Kept, Untouched int
		HeldByNewerRun                           int `json:"held_by_newer_run"`
		LabeledTouched                           int `json:"labeled_touched"`
	}
}

// The preview of a write-back: the run log says, before a run publishes,
// how many prelabels it will add, change, remove and keep and how many of
// those it adds or changes are on items annotators labelled; the counts
// are those worked out from the store before the run and the run's own
// predictions. potato-dispatch writeback --dry-run says the same of a
// finished run and writes nothing: applied again, a run keeps every
// prelabel; after its retraction it would add them all; after a newer run,
// the items that run holds are not its to write.
func TestWritebackDryRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// promote: always (the writeback block ends the config): the second
	// run, worse than the first, is published all the same.
	r := &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir, Config: testproject.Write(t, dir, 60, 40, "    promote: always\n")}
	res := r.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	if res.Code != 0 {
		t.Fatalf("run: exit %d: %s", res.Code, res.Stderr)
	}
	a := res.ID
	nA := r.Info(a).Writeback["n_written"]
	labelledA := storeCount(t, dir, `SELECT count(*) FROM training_predictions p JOIN training_run_items i
		ON i.run_id = p.run_id AND i.instance_id = p.instance_id WHERE p.run_id = ? AND i.split != 'unlabeled'`, a)
	want := fmt.Sprintf("write-back preview, sentiment: %d added, 0 changed, 0 removed, 0 kept; %d of the added and changed on items annotators have labelled\n", nA, labelledA)
	if log := r.File(a, "run.log"); nA == 0 || !strings.Contains(log, want) || strings.Index(log, want) > strings.Index(log, "write-back to ") {
		t.Errorf("run.log of the first run does not say %q before its write-back:\n%s", want, log)
	}

	dryRun := func(id string) previewJSON {
		t.Helper()
		logBefore := r.File(id, "run.log")
		rows := storeCount(t, dir, `SELECT count(*) FROM training_predictions`)
		code, stdout, stderr := runDispatch(t, r, nil, "writeback", r.Config, id, "--dry-run", "--json")
		var p previewJSON
		if err := json.Unmarshal([]byte(stdout), &p); err != nil || code != 0 || len(p.Schemas) != 1 {
			t.Fatalf("writeback --dry-run --json: exit %d, %v, stdout %q, stderr %q", code, err, stdout, stderr)
		}
		if r.File(id, "run.log") != logBefore || storeCount(t, dir, `SELECT count(*) FROM training_predictions`) != rows {
			t.Errorf("writeback --dry-run wrote to run.log or the store")
		}
		return p
	}
	if p := dryRun(a).Schemas[0]; p.Added != 0 || p.Changed != 0 || p.Removed != 0 || p.Kept != nA || p.Untouched != 0 {
		t.Errorf("the run applied again: %+v, want all %d kept", p, nA)
	}
	code, stdout, _ := runDispatch(t, r, nil, "writeback", r.Config, a, "--dry-run")
	if wantLine := fmt.Sprintf("sentiment: 0 added, 0 changed, 0 removed, %d kept; 0 of the added and changed on items annotators have labelled\n", nA); code != 0 || !strings.Contains(stdout, wantLine) {
		t.Errorf("writeback --dry-run: exit %d, want %q in\n%s", code, wantLine, stdout)
	}
	if code, _, _ := runDispatch(t, r, nil, "retract", r.Config, a); code != 0 {
		t.Fatal("retract failed")
	}
	if p := dryRun(a).Schemas[0]; p.Added != nA || p.Kept != 0 || p.LabeledTouched != labelledA {
		t.Errorf("after a retraction: %+v, want %d added, %d of them labelled", p, nA, labelledA)
	}
	if code, _, _ := runDispatch(t, r, nil, "writeback", r.Config, a); code != 0 {
		t.Fatal("writeback failed")
	}

	// Bob labels five items nobody had; a second run predicts negative on
	// every test and unlabeled item of its bundle.
	before := map[string]string{}
	rows, err := sqlDB(t, dir).Query(`SELECT instance_id, json_extract(payload, '$.label') FROM training_predictions`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, label string
		if err := rows.Scan(&id, &label); err != nil {
			t.Fatal(err)
		}
		before[id] = label
	}
	rows.Close()
	bob := map[string]any{}
	for i := 41; i <= 45; i++ {
		label := "positive"
		if i%2 == 0 {
			label = "negative"
		}
		bob[fmt.Sprintf("r%d", i)] = []any{[]any{map[string]string{"schema": "sentiment", "name": label}, "true"}}
	}
	writeState(t, dir, "bob", bob)
	res = r.Run("--trainer", testproject.Trainer(t, t.TempDir(), negativeTrainer), "--schemas", "sentiment")
	if res.Code != 0 {
		t.Fatalf("second run: exit %d: %s", res.Code, res.Stderr)
	}
	b := res.ID
	pred, err := os.ReadFile(filepath.Join(r.Root().RunDir(b), "predictions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var added, changed, kept, touched int
	predicted := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(pred)), "\n") {
		var p struct {
			ID string `json:"instance_id"`
		}
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatal(err)
		}
		predicted[p.ID] = true
		var n int
		fmt.Sscanf(p.ID, "r%d", &n)
		labelled := n <= 45
		switch before[p.ID] {
		case "":
			added++
		case "negative":
			kept++
			continue
		default:
			changed++
		}
		if labelled {
			touched++
		}
	}
	untouched := 0
	for id := range before {
		if !predicted[id] {
			untouched++
		}
	}
	want = fmt.Sprintf("write-back preview, sentiment: %d added, %d changed, 0 removed, %d kept; %d of the added and changed on items annotators have labelled", added, changed, kept, touched)
	if untouched > 0 {
		want += fmt.Sprintf("; %d prelabels of other runs left as they are", untouched)
	}
	if log := r.File(b, "run.log"); changed == 0 || kept == 0 || !strings.Contains(log, want+"\n") {
		t.Errorf("run.log of the second run does not say %q:\n%s", want, log)
	}

	// The first run again: the second holds every item it predicted.
	held := 0
	for id := range before {
		if predicted[id] {
			held++
		}
	}
	if p := dryRun(a).Schemas[0]; p.HeldByNewerRun != held || p.Kept != nA-held || p.Added+p.Changed != 0 {
		t.Errorf("the first run after the second: %+v, want %d held by the newer run and %d kept", p, held, nA-held)
	}
}

func writeState(t *testing.T, dir, user string, state map[string]any) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "annotation_output", user), 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"user_id": user, "instance_id_to_label_to_value": state})
	if err := os.WriteFile(filepath.Join(dir, "annotation_output", user, "user_state.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func sqlRow(t *testing.T, dir, query string, args ...any) *sql.Row {
	t.Helper()
	return sqlDB(t, dir).QueryRow(query, args...)
}

// sqlDB opens Potato's store of the project in dir until the test ends.
func sqlDB(t *testing.T, dir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dir, "project.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
