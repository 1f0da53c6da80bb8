// Package writeback is everything of Potato's store: its path
// (StorePath), schema and rows (a run's row, RunRowOf; its items; its
// prelabels), and what a run's predictions do to it: scored on the
// held-out split, calibrated, previewed, gated, published and retracted.
// The dispatch only orchestrates these.
//
// The store is Potato's <task_dir>/project.sqlite (FORMATS.md, "Potato's
// store"): training_runs, training_run_items and training_predictions, every
// row keyed by project. Store creates the tables when they are missing and
// never alters tables Potato already made, so columns Potato adds are left
// alone. Every write is one transaction: it lands whole or not at all.
//
// The package uses database/sql and does not link the SQLite driver
// (modernc.org/sqlite, registered as "sqlite"): the packages that open
// the store import it (lib/dispatch, lib/report), so that the many that
// only use the store's types, scores and path do not link its 6 MB of
// code. OpenStore says so when a program lacks it.
package writeback

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"potato-training/lib/bundle"
)

// Driver is the database/sql driver that opens the store: modernc.org/sqlite
// registers it, in the programs that import that package.
const Driver = "sqlite"

// HasDriver is an error when this program links no SQLite driver: a
// program that opens the store imports modernc.org/sqlite.
func HasDriver() error {
	if !slices.Contains(sql.Drivers(), Driver) {
		return errors.New("this program links no SQLite driver (modernc.org/sqlite)")
	}
	return nil
}

// StoreName is the store's file name inside Potato's task_dir.
const StoreName = "project.sqlite"

// MigrationName is the row of schema_migrations that says the training
// tables exist, as Potato records it.
const MigrationName = "0001_training_runs"

// schemaSQL creates the tables, indexes and the schema_migrations row of
// FORMATS.md ("Potato's store") exactly as Potato's own migration
// 0001_training_runs does: the same columns, NOT NULL constraints, defaults,
// primary keys and indexes, so a store that either side created first is
// the same store. CREATE ... IF NOT EXISTS changes no table or index that
// exists already; the migration row is added when missing, as Potato would
// add it on finding its tables in place.
const schemaSQL = `
CREATE TABLE IF NOT EXISTS schema_migrations (
	name TEXT PRIMARY KEY,
	applied_at
);
CREATE TABLE IF NOT EXISTS training_runs (
	project TEXT NOT NULL,
	run_id TEXT NOT NULL,
	trainer TEXT NOT NULL,
	backend TEXT NOT NULL DEFAULT 'local',
	schema_names TEXT NOT NULL DEFAULT '[]',
	kinds TEXT NOT NULL DEFAULT '[]',
	status TEXT NOT NULL,
	trigger TEXT NOT NULL DEFAULT 'manual',
	created_at REAL NOT NULL,
	started_at REAL,
	finished_at REAL,
	n_train INTEGER NOT NULL DEFAULT 0,
	n_val INTEGER NOT NULL DEFAULT 0,
	n_test INTEGER NOT NULL DEFAULT 0,
	split_seed INTEGER NOT NULL DEFAULT 0,
	params TEXT NOT NULL DEFAULT '{}',
	metrics TEXT NOT NULL DEFAULT '{}',
	artifact_dir TEXT NOT NULL DEFAULT '',
	model_version TEXT NOT NULL DEFAULT '',
	bundle_digest TEXT NOT NULL DEFAULT '',
	error TEXT NOT NULL DEFAULT '',
	error_code TEXT NOT NULL DEFAULT '',
	pid INTEGER,
	host TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (project, run_id)
);
CREATE INDEX IF NOT EXISTS idx_training_runs_recent
	ON training_runs (project, created_at DESC);
CREATE TABLE IF NOT EXISTS training_run_items (
	project TEXT NOT NULL,
	run_id TEXT NOT NULL,
	instance_id TEXT NOT NULL,
	split TEXT NOT NULL,
	PRIMARY KEY (project, run_id, instance_id)
);
CREATE INDEX IF NOT EXISTS idx_training_run_items_split
	ON training_run_items (project, run_id, split);
CREATE TABLE IF NOT EXISTS training_predictions (
	project TEXT NOT NULL,
	instance_id TEXT NOT NULL,
	schema_name TEXT NOT NULL,
	run_id TEXT NOT NULL,
	payload TEXT NOT NULL,
	confidence REAL,
	created_at REAL NOT NULL,
	PRIMARY KEY (project, instance_id, schema_name)
);
CREATE INDEX IF NOT EXISTS idx_training_predictions_run
	ON training_predictions (project, run_id);
`

// Statuses Potato accepts in training_runs.status, in life-cycle order.
var Statuses = []string{"queued", "building", "running", "evaluating", "success", "error", "cancelled"}

// Triggers Potato accepts in training_runs.trigger.
var Triggers = []string{"manual", "auto", "api"}

// Store is an open project.sqlite. Its methods are safe for concurrent use;
// writes are serialised on one connection.
type Store struct {
	db *sql.DB
}

// OpenStore opens the store at path, creating the file and the tables when
// they are missing. path is the database file; an existing directory stands
// for <dir>/project.sqlite. The connection uses WAL, a busy timeout of 5 s
// (Potato's server writes the same file) and synchronous=NORMAL, and takes
// the write lock when a transaction begins, so two writers wait for each
// other instead of failing halfway. Its page cache is up to 128 MB, not
// SQLite's 2 MB: a write-back of a million prelabels in one transaction
// otherwise spills its pages to the WAL and reads them back (a third of
// its time), while the cache's bound keeps memory from growing with the
// project.
func OpenStore(path string) (*Store, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, StoreName)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("writeback: %w", err)
	}
	// A file: URI, so that '?' or '#' in the path stay part of the name.
	dsn := "file:" + (&url.URL{Path: filepath.ToSlash(abs)}).EscapedPath() +
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=cache_size(-131072)&_txlock=immediate"
	if err := HasDriver(); err != nil {
		return nil, fmt.Errorf("writeback: open %q: %w", path, err)
	}
	db, err := sql.Open(Driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("writeback: open %q: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if err := createSchema(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("writeback: open %q: %w", path, err)
	}
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		db.Close()
		return nil, fmt.Errorf("writeback: open %q: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		db.Close()
		return nil, fmt.Errorf("writeback: open %q: journal mode is %q, not wal", path, mode)
	}
	return &Store{db: db}, nil
}

// schemaTables are the tables schemaSQL makes.
var schemaTables = []string{"schema_migrations", "training_runs", "training_run_items", "training_predictions"}

// createSchema makes what schemaSQL makes and records the migration, in one
// transaction, unless the tables and the migration row are there already:
// a store that Potato made is then only read (its indexes, whatever their
// names, are left as they are), so that a read-only store still opens.
func createSchema(db *sql.DB) error {
	var n, done int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?, ?)`,
		schemaTables[0], schemaTables[1], schemaTables[2], schemaTables[3]).Scan(&n); err != nil {
		return err
	}
	if n == len(schemaTables) {
		if err := db.QueryRow(`SELECT count(*) FROM schema_migrations WHERE name = ?`, MigrationName).Scan(&done); err != nil {
			return err
		}
		if done > 0 {
			return nil
		}
	}
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(schemaSQL); err != nil {
		return err
	}
	if _, err := tx.Exec(`INSERT INTO schema_migrations (name, applied_at) SELECT ?1, ?2
		WHERE NOT EXISTS (SELECT 1 FROM schema_migrations WHERE name = ?1)`,
		MigrationName, float64(time.Now().UnixNano())/1e9); err != nil {
		return err
	}
	return tx.Commit()
}

// Close closes the store.
func (s *Store) Close() error {
	return s.db.Close()
}

// RunRow is one row of training_runs, written as Potato writes it: no
// NULL in a NOT NULL column (an empty string, 0, [] or {} instead). Only
// StartedAt, FinishedAt (zero: not yet) and Pid (zero: none) are stored as
// NULL. Status must be one of Statuses and Trigger one of Triggers (empty:
// manual), as Potato refuses any other.
type RunRow struct {
	Project      string
	RunID        string
	Trainer      string
	Backend      string // empty: local
	SchemaNames  []string
	Kinds        []string // each schema's kind, in SchemaNames order
	Status       string
	Trigger      string
	CreatedAt    float64 // unix seconds
	StartedAt    float64
	FinishedAt   float64
	NTrain       int
	NVal         int
	NTest        int
	SplitSeed    int64
	Params       any                // a JSON object
	Metrics      map[string]float64 // flat, Potato's names: test_accuracy, ...
	ArtifactDir  string
	ModelVersion string
	BundleDigest string
	Error        string
	ErrorCode    string
	Pid          int
	Host         string
}

const upsertRunSQL = `INSERT INTO training_runs (project, run_id, trainer, backend,
	schema_names, kinds, status, trigger, created_at, started_at, finished_at,
	n_train, n_val, n_test, split_seed, params, metrics, artifact_dir,
	model_version, bundle_digest, error, error_code, pid, host)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (project, run_id) DO UPDATE SET
	trainer = excluded.trainer, backend = excluded.backend,
	schema_names = excluded.schema_names, kinds = excluded.kinds,
	status = excluded.status, trigger = excluded.trigger,
	started_at = excluded.started_at,
	finished_at = excluded.finished_at, n_train = excluded.n_train,
	n_val = excluded.n_val, n_test = excluded.n_test,
	split_seed = excluded.split_seed, params = excluded.params,
	metrics = excluded.metrics, artifact_dir = excluded.artifact_dir,
	model_version = excluded.model_version,
	bundle_digest = excluded.bundle_digest, error = excluded.error,
	error_code = excluded.error_code, pid = excluded.pid, host = excluded.host`

// RecordRun inserts r into training_runs, or replaces the columns above of
// the row with the same (project, run_id); created_at stays as first
// written, as Potato keeps it.
func (s *Store) RecordRun(r RunRow) error {
	if r.Project == "" || r.RunID == "" {
		return errors.New("writeback: record run: project and run id are required")
	}
	if !slices.Contains(Statuses, r.Status) {
		return fmt.Errorf("writeback: record run %q: status %q is not one of Potato's (%s)", r.RunID, r.Status, strings.Join(Statuses, ", "))
	}
	if r.Trigger == "" {
		r.Trigger = "manual"
	}
	if !slices.Contains(Triggers, r.Trigger) {
		return fmt.Errorf("writeback: record run %q: trigger %q is not one of Potato's (%s)", r.RunID, r.Trigger, strings.Join(Triggers, ", "))
	}
	if r.Backend == "" {
		r.Backend = "local"
	}
	if r.CreatedAt == 0 {
		r.CreatedAt = float64(time.Now().UnixNano()) / 1e9
	}
	names, err := jsonText(r.SchemaNames, "[]")
	if err != nil {
		return fmt.Errorf("writeback: record run %q: schema_names: %w", r.RunID, err)
	}
	kinds, err := jsonText(r.Kinds, "[]")
	if err != nil {
		return fmt.Errorf("writeback: record run %q: kinds: %w", r.RunID, err)
	}
	params, err := jsonText(r.Params, "{}")
	if err != nil {
		return fmt.Errorf("writeback: record run %q: params: %w", r.RunID, err)
	}
	metrics, err := jsonText(r.Metrics, "{}")
	if err != nil {
		return fmt.Errorf("writeback: record run %q: metrics: %w", r.RunID, err)
	}
	_, err = s.db.Exec(upsertRunSQL,
		r.Project, r.RunID, r.Trainer, r.Backend,
		names, kinds, r.Status, r.Trigger,
		r.CreatedAt, nullTime(r.StartedAt), nullTime(r.FinishedAt),
		r.NTrain, r.NVal, r.NTest, r.SplitSeed, params, metrics,
		r.ArtifactDir, r.ModelVersion, r.BundleDigest, r.Error, r.ErrorCode,
		nullInt(r.Pid), r.Host)
	if err != nil {
		return fmt.Errorf("writeback: record run %q: %w", r.RunID, err)
	}
	return nil
}

// itemsPerInsert is how many items one INSERT statement carries.
const itemsPerInsert = 1024

// insertItemsSQL inserts the items of one split: ?4 is a JSON array of
// their ids, copied from the split file as they are, still JSON. One JSON
// text a statement takes a third less time than binding each id through the
// driver. (Predictions have four values a row, and taking those apart in
// SQL costs more than binding them; see upsertPredsSQL.)
const insertItemsSQL = `INSERT INTO training_run_items (project, run_id, instance_id, split)
SELECT ?1, ?2, value, ?3 FROM json_each(?4) WHERE true
ON CONFLICT (project, run_id, instance_id) DO UPDATE SET split = excluded.split`

// RecordItems replaces the rows of training_run_items for (project, runID)
// with one row (instance_id, split) for every row of the bundle's labelled
// split files. The unlabeled split is not recorded: Potato's own ledger
// keeps it out (its build_bundle leaves unlabeled items out of the
// split_ids it records), and at a million items it was most of the time
// of a write-back; an item a run predicted with no row of that run was
// unlabeled (RunPrelabels, ItemSplit). The split files are those of the
// bundle's manifest.json, or every *.jsonl in bundleDir when it has no
// manifest. An id listed twice keeps the split of its last row. It returns
// the number of rows read. A row that is not a JSON object with a string
// instance_id fails the whole call with an error naming its file and line,
// and the store is left as it was.
func (s *Store) RecordItems(project, runID, bundleDir string) (int, error) {
	if project == "" || runID == "" {
		return 0, errors.New("writeback: record items: project and run id are required")
	}
	fail := func(err error) (int, error) {
		return 0, fmt.Errorf("writeback: record items of run %q: %w", runID, err)
	}
	files, err := splitFiles(bundleDir)
	if err != nil {
		return fail(err)
	}
	tx, err := s.db.Begin()
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`DELETE FROM training_run_items WHERE project = ? AND run_id = ?`,
		project, runID); err != nil {
		return fail(err)
	}
	ins, err := tx.Prepare(insertItemsSQL)
	if err != nil {
		return fail(err)
	}
	defer ins.Close()

	type chunk struct{ split, ids string }
	n := 0
	err = pipeline(func(send func(chunk) error) error {
		keys := []string{"instance_id"}
		raw := make([][]byte, 1)
		var split rawIDs
		var batch jsonArray
		for _, f := range files {
			if f.split == bundle.UnlabeledSplit {
				continue
			}
			split.reset()
			err := scanLines(f.path, func(line []byte, _ int) error {
				if err := scanObject(line, keys, raw); err != nil {
					return err
				}
				if err := checkID(raw[0]); err != nil {
					return err
				}
				n++
				split.add(raw[0])
				return nil
			})
			if err != nil {
				return err
			}
			for _, i := range split.sorted() {
				if batch.add(split.at(i)) == itemsPerInsert {
					if err := send(chunk{f.split, batch.text()}); err != nil {
						return err
					}
				}
			}
			if batch.n > 0 {
				if err := send(chunk{f.split, batch.text()}); err != nil {
					return err
				}
			}
		}
		return nil
	}, func(c chunk) error {
		_, err := ins.Exec(project, runID, c.split, c.ids)
		return err
	})
	if err != nil {
		return fail(err)
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return n, nil
}

// checkID checks the raw instance_id of a row: a JSON string, not empty.
func checkID(raw []byte) error {
	switch {
	case raw == nil || string(raw) == "null":
		return errors.New("no instance_id")
	case raw[0] != '"':
		return errors.New("instance_id is not a string")
	case len(raw) == 2:
		return errors.New("instance_id is empty")
	}
	return nil
}

// jsonArray builds the text of a JSON array from raw JSON values.
type jsonArray struct {
	buf []byte
	n   int
}

// add appends a raw value and returns the element count.
func (a *jsonArray) add(v []byte) int {
	if a.n == 0 {
		a.buf = append(a.buf[:0], '[')
	} else {
		a.buf = append(a.buf, ',')
	}
	a.buf = append(a.buf, v...)
	a.n++
	return a.n
}

// text returns the array and starts a new one.
func (a *jsonArray) text() string {
	a.buf = append(a.buf, ']')
	t := string(a.buf)
	a.buf, a.n = a.buf[:0], 0
	return t
}

// Retract deletes the prelabels run runID wrote to training_predictions
// (Potato's DELETE .../runs/<id>/predictions) and returns how many it
// deleted. Rows another run has since replaced belong to that run and stay.
func (s *Store) Retract(project, runID string) (int64, error) {
	res, err := s.db.Exec(`DELETE FROM training_predictions WHERE project = ? AND run_id = ?`,
		project, runID)
	if err != nil {
		return 0, fmt.Errorf("writeback: retract run %q: %w", runID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("writeback: retract run %q: %w", runID, err)
	}
	return n, nil
}

type splitFile struct {
	split, path string
}

// splitFiles lists the bundle's split files in name order.
func splitFiles(bundleDir string) ([]splitFile, error) {
	m, err := bundle.ReadManifest(bundleDir)
	switch {
	case err == nil:
		var files []splitFile
		for name, sf := range m.Splits {
			if !filepath.IsLocal(sf.Path) {
				return nil, fmt.Errorf("bundle %q: split %q: path %q leaves the bundle directory",
					bundleDir, name, sf.Path)
			}
			files = append(files, splitFile{name, filepath.Join(bundleDir, sf.Path)})
		}
		sort.Slice(files, func(i, j int) bool { return files[i].split < files[j].split })
		return files, nil
	case errors.Is(err, fs.ErrNotExist):
		paths, err := filepath.Glob(filepath.Join(bundleDir, "*.jsonl"))
		if err != nil {
			return nil, fmt.Errorf("bundle %q: %w", bundleDir, err)
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("bundle %q: no manifest.json and no split files", bundleDir)
		}
		files := make([]splitFile, 0, len(paths))
		for _, p := range paths {
			files = append(files, splitFile{strings.TrimSuffix(filepath.Base(p), ".jsonl"), p})
		}
		return files, nil
	default:
		return nil, err
	}
}

// splitPath is the file of one split of the bundle, and its row count as
// far as known: the manifest's entry for it, or <split>.jsonl and 0 when
// the bundle has no manifest. It returns "" when the manifest lists no such
// split.
func splitPath(bundleDir, split string) (string, int, error) {
	m, err := bundle.ReadManifest(bundleDir)
	switch {
	case err == nil:
		sf, ok := m.Splits[split]
		if !ok {
			return "", 0, nil
		}
		if !filepath.IsLocal(sf.Path) {
			return "", 0, fmt.Errorf("bundle %q: split %q: path %q leaves the bundle directory",
				bundleDir, split, sf.Path)
		}
		return filepath.Join(bundleDir, sf.Path), max(sf.N, 0), nil
	case errors.Is(err, fs.ErrNotExist):
		return filepath.Join(bundleDir, split+".jsonl"), 0, nil
	default:
		return "", 0, err
	}
}

func jsonText(v any, empty string) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	if string(b) == "null" {
		return empty, nil
	}
	return string(b), nil
}

func nullTime(t float64) any {
	if t == 0 {
		return nil
	}
	return t
}

func nullInt(n int) any {
	if n == 0 {
		return nil
	}
	return n
}
