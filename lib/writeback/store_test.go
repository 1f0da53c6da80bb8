package writeback

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"potato-training/internal/teststore"
)

// schemaOf describes a store's tables as sorted text: each column with its
// type, NOT NULL, default and place in the primary key, and each index by
// its columns (not its name), so that two stores made by different code
// compare equal when their constraints are the same.
func schemaOf(t *testing.T, db *sql.DB) []string {
	t.Helper()
	var out []string
	for _, table := range []string{"training_runs", "training_run_items", "training_predictions", "schema_migrations"} {
		rs, err := db.Query(`SELECT name, type, "notnull", quote(dflt_value), pk FROM pragma_table_info(?) ORDER BY cid`, table)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rs.Next() {
			var name, typ, dflt string
			var notnull, pk int
			if err := rs.Scan(&name, &typ, &notnull, &dflt, &pk); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s.%s %s notnull=%d default=%s pk=%d", table, name, typ, notnull, dflt, pk))
			n++
		}
		rs.Close()
		if n == 0 {
			t.Fatalf("no table %s", table)
		}
		idx, err := db.Query(`SELECT l.name, l."unique", l.origin FROM pragma_index_list(?) l`, table)
		if err != nil {
			t.Fatal(err)
		}
		type index struct {
			name, origin string
			unique       int
		}
		var idxs []index
		for idx.Next() {
			var i index
			if err := idx.Scan(&i.name, &i.unique, &i.origin); err != nil {
				t.Fatal(err)
			}
			idxs = append(idxs, i)
		}
		idx.Close()
		for _, i := range idxs {
			var cols []string
			rs, err := db.Query(`SELECT name, "desc" FROM pragma_index_xinfo(?) WHERE key = 1 ORDER BY seqno`, i.name)
			if err != nil {
				t.Fatal(err)
			}
			for rs.Next() {
				var c string
				var desc int
				if err := rs.Scan(&c, &desc); err != nil {
					t.Fatal(err)
				}
				if desc == 1 {
					c += " DESC"
				}
				cols = append(cols, c)
			}
			rs.Close()
			out = append(out, fmt.Sprintf("%s index (%s) unique=%d origin=%s", table, strings.Join(cols, ", "), i.unique, i.origin))
		}
	}
	sort.Strings(out)
	return out
}

// potatoStore makes a project.sqlite from testdata/potato_store.sql: the
// store as Potato's own migration leaves it, written from FORMATS.md and
// not from this package's code. It returns the file's path.
func potatoStore(t *testing.T) string {
	return teststore.PotatoStore(t, filepath.Join(t.TempDir(), StoreName))
}

func openDB(t *testing.T, path string) *sql.DB { return teststore.OpenDB(t, path) }

// The store this package creates has Potato's constraints exactly: the
// same columns, types, NOT NULL, defaults, keys and indexes as the one
// Potato's migration makes, and its migration row.
func TestOpenStoreCreatesPotatoSchema(t *testing.T) {
	s, _ := openTestStore(t)
	want := schemaOf(t, openDB(t, potatoStore(t)))
	got := schemaOf(t, s.db)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("schema differs from Potato's:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM schema_migrations WHERE name = '0001_training_runs' AND applied_at > 0`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("schema_migrations has %d rows 0001_training_runs, want 1", n)
	}
	// Opening it again adds nothing.
	s2, err := OpenStore(filepath.Join(filepath.Dir(storePath(t, s)), StoreName))
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if err := s.db.QueryRow(`SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != 1 {
		t.Errorf("schema_migrations rows after a second open: %d, %v", n, err)
	}
}

func storePath(t *testing.T, s *Store) string {
	t.Helper()
	var seq int
	var name, file string
	if err := s.db.QueryRow(`PRAGMA database_list`).Scan(&seq, &name, &file); err != nil {
		t.Fatal(err)
	}
	return file
}

// sqliteMaster is every object of a store with its SQL, sorted.
func sqliteMaster(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rs, err := db.Query(`SELECT type || ' ' || name || ' ' || coalesce(sql, '') FROM sqlite_master ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var s string
		if err := rs.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// A store that Potato created first is used as it is, and every write
// lands in it: no NULL where Potato says NOT NULL.
func TestWritesIntoAStorePotatoCreated(t *testing.T) {
	path := potatoStore(t)
	before := sqliteMaster(t, openDB(t, path))
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := sqliteMaster(t, s.db); !reflect.DeepEqual(got, before) {
		t.Errorf("OpenStore changed Potato's store:\n got %q\nwant %q", got, before)
	}
	// The least a run row can carry, as a queued run has it.
	if err := s.RecordRun(RunRow{Project: "p", RunID: "20260820T031500-a1b2c3", Trainer: "tfidf-logreg", Status: "queued"}); err != nil {
		t.Fatalf("queued row: %v", err)
	}
	if err := s.RecordRun(RunRow{Project: "p", RunID: "20260820T031500-a1b2c3", Trainer: "tfidf-logreg", Status: "error",
		Error: "fit failed", ErrorCode: "fit_failed", FinishedAt: 1755660000}); err != nil {
		t.Fatalf("error row: %v", err)
	}
	bdir := testBundle(t)
	if _, err := s.RecordItems("p", "20260820T031500-a1b2c3", bdir); err != nil {
		t.Fatal(err)
	}
	preds := filepath.Join(t.TempDir(), "predictions.jsonl")
	writeLines(t, preds, pred{"v1", "sentiment", label("pos", 0.9), conf(0.9)},
		`{"instance_id":"v2","schema_name":"sentiment","payload":"neg","confidence":null}`)
	rep, err := s.Publish(bdir, preds, Options{Project: "p", RunID: "20260820T031500-a1b2c3", Schemas: []string{"sentiment"}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.NWritten != 2 {
		t.Errorf("n_written = %d, want 2", rep.NWritten)
	}
	var row struct {
		backend, names, kinds, trigger, params, metrics, artifact, version, digest, errText, code, host string
		nTrain, seed                                                                                    int
		started                                                                                         sql.NullFloat64
		pid                                                                                             sql.NullInt64
	}
	err = s.db.QueryRow(`SELECT backend, schema_names, kinds, trigger, params, metrics, artifact_dir,
		model_version, bundle_digest, error, error_code, host, n_train, split_seed, started_at, pid
		FROM training_runs WHERE run_id = '20260820T031500-a1b2c3'`).Scan(&row.backend, &row.names, &row.kinds,
		&row.trigger, &row.params, &row.metrics, &row.artifact, &row.version, &row.digest, &row.errText,
		&row.code, &row.host, &row.nTrain, &row.seed, &row.started, &row.pid)
	if err != nil {
		t.Fatal(err)
	}
	if row.backend != "local" || row.names != "[]" || row.kinds != "[]" || row.trigger != "manual" ||
		row.params != "{}" || row.metrics != "{}" || row.errText != "fit failed" || row.code != "fit_failed" ||
		row.started.Valid || row.pid.Valid {
		t.Errorf("run row: %+v", row)
	}
}

func TestRecordRunRefusesWhatPotatoRefuses(t *testing.T) {
	s, _ := openTestStore(t)
	for _, r := range []RunRow{
		{Project: "p", RunID: "r1", Trainer: "t", Status: "fetching"},
		{Project: "p", RunID: "r1", Trainer: "t", Status: "queued", Trigger: "cron"},
	} {
		err := s.RecordRun(r)
		if err == nil || !strings.Contains(err.Error(), "Potato's") {
			t.Errorf("RecordRun(status %q, trigger %q) = %v, want a refusal", r.Status, r.Trigger, err)
		}
	}
	var n int
	s.db.QueryRow(`SELECT count(*) FROM training_runs`).Scan(&n)
	if n != 0 {
		t.Errorf("%d rows written by refused calls", n)
	}
}

func TestOpenStoreSettings(t *testing.T) {
	s, path := openTestStore(t)
	for pragma, want := range map[string]string{
		"journal_mode": "wal",
		"busy_timeout": "5000",
		"synchronous":  "1", // NORMAL
	} {
		var got string
		if err := s.db.QueryRow("PRAGMA " + pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %q, want %q", pragma, got, want)
		}
	}
	// WAL is a property of the file: a plain connection sees it too.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode of the file = %q, want wal", mode)
	}
}

func TestOpenStoreDirectoryAndOddPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "task ?dir#1")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, StoreName)); err != nil {
		t.Errorf("OpenStore(dir) did not create %s: %v", StoreName, err)
	}
}

// Potato may have created the tables already, with columns of its own; the
// store must use them as they are and leave those columns alone.
func TestOpenStoreKeepsPotatoTables(t *testing.T) {
	path := filepath.Join(t.TempDir(), StoreName)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`
CREATE TABLE training_runs (project, run_id, trainer, backend, schema_names, kinds,
  status, trigger, created_at REAL, started_at REAL, finished_at REAL,
  n_train, n_val, n_test, split_seed, params, metrics,
  artifact_dir, model_version, bundle_digest, error, error_code, pid, host,
  notes TEXT DEFAULT 'potato', PRIMARY KEY(project, run_id));
CREATE TABLE training_predictions(project, instance_id, schema_name, run_id, payload,
  confidence REAL, created_at REAL, reviewed INTEGER DEFAULT 0,
  PRIMARY KEY(project, instance_id, schema_name));
INSERT INTO training_predictions VALUES ('p', 'v1', 'sentiment', 'r0', '{}', 0.9, 1, 1);`)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.RecordRun(RunRow{Project: "p", RunID: "r1", Trainer: "t", Status: "success"}); err != nil {
		t.Fatal(err)
	}
	bdir := testBundle(t)
	preds := filepath.Join(t.TempDir(), "predictions.jsonl")
	writeLines(t, preds, pred{"v1", "sentiment", label("pos", 0.9), conf(0.9)})
	rep, err := s.Publish(bdir, preds, Options{Project: "p", RunID: "r1", Schemas: []string{"sentiment"}, CreatedAt: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.NWritten != 1 {
		t.Errorf("n_written = %d, want 1", rep.NWritten)
	}
	var notes string
	var reviewed int
	if err := s.db.QueryRow(`SELECT notes FROM training_runs WHERE run_id = 'r1'`).Scan(&notes); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRow(`SELECT reviewed FROM training_predictions WHERE instance_id = 'v1'`).Scan(&reviewed); err != nil {
		t.Fatal(err)
	}
	if notes != "potato" || reviewed != 1 {
		t.Errorf("Potato's own columns changed: notes %q, reviewed %d", notes, reviewed)
	}
	if got := runOf(t, s.db, "p", "v1", "sentiment"); got != "r1" {
		t.Errorf("prelabel of v1 is run %q, want r1", got)
	}
}

func TestRecordRunUpserts(t *testing.T) {
	path := potatoStore(t)
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := RunRow{
		Project: "p", RunID: "20261202T135501-7f3a00", Trainer: "tfidf-logreg", Backend: "local",
		SchemaNames: []string{"sentiment", "topic"}, Kinds: []string{"nominal", "multilabel"},
		Status: "running", Trigger: "manual", CreatedAt: 1764683701.5, StartedAt: 1764683702,
		NTrain: 70, NVal: 15, NTest: 15, SplitSeed: 42, Params: map[string]any{"c": 1.0},
		BundleDigest: "abc", Pid: 4242, Host: "annot",
	}
	if err := s.RecordRun(r); err != nil {
		t.Fatal(err)
	}
	r.Status, r.FinishedAt, r.Metrics = "success", 1764683800, map[string]float64{"val_accuracy": 0.9, "test_accuracy": 0.85}
	r.ArtifactDir, r.ModelVersion, r.CreatedAt = "runs/x/artifacts", "v3", 1
	if err := s.RecordRun(r); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordRun(RunRow{Project: "other", RunID: r.RunID, Trainer: "t", Status: "queued"}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM training_runs WHERE project = 'p'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d rows for project p, want 1", n)
	}
	var (
		status, names, kinds, params, metrics, artifact, version, trigger, errText, errCode string
		created, finished                                                                   float64
		nTrain, seed, pid                                                                   int
	)
	err = s.db.QueryRow(`SELECT status, schema_names, kinds, params, metrics, artifact_dir,
		model_version, trigger, created_at, finished_at, n_train, split_seed, pid, error, error_code
		FROM training_runs WHERE project = 'p' AND run_id = ?`, r.RunID).Scan(
		&status, &names, &kinds, &params, &metrics, &artifact, &version, &trigger,
		&created, &finished, &nTrain, &seed, &pid, &errText, &errCode)
	if err != nil {
		t.Fatal(err)
	}
	if status != "success" || finished != 1764683800 || created != 1764683701.5 ||
		artifact != "runs/x/artifacts" || version != "v3" || trigger != "manual" ||
		nTrain != 70 || seed != 42 || pid != 4242 {
		t.Errorf("row not updated (or created_at changed): status %q finished %v created %v artifact %q version %q trigger %q n_train %d seed %d pid %d",
			status, finished, created, artifact, version, trigger, nTrain, seed, pid)
	}
	if names != `["sentiment","topic"]` || kinds != `["nominal","multilabel"]` || params != `{"c":1}` ||
		metrics != `{"test_accuracy":0.85,"val_accuracy":0.9}` {
		t.Errorf("JSON columns: schema_names %s kinds %s params %s metrics %s", names, kinds, params, metrics)
	}
	if errText != "" || errCode != "" {
		t.Errorf("error, error_code = %q, %q, want empty", errText, errCode)
	}
	var emptyParams, emptyNames string
	if err := s.db.QueryRow(`SELECT params, schema_names FROM training_runs WHERE project = 'other'`).
		Scan(&emptyParams, &emptyNames); err != nil {
		t.Fatal(err)
	}
	if emptyParams != "{}" || emptyNames != "[]" {
		t.Errorf("empty params, schema_names = %s, %s, want {}, []", emptyParams, emptyNames)
	}
}

func itemRows(t *testing.T, db *sql.DB, project, run string) map[string]string {
	t.Helper()
	rs, err := db.Query(`SELECT instance_id, split FROM training_run_items
		WHERE project = ? AND run_id = ?`, project, run)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[string]string{}
	for rs.Next() {
		var id, split string
		if err := rs.Scan(&id, &split); err != nil {
			t.Fatal(err)
		}
		out[id] = split
	}
	return out
}

func TestRecordItems(t *testing.T) {
	s, _ := openTestStore(t)
	bdir := testBundle(t)
	n, err := s.RecordItems("p", "r1", bdir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"t1": "train", "t2": "train", "v1": "val", "v2": "val", "v3": "val",
		"e1": "test", "e2": "test"}
	if got := itemRows(t, s.db, "p", "r1"); n != 7 || !reflect.DeepEqual(got, want) {
		t.Errorf("RecordItems = %d, rows %v; want 7, %v", n, got, want)
	}

	// A bundle with a manifest: its splits but unlabeled, which Potato does
	// not record either, and no other file. Recording again replaces the
	// run's rows and no other run's.
	if _, err := s.RecordItems("p", "r0", bdir); err != nil {
		t.Fatal(err)
	}
	mdir := t.TempDir()
	writeLines(t, filepath.Join(mdir, "a.jsonl"), row{"x1", "", nil})
	writeLines(t, filepath.Join(mdir, "unlabeled.jsonl"), row{"u1", "", nil}, row{"u2", "", nil})
	writeLines(t, filepath.Join(mdir, "stray.jsonl"), row{"s1", "", nil})
	manifest, _ := json.Marshal(map[string]any{"v": 1, "splits": map[string]any{
		"train":     map[string]any{"path": "a.jsonl", "format": "jsonl", "n": 1},
		"unlabeled": map[string]any{"path": "unlabeled.jsonl", "format": "jsonl", "n": 2},
	}})
	if err := os.WriteFile(filepath.Join(mdir, "manifest.json"), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordItems("p", "r1", mdir); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"x1": "train"}
	if got := itemRows(t, s.db, "p", "r1"); !reflect.DeepEqual(got, want) {
		t.Errorf("after recording again: %v, want %v", got, want)
	}
	if got := itemRows(t, s.db, "p", "r0"); len(got) != 7 {
		t.Errorf("run r0 has %d items after r1 was recorded again, want 7", len(got))
	}
}

// Fault: a split file with a bad row. The error names the file and line,
// and the run's items recorded before stay as they were.
func TestRecordItemsBadRowKeepsItems(t *testing.T) {
	s, _ := openTestStore(t)
	bdir := testBundle(t)
	if _, err := s.RecordItems("p", "r1", bdir); err != nil {
		t.Fatal(err)
	}
	before := itemRows(t, s.db, "p", "r1")
	writeLines(t, filepath.Join(bdir, "val.jsonl"), row{"v1", "", nil}, `{"instance_id": `)
	_, err := s.RecordItems("p", "r1", bdir)
	if err == nil || !strings.Contains(err.Error(), "val.jsonl") || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("RecordItems error = %v, want one naming val.jsonl line 2", err)
	}
	if after := itemRows(t, s.db, "p", "r1"); !reflect.DeepEqual(before, after) {
		t.Errorf("items changed by a failed RecordItems: %v -> %v", before, after)
	}
}

func TestRetractDeletesOnlyThatRun(t *testing.T) {
	s, _ := openTestStore(t)
	bdir := testBundle(t)
	preds := filepath.Join(t.TempDir(), "predictions.jsonl")
	opt := Options{Project: "p", Schemas: []string{"sentiment"}}

	writeLines(t, preds,
		pred{"v1", "sentiment", label("pos", 0.9), conf(0.9)},
		pred{"v2", "sentiment", label("pos", 0.9), conf(0.9)},
		pred{"v3", "sentiment", label("pos", 0.9), conf(0.9)})
	opt.RunID, opt.CreatedAt = "r1", 100
	if _, err := s.Publish(bdir, preds, opt); err != nil {
		t.Fatal(err)
	}
	writeLines(t, preds, pred{"v3", "sentiment", label("neg", 0.8), conf(0.8)})
	opt.RunID, opt.CreatedAt = "r2", 200
	if _, err := s.Publish(bdir, preds, opt); err != nil {
		t.Fatal(err)
	}
	// The same run id in another project is another run.
	opt.Project, opt.RunID = "q", "r1"
	if _, err := s.Publish(bdir, preds, opt); err != nil {
		t.Fatal(err)
	}

	n, err := s.Retract("p", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("Retract deleted %d rows, want 2 (v1, v2; v3 is r2's)", n)
	}
	want := []string{
		`p v3 sentiment r2 {"confidence":0.8,"label":"neg"} 0.8 200`,
		`q v3 sentiment r1 {"confidence":0.8,"label":"neg"} 0.8 200`,
	}
	if got := predictionRows(t, s.db); !reflect.DeepEqual(got, want) {
		t.Errorf("rows after retract:\n got %q\nwant %q", got, want)
	}
	if n, err := s.Retract("p", "r1"); err != nil || n != 0 {
		t.Errorf("second Retract = %d, %v; want 0, nil", n, err)
	}
}

// Potato's server writes the same file. A write that finds the store locked
// waits for the lock (busy_timeout) instead of failing.
func TestWriteWaitsForAnotherWriter(t *testing.T) {
	s, path := openTestStore(t)
	other, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO training_runs (project, run_id, trainer, status, created_at) VALUES ('p', 'held', 't', 'running', 1)`); err != nil {
		t.Fatal(err)
	}
	// The other writer holds the lock a while, then commits; RecordRun,
	// called meanwhile, must wait for the commit, not fail.
	released := make(chan error, 1)
	var committing atomic.Int64
	go func() {
		time.Sleep(300 * time.Millisecond)
		committing.Store(time.Now().UnixNano())
		released <- tx.Commit()
	}()
	if err := s.RecordRun(RunRow{Project: "p", RunID: "r1", Trainer: "t", Status: "queued"}); err != nil {
		t.Fatalf("RecordRun while another writer held the lock: %v", err)
	}
	returned := time.Now().UnixNano()
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if c := committing.Load(); c == 0 || returned < c {
		t.Errorf("RecordRun returned before the other writer committed")
	}
}
