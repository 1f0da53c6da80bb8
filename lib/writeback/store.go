// Package writeback publishes a run's predictions to Potato's store as
// prelabels and scores them on the held-out split.
//
// The store is Potato's <task_dir>/project.sqlite (FORMATS.md, "Potato's
// store"): training_runs, training_run_items and training_predictions, every
// row keyed by project. Store creates the tables when they are missing and
// never alters tables Potato already made, so columns Potato adds are left
// alone. Every write is one transaction: it lands whole or not at all.
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
	"sort"
	"strings"

	_ "modernc.org/sqlite"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

// StoreName is the store's file name inside Potato's task_dir.
const StoreName = "project.sqlite"

// schemaSQL creates the tables of FORMATS.md, with their columns and primary
// keys as Potato's training code has them, and the indexes this package's
// queries need. Nothing here changes a table that exists already.
const schemaSQL = `
CREATE TABLE IF NOT EXISTS training_runs (
	project TEXT NOT NULL,
	run_id TEXT NOT NULL,
	trainer TEXT,
	backend TEXT,
	schema_names TEXT,
	kinds TEXT,
	status TEXT,
	trigger TEXT,
	created_at REAL,
	started_at REAL,
	finished_at REAL,
	n_train INTEGER,
	n_val INTEGER,
	n_test INTEGER,
	split_seed INTEGER,
	params TEXT,
	metrics TEXT,
	artifact_dir TEXT,
	model_version TEXT,
	bundle_digest TEXT,
	error TEXT,
	error_code TEXT,
	pid INTEGER,
	host TEXT,
	PRIMARY KEY (project, run_id)
);
CREATE TABLE IF NOT EXISTS training_run_items (
	project TEXT NOT NULL,
	run_id TEXT NOT NULL,
	instance_id TEXT NOT NULL,
	split TEXT,
	PRIMARY KEY (project, run_id, instance_id)
);
CREATE TABLE IF NOT EXISTS training_predictions (
	project TEXT NOT NULL,
	instance_id TEXT NOT NULL,
	schema_name TEXT NOT NULL,
	run_id TEXT,
	payload TEXT,
	confidence REAL,
	created_at REAL,
	PRIMARY KEY (project, instance_id, schema_name)
);
CREATE INDEX IF NOT EXISTS training_predictions_by_run
	ON training_predictions (project, run_id);
`

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
// other instead of failing halfway.
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
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("writeback: open %q: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schemaSQL); err != nil {
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

// Close closes the store.
func (s *Store) Close() error {
	return s.db.Close()
}

// RunRow is one row of training_runs. Zero times, a zero Pid and empty
// optional strings (Backend, ArtifactDir, ModelVersion, BundleDigest, Error,
// ErrorCode, Host) are stored as NULL; nil SchemaNames, Kinds, Params and
// Metrics as an empty JSON array or object, so Potato can always decode them.
type RunRow struct {
	Project      string
	RunID        string
	Trainer      string
	Backend      string
	SchemaNames  []string
	Kinds        map[string]config.Kind // schema name -> kind
	Status       string
	Trigger      string
	CreatedAt    float64 // unix seconds
	StartedAt    float64
	FinishedAt   float64
	NTrain       int
	NVal         int
	NTest        int
	SplitSeed    int64
	Params       any // encoded as JSON
	Metrics      any // encoded as JSON
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
	created_at = excluded.created_at, started_at = excluded.started_at,
	finished_at = excluded.finished_at, n_train = excluded.n_train,
	n_val = excluded.n_val, n_test = excluded.n_test,
	split_seed = excluded.split_seed, params = excluded.params,
	metrics = excluded.metrics, artifact_dir = excluded.artifact_dir,
	model_version = excluded.model_version,
	bundle_digest = excluded.bundle_digest, error = excluded.error,
	error_code = excluded.error_code, pid = excluded.pid, host = excluded.host`

// RecordRun inserts r into training_runs, or replaces the columns above of
// the row with the same (project, run_id).
func (s *Store) RecordRun(r RunRow) error {
	if r.Project == "" || r.RunID == "" {
		return errors.New("writeback: record run: project and run id are required")
	}
	names, err := jsonText(r.SchemaNames, "[]")
	if err != nil {
		return fmt.Errorf("writeback: record run %q: schema_names: %w", r.RunID, err)
	}
	kinds, err := jsonText(r.Kinds, "{}")
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
		r.Project, r.RunID, r.Trainer, nullString(r.Backend),
		names, kinds, r.Status, r.Trigger,
		r.CreatedAt, nullTime(r.StartedAt), nullTime(r.FinishedAt),
		r.NTrain, r.NVal, r.NTest, r.SplitSeed, params, metrics,
		nullString(r.ArtifactDir), nullString(r.ModelVersion),
		nullString(r.BundleDigest), nullString(r.Error), nullString(r.ErrorCode),
		nullInt(r.Pid), nullString(r.Host))
	if err != nil {
		return fmt.Errorf("writeback: record run %q: %w", r.RunID, err)
	}
	return nil
}

// itemsPerInsert is how many items one INSERT statement carries. Batching
// rows in one statement spends the per-statement cost once per batch; at
// four parameters a row it stays far below SQLite's limit of 32766.
// Parameters are plain "?": the driver looks every parameter's name up, and
// numbered ones ("?7") make that lookup linear in their count.
const itemsPerInsert = 512

// RecordItems replaces the rows of training_run_items for (project, runID)
// with one row (instance_id, split) for every row of the bundle's split
// files, unlabeled.jsonl included (split "unlabeled"). The split files are
// those of the bundle's manifest.json, or every *.jsonl in bundleDir when
// it has no manifest. Files are streamed, so memory does not grow with the
// bundle. An id listed twice keeps the split of its last row. It returns the
// number of rows read.
func (s *Store) RecordItems(project, runID, bundleDir string) (int, error) {
	if project == "" || runID == "" {
		return 0, errors.New("writeback: record items: project and run id are required")
	}
	files, err := splitFiles(bundleDir)
	if err != nil {
		return 0, err
	}
	tx, err := s.db.Begin()
	if err != nil {
		return 0, fmt.Errorf("writeback: record items of run %q: %w", runID, err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`DELETE FROM training_run_items WHERE project = ? AND run_id = ?`,
		project, runID); err != nil {
		return 0, fmt.Errorf("writeback: record items of run %q: %w", runID, err)
	}
	ins := newItemInserter(tx, project, runID)
	defer ins.close()

	n := 0
	err = pipeline(func(emit func(item) error) error {
		for _, f := range files {
			err := scanLines(f.path, func(line []byte, _ int) error {
				var r struct {
					InstanceID string `json:"instance_id"`
				}
				if err := json.Unmarshal(line, &r); err != nil {
					return err
				}
				if r.InstanceID == "" {
					return errors.New("row has no instance_id")
				}
				return emit(item{id: r.InstanceID, split: f.split})
			})
			if err != nil {
				return err
			}
		}
		return nil
	}, func(batch []item) error {
		n += len(batch)
		return ins.insert(batch)
	})
	if err != nil {
		return 0, fmt.Errorf("writeback: record items of run %q: %w", runID, err)
	}
	if err := ins.finish(); err != nil {
		return 0, fmt.Errorf("writeback: record items of run %q: %w", runID, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("writeback: record items of run %q: %w", runID, err)
	}
	return n, nil
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

type item struct {
	id, split string
}

// itemInserter writes items in statements of itemsPerInsert rows.
type itemInserter struct {
	tx             *sql.Tx
	project, runID string
	full           *sql.Stmt
	args           []any
	pending        []item
}

func newItemInserter(tx *sql.Tx, project, runID string) *itemInserter {
	return &itemInserter{tx: tx, project: project, runID: runID}
}

func itemsSQL(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO training_run_items (project, run_id, instance_id, split) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?)")
	}
	b.WriteString(` ON CONFLICT (project, run_id, instance_id) DO UPDATE SET split = excluded.split`)
	return b.String()
}

func (w *itemInserter) insert(batch []item) error {
	for _, it := range batch {
		w.pending = append(w.pending, it)
		if len(w.pending) == itemsPerInsert {
			if err := w.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *itemInserter) finish() error {
	err := w.flush()
	w.close()
	return err
}

// flush writes the pending items. A batch that is not full goes out as a
// statement of its own size, prepared for the occasion.
func (w *itemInserter) flush() error {
	n := len(w.pending)
	if n == 0 {
		return nil
	}
	w.args = w.args[:0]
	for _, it := range w.pending {
		w.args = append(w.args, w.project, w.runID, it.id, it.split)
	}
	clear(w.pending)
	w.pending = w.pending[:0]
	if n == itemsPerInsert {
		if w.full == nil {
			st, err := w.tx.Prepare(itemsSQL(itemsPerInsert))
			if err != nil {
				return err
			}
			w.full = st
		}
		_, err := w.full.Exec(w.args...)
		return err
	}
	_, err := w.tx.Exec(itemsSQL(n), w.args...)
	return err
}

func (w *itemInserter) close() {
	if w.full != nil {
		w.full.Close()
		w.full = nil
	}
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
				return nil, fmt.Errorf("writeback: bundle %q: split %q: path %q leaves the bundle directory",
					bundleDir, name, sf.Path)
			}
			files = append(files, splitFile{name, filepath.Join(bundleDir, sf.Path)})
		}
		sort.Slice(files, func(i, j int) bool { return files[i].split < files[j].split })
		return files, nil
	case errors.Is(err, fs.ErrNotExist):
		paths, err := filepath.Glob(filepath.Join(bundleDir, "*.jsonl"))
		if err != nil {
			return nil, fmt.Errorf("writeback: bundle %q: %w", bundleDir, err)
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("writeback: bundle %q: no manifest.json and no split files", bundleDir)
		}
		files := make([]splitFile, 0, len(paths))
		for _, p := range paths {
			files = append(files, splitFile{strings.TrimSuffix(filepath.Base(p), ".jsonl"), p})
		}
		return files, nil
	default:
		return nil, fmt.Errorf("writeback: %w", err)
	}
}

// splitPath is the file of one split of the bundle: the manifest's path for
// it, or <split>.jsonl when the bundle has no manifest. It returns "" when
// the manifest lists no such split.
func splitPath(bundleDir, split string) (string, error) {
	m, err := bundle.ReadManifest(bundleDir)
	switch {
	case err == nil:
		sf, ok := m.Splits[split]
		if !ok {
			return "", nil
		}
		if !filepath.IsLocal(sf.Path) {
			return "", fmt.Errorf("writeback: bundle %q: split %q: path %q leaves the bundle directory",
				bundleDir, split, sf.Path)
		}
		return filepath.Join(bundleDir, sf.Path), nil
	case errors.Is(err, fs.ErrNotExist):
		return filepath.Join(bundleDir, split+".jsonl"), nil
	default:
		return "", fmt.Errorf("writeback: %w", err)
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

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
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
