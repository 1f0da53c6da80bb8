package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"

	"potato-training/internal/testproject"
	"potato-training/internal/teststore"
	"potato-training/lib/atomicfile"
	"potato-training/lib/rundir"
)

// potatoID is Potato's run id: UTC YYYYMMDDTHHMMSS, "-", 6 lowercase hex.
var potatoID = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}-[0-9a-f]{6}$`)

// potatoStore creates dir/project.sqlite as Potato's own migration leaves
// it, before any run (teststore.PotatoStore).
func potatoStore(t *testing.T, dir string) string {
	return teststore.PotatoStore(t, filepath.Join(dir, "project.sqlite"))
}

func openDB(t *testing.T, path string) *sql.DB { return teststore.OpenDB(t, path) }

// notNullColumns are training_runs' NOT NULL columns, as the store has them.
func notNullColumns(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rs, err := db.Query(`SELECT name FROM pragma_table_info('training_runs') WHERE "notnull" = 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var cols []string
	for rs.Next() {
		var c string
		rs.Scan(&c)
		cols = append(cols, c)
	}
	return cols
}

// checkRunRow checks the run row of id as Potato reads it: one row, the
// status, no NULL and no empty JSON where Potato expects content, kinds
// and schema_names lists, a trigger Potato knows, a host, flat numeric
// metrics and the id in Potato's format. It returns the row's metrics.
func checkRunRow(t *testing.T, db *sql.DB, id, status string) map[string]float64 {
	t.Helper()
	var n int
	db.QueryRow(`SELECT count(*) FROM training_runs WHERE run_id = ?`, id).Scan(&n)
	if n != 1 {
		t.Fatalf("%d rows for run %s in training_runs, want 1", n, id)
	}
	if !potatoID.MatchString(id) {
		t.Errorf("run id %q is not in Potato's format", id)
	}
	for _, c := range notNullColumns(t, db) {
		var nulls int
		if err := db.QueryRow(`SELECT count(*) FROM training_runs WHERE run_id = ? AND "`+c+`" IS NULL`, id).Scan(&nulls); err != nil {
			t.Fatal(err)
		}
		if nulls != 0 {
			t.Errorf("training_runs.%s is NULL", c)
		}
	}
	var st, names, kinds, trigger, host, metrics, artifact, errCode string
	err := db.QueryRow(`SELECT status, schema_names, kinds, trigger, host, metrics, artifact_dir, error_code
		FROM training_runs WHERE run_id = ?`, id).Scan(&st, &names, &kinds, &trigger, &host, &metrics, &artifact, &errCode)
	if err != nil {
		t.Fatal(err)
	}
	if st != status {
		t.Errorf("status %q, want %q", st, status)
	}
	var nameList, kindList []string
	if json.Unmarshal([]byte(names), &nameList) != nil || json.Unmarshal([]byte(kinds), &kindList) != nil ||
		len(nameList) == 0 || len(kindList) != len(nameList) {
		t.Errorf("schema_names %s, kinds %s: want two lists of the same length", names, kinds)
	}
	if trigger != "manual" && trigger != "auto" && trigger != "api" {
		t.Errorf("trigger %q", trigger)
	}
	if host == "" || artifact == "" {
		t.Errorf("host %q, artifact_dir %q: want both set", host, artifact)
	}
	if status == "error" && errCode == "" {
		t.Errorf("a failed run's error_code is empty")
	}
	var m map[string]float64
	if err := json.Unmarshal([]byte(metrics), &m); err != nil {
		t.Errorf("metrics %s is not a flat object of numbers: %v", metrics, err)
	}
	return m
}

// The bar: a project.sqlite that Potato created first. A successful run
// leaves one run row (success, kinds a list, test_accuracy a number) and
// its prediction rows; while runs wait and train, their rows say so.
func TestRunsLandInAStorePotatoCreated(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 300, 240, "")
	store := potatoStore(t, dir)
	db := openDB(t, store)

	// A run that waits for a file, and one queued behind it: Potato's page
	// shows both in progress.
	stop := filepath.Join(dir, "stop")
	t.Cleanup(func() { os.WriteFile(stop, nil, 0o644) })
	first := detachRun(t, cfg, trainerProgram(t, dir, `i=0; while [ ! -e `+stop+` ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
`+resultLines))
	testproject.WaitFor(t, "the first run to train", func() bool { return testproject.Read(t, dir, first).State == rundir.StateRunning })
	second := run(t, "run", cfg, "--trainer", "tfidf-logreg", "--schemas", "sentiment", "--detach")
	if second.code != 0 {
		t.Fatalf("second run: %d %s", second.code, second.stderr)
	}
	secondID := strings.TrimSpace(second.stdout)
	testproject.WaitFor(t, "the second run to queue", func() bool {
		return strings.Contains(testproject.Read(t, dir, secondID).Step, "waiting in the queue behind")
	})
	statusOf := func(id string) string {
		var s string
		db.QueryRow(`SELECT status FROM training_runs WHERE run_id = ?`, id).Scan(&s)
		return s
	}
	if a, b := statusOf(first), statusOf(secondID); a != "running" || b != "queued" {
		t.Errorf("in progress, Potato's store says %q and %q, want running and queued", a, b)
	}
	os.WriteFile(stop, nil, 0o644)
	testproject.WaitFor(t, "both runs to end", func() bool {
		return testproject.Read(t, dir, first).Finished && testproject.Read(t, dir, secondID).Finished
	})

	info := testproject.Read(t, dir, secondID)
	if info.State != rundir.StateSuccess {
		t.Fatalf("run %s: %s %s\n%s", secondID, info.State, info.Error, runLog(t, dir, secondID))
	}
	m := checkRunRow(t, db, secondID, "success")
	if _, ok := m["test_accuracy"]; !ok {
		t.Errorf("metrics lack test_accuracy: %v", m)
	}
	for _, k := range []string{"test_macro_f1", "val_accuracy", "fit_seconds"} {
		if _, ok := m[k]; !ok {
			t.Errorf("metrics lack %s: %v", k, m)
		}
	}
	if m["test_accuracy"] != info.Heldout.Accuracy || m["accuracy"] != info.Heldout.Accuracy {
		t.Errorf("test_accuracy %v and accuracy %v (what Potato's page shows), run.json's held-out accuracy %v",
			m["test_accuracy"], m["accuracy"], info.Heldout.Accuracy)
	}
	var kinds, artifact string
	db.QueryRow(`SELECT kinds, artifact_dir FROM training_runs WHERE run_id = ?`, secondID).Scan(&kinds, &artifact)
	if kinds != `["nominal"]` || artifact != filepath.Join(testproject.Root(dir).RunDir(secondID), "artifacts") {
		t.Errorf("kinds %s, artifact_dir %s", kinds, artifact)
	}
	var preds int
	db.QueryRow(`SELECT count(*) FROM training_predictions WHERE run_id = ?`, secondID).Scan(&preds)
	if preds == 0 || preds != info.Writeback["n_written"] {
		t.Errorf("%d prediction rows, run.json says %d written", preds, info.Writeback["n_written"])
	}
	checkRunRow(t, db, first, "success")
}

// The bar: a failing run leaves a row with status error and its code, in
// a store Potato created.
func TestFailedRunsLeaveErrorRows(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	db := openDB(t, potatoStore(t, dir))
	for _, c := range []struct{ body, code string }{
		{`echo '{"v":1,"event":"error","code":"fit_failed","message":"the loss diverged"}'; exit 1`, "fit_failed"},
		{`exit 0`, "no_result"},
	} {
		r := run(t, "run", cfg, "--trainer", trainerProgram(t, dir, c.body), "--schemas", "sentiment")
		id := strings.TrimSpace(r.stdout)
		if r.code != 1 {
			t.Fatalf("exit %d, want 1: %s", r.code, r.stderr)
		}
		checkRunRow(t, db, id, "error")
		var code, msg string
		db.QueryRow(`SELECT error_code, error FROM training_runs WHERE run_id = ?`, id).Scan(&code, &msg)
		if code != c.code || msg == "" {
			t.Errorf("error row: code %q, error %q; want %s", code, msg, c.code)
		}
	}
}

// readOnlyCommand makes cmd run with the store read-only. Root may write
// a file whatever its mode, so for root the command runs in a mount
// namespace of its own (unshare -m) where the store file is bind-mounted
// over itself read-only: a write to it fails with EROFS, and the mount
// ends with the namespace. Another user gets chmod 0444, which binds it.
func readOnlyCommand(t *testing.T, cmd *exec.Cmd, store string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(store, 0o444); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(store, 0o644) })
		return
	}
	script := fmt.Sprintf(`mount --bind %[1]q %[1]q && mount -o remount,ro,bind %[1]q && exec "$@"`, store)
	cmd.Args = append([]string{"unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/usr/bin/unshare"
}

// The bar: with the store read-only from the start, dispatch exits
// non-zero and says why: the SQLite error and the store's path.
func TestReadOnlyStoreFailsTheRun(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	store := potatoStore(t, dir)
	cmd := dispatchCmd(t, "run", cfg, "--trainer", "tfidf-logreg", "--schemas", "sentiment")
	readOnlyCommand(t, cmd, store)
	code, out, errb := testproject.Exec(t, cmd)
	if code == 0 {
		t.Fatalf("a run with a read-only store exited 0:\n%s", errb)
	}
	if !strings.Contains(errb, store) || !strings.Contains(errb, "readonly") {
		t.Errorf("stderr does not give the store's path and the SQLite error:\n%s", errb)
	}
	id := strings.TrimSpace(out)
	info := testproject.Read(t, dir, id)
	if info.State != rundir.StateError || info.ErrorCode != "store_failed" || !info.Finished {
		t.Errorf("run.json: %s %s %q", info.State, info.ErrorCode, info.Error)
	}
	var n int
	openDB(t, store).QueryRow(`SELECT count(*) FROM training_runs`).Scan(&n)
	if n != 0 {
		t.Errorf("%d rows in a store that was read-only", n)
	}
}

// predictionRows is training_predictions, sorted text.
func predictionRows(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rs, err := db.Query(`SELECT instance_id, schema_name, run_id, payload, quote(confidence), created_at FROM training_predictions`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var id, schema, run, payload, c string
		var at float64
		rs.Scan(&id, &schema, &run, &payload, &c, &at)
		out = append(out, fmt.Sprintf("%s %s %s %s %s %v", id, schema, run, payload, c, at))
	}
	sort.Strings(out)
	return out
}

// The fault: the store turns read-only while the run trains. Expected:
// the run fails with store_failed and says so, its predictions stay in
// the run directory, the next command records the run's end in the store
// once it can be written, and potato-dispatch writeback applies them once the
// store can be written, as often as it is called, with the same result.
func TestStoreFailureThenWriteback(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 60, 50, "")
	store := potatoStore(t, dir)
	lock := `chmod 0444 "$store"`
	if os.Geteuid() == 0 {
		lock = `mount --bind "$store" "$store" && mount -o remount,ro,bind "$store"`
	}
	tr := trainerProgram(t, dir, `store=`+store+`
mkdir -p artifacts
cat bundle/test.jsonl bundle/unlabeled.jsonl | grep -o '"instance_id":"[^"]*"' | sed 's/.*:"//; s/"$//' |
while read id; do
  echo "{\"instance_id\":\"$id\",\"schema_name\":\"sentiment\",\"payload\":{\"label\":\"positive\",\"confidence\":0.9},\"confidence\":0.9}"
done > artifacts/predictions.jsonl
`+lock+`
if ( : >> "$store" ) 2>/dev/null; then echo '{"v":1,"event":"error","code":"fit_failed","message":"the store is still writable"}'; exit 1; fi
echo '{"v":1,"event":"result","status":"success","predictions_file":"predictions.jsonl","model_version":"m1"}'`)
	cmd := dispatchCmd(t, "run", cfg, "--trainer", tr, "--schemas", "sentiment")
	if os.Geteuid() == 0 {
		cmd.Args = append([]string{"unshare", "-m", "--propagation", "private", cmd.Path}, cmd.Args[1:]...)
		cmd.Path = "/usr/bin/unshare"
	} else {
		t.Cleanup(func() { os.Chmod(store, 0o644) })
	}
	code, out, errb := testproject.Exec(t, cmd)
	id := strings.TrimSpace(out)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s\n%s", code, errb, runLog(t, dir, id))
	}
	if !strings.Contains(errb, store) || !strings.Contains(errb, "readonly") || !strings.Contains(errb, "potato-dispatch writeback") {
		t.Errorf("stderr should give the store, the SQLite error and the way out:\n%s", errb)
	}
	info := testproject.Read(t, dir, id)
	if info.State != rundir.StateError || info.ErrorCode != "store_failed" || !info.WritebackPending {
		se, _ := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(id), "stderr.log"))
		t.Fatalf("run.json: %s %s pending=%v %q\n%s", info.State, info.ErrorCode, info.WritebackPending, info.Error, se)
	}
	if _, err := os.Stat(filepath.Join(testproject.Root(dir).RunDir(id), "predictions.jsonl")); err != nil {
		t.Fatalf("the predictions did not stay in the run directory: %v", err)
	}
	db := openDB(t, store)
	var n int
	db.QueryRow(`SELECT count(*) FROM training_predictions`).Scan(&n)
	if n != 0 {
		t.Fatalf("%d prelabels written by a failed write-back", n)
	}
	if os.Geteuid() != 0 {
		os.Chmod(store, 0o644)
	}

	// Once the store can be written, the next command records the run's
	// end in it; the predictions still wait for writeback.
	if r := run(t, "status", cfg); r.code != 0 {
		t.Fatalf("status: %d %s", r.code, r.stderr)
	}
	checkRunRow(t, db, id, "error")
	var ecode string
	db.QueryRow(`SELECT error_code FROM training_runs WHERE run_id = ?`, id).Scan(&ecode)
	if info := testproject.Read(t, dir, id); ecode != "store_failed" || info.StoreError != "" || !info.WritebackPending {
		t.Errorf("after status: the store says error_code %q; run.json store_error %q, pending %v", ecode, info.StoreError, info.WritebackPending)
	}

	var rows []string
	for i := range 2 {
		r := run(t, "writeback", cfg, id)
		if r.code != 0 {
			t.Fatalf("writeback %d: exit %d: %s", i+1, r.code, r.stderr)
		}
		if !strings.Contains(r.stdout, "prelabels") {
			t.Errorf("writeback says %q", r.stdout)
		}
		m := checkRunRow(t, db, id, "success")
		if _, ok := m["test_accuracy"]; !ok {
			t.Errorf("metrics lack test_accuracy: %v", m)
		}
		got := predictionRows(t, db)
		if len(got) == 0 {
			t.Fatalf("no prelabels after writeback")
		}
		if i == 1 && strings.Join(got, "\n") != strings.Join(rows, "\n") {
			t.Errorf("a second writeback changed the prelabels")
		}
		rows = got
	}
	info = testproject.Read(t, dir, id)
	if info.State != rundir.StateSuccess || info.WritebackPending || info.StoreError != "" || info.Writeback["n_written"] != len(rows) {
		t.Errorf("run.json after writeback: %s pending=%v store_error=%q writeback=%v", info.State, info.WritebackPending, info.StoreError, info.Writeback)
	}
	if c, _ := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(id), "exit_code")); string(c) != "0\n" {
		t.Errorf("exit_code after writeback %q", c)
	}
	if r := run(t, "writeback", cfg, "20990101T000000-abcdef"); r.code == 0 {
		t.Errorf("writeback of a run that does not exist exited 0")
	}
}

// killDispatch starts a detached run whose trainer waits, kills its
// dispatch with SIGKILL and waits for it to be gone. run.json still says
// running: nobody has looked yet.
func killDispatch(t *testing.T, dir, cfg, stop string) string {
	t.Helper()
	id := detachRun(t, cfg, trainerProgram(t, dir, `i=0; while [ ! -e `+stop+` ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done`))
	testproject.WaitFor(t, "running", func() bool { return testproject.Read(t, dir, id).State == rundir.StateRunning })
	pid := testproject.Read(t, dir, id).PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testproject.WaitFor(t, "the dispatch to die", func() bool { return syscall.Kill(pid, 0) != nil })
	testproject.WaitFor(t, "the run to be reported gone", func() bool { return testproject.Read(t, dir, id).Gone })
	if rec := rawRecord(t, dir, id); rec.State != rundir.StateRunning {
		t.Fatalf("run.json before anyone looked: %s", rec.State)
	}
	return id
}

func rawRecord(t *testing.T, dir, id string) rundir.Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(id), "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec rundir.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// The fault: kill -9 of a detached dispatch. Expected: the next dispatch,
// or the next status, writes the end into run.json (error,
// dispatch_lost) and into Potato's store, once.
func TestKilledDispatchIsSettled(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	db := openDB(t, potatoStore(t, dir))
	stop1, stop2 := filepath.Join(dir, "stop1"), filepath.Join(dir, "stop2")
	t.Cleanup(func() {
		// The orphaned trainers wait for these.
		os.WriteFile(stop1, nil, 0o644)
		os.WriteFile(stop2, nil, 0o644)
	})

	settled := func(id string) {
		t.Helper()
		rec := rawRecord(t, dir, id)
		if rec.State != rundir.StateError || rec.ErrorCode != "dispatch_lost" || rec.FinishedAt == nil ||
			rec.ExitCode == nil || *rec.ExitCode != 1 || rec.StoreError != "" {
			t.Errorf("run.json of a killed dispatch's run: %+v", rec)
		}
		if c, _ := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(id), "exit_code")); string(c) != "1\n" {
			t.Errorf("exit_code %q", c)
		}
		checkRunRow(t, db, id, "error")
		var code string
		db.QueryRow(`SELECT error_code FROM training_runs WHERE run_id = ?`, id).Scan(&code)
		if code != "dispatch_lost" {
			t.Errorf("store error_code %q", code)
		}
	}

	// The next dispatch settles it.
	lost := killDispatch(t, dir, cfg, stop1)
	next := run(t, "run", cfg, "--trainer", trainerProgram(t, dir, resultLines), "--schemas", "sentiment")
	if next.code != 0 {
		t.Fatalf("the next run: %d %s", next.code, next.stderr)
	}
	settled(lost)

	// The next status settles it, once.
	lost = killDispatch(t, dir, cfg, stop2)
	r := run(t, "status", cfg)
	if r.code != 0 || !strings.Contains(r.stdout, lost) {
		t.Fatalf("status: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	settled(lost)
	before, _ := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(lost), "run.json"))
	r = run(t, "status", cfg, lost, "--json")
	var rec rundir.Record
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || rec.ErrorCode != "dispatch_lost" {
		t.Errorf("status --json: %v %+v", err, rec)
	}
	after, _ := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(lost), "run.json"))
	if string(before) != string(after) {
		t.Errorf("a second status rewrote run.json")
	}
	if log := runLog(t, dir, lost); strings.Count(log, "recorded as error (dispatch_lost)") != 1 {
		t.Errorf("run.log should say once that the run was settled:\n%s", log)
	}
}

// The fault: the dispatch is killed while it writes the predictions into
// the store, after it collected them. Expected: the run is settled as
// error (dispatch_lost) with writeback_pending, and potato-dispatch
// writeback writes its predictions and makes it the success it would have
// been; a run lost
// before its predictions were in the run directory stays an error, with
// no prelabels.
func TestWritebackOfARunLostInItsWriteback(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 60, 50, "")
	db := openDB(t, potatoStore(t, dir))
	lose := func(collected bool) string {
		t.Helper()
		r := run(t, "run", cfg, "--trainer", "tfidf-logreg", "--schemas", "sentiment")
		id := strings.TrimSpace(r.stdout)
		if r.code != 0 {
			t.Fatalf("run: exit %d: %s", r.code, r.stderr)
		}
		// As a dispatch killed in its write-back leaves it: no exit_code,
		// run.json fetching, nothing of the run's in the store yet.
		rec := rawRecord(t, dir, id)
		rec.State, rec.Step, rec.ExitCode, rec.FinishedAt, rec.Writeback, rec.Heldout, rec.Metrics = rundir.StateFetching, "collecting the predictions", nil, nil, nil, nil, nil
		if !collected {
			rec.ArtifactURI = ""
			os.Remove(filepath.Join(testproject.Root(dir).RunDir(id), rundir.PredictionsFile))
		}
		b, _ := json.Marshal(rec)
		if err := atomicfile.WriteFile(filepath.Join(testproject.Root(dir).RunDir(id), "run.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(testproject.Root(dir).RunDir(id), "exit_code"))
		if _, err := db.Exec(`DELETE FROM training_predictions WHERE run_id = ?`, id); err != nil {
			t.Fatal(err)
		}
		if testproject.Read(t, dir, id).ErrorCode != "dispatch_lost" {
			t.Fatalf("the run is not reported lost: %+v", testproject.Read(t, dir, id))
		}
		return id
	}
	count := func(id string) (n int) {
		db.QueryRow(`SELECT count(*) FROM training_predictions WHERE run_id = ?`, id).Scan(&n)
		return n
	}

	id := lose(true)
	if r := run(t, "status", cfg, id); r.code != 0 || !strings.Contains(r.stdout, "potato-dispatch writeback") {
		t.Errorf("status of a run lost in its write-back should say writeback:\n%s%s", r.stdout, r.stderr)
	}
	if rec := rawRecord(t, dir, id); rec.ErrorCode != "dispatch_lost" || !rec.WritebackPending {
		t.Errorf("run.json of a run lost in its write-back: %s pending=%v", rec.ErrorCode, rec.WritebackPending)
	}
	r := run(t, "writeback", cfg, id)
	if r.code != 0 || !strings.Contains(r.stdout, "was error (dispatch_lost), now success") {
		t.Fatalf("writeback: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	info := testproject.Read(t, dir, id)
	if n := count(id); n == 0 || info.State != rundir.StateSuccess || info.Writeback["n_written"] != n || info.Heldout == nil {
		t.Errorf("after writeback: %d prelabels, run.json %s writeback=%v heldout=%v", n, info.State, info.Writeback, info.Heldout)
	}
	checkRunRow(t, db, id, "success")
	if c, _ := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(id), "exit_code")); string(c) != "0\n" {
		t.Errorf("exit_code after writeback %q", c)
	}

	id = lose(false)
	if r := run(t, "writeback", cfg, id); r.code != 0 {
		t.Fatalf("writeback: exit %d: %s", r.code, r.stderr)
	}
	if n, info := count(id), testproject.Read(t, dir, id); n != 0 || info.State != rundir.StateError || info.ErrorCode != "dispatch_lost" {
		t.Errorf("a run lost before it collected its predictions: %d prelabels, run.json %s/%s", n, info.State, info.ErrorCode)
	}
}
