package writeback

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Options says which run publishes and what it may publish.
type Options struct {
	// Project is the project column: Potato's annotation_task_name.
	Project string
	RunID   string
	// Schemas are model_training.writeback.schemas: only predictions for
	// these schemas are published. None listed publishes nothing; resolving
	// a default is the caller's business.
	Schemas []string
	// MinConfidence is writeback.min_confidence: a prediction whose
	// confidence is below it is not published; one with a null confidence
	// is.
	MinConfidence float64
	// CreatedAt is the run's created_at in unix seconds, stamped on every
	// row it writes. It orders runs: a row is only replaced by a run created
	// at the same time or later. Zero means now.
	CreatedAt float64
}

// Report counts what Publish did with each line of predictions.jsonl.
// NRead is the sum of the other counts.
type Report struct {
	NRead                    int `json:"n_read"`
	NWritten                 int `json:"n_written"`
	NSkippedTrainSplit       int `json:"n_skipped_train_split"`
	NSkippedLowConfidence    int `json:"n_skipped_low_confidence"`
	NSkippedSchemaNotEnabled int `json:"n_skipped_schema_not_enabled"`
	// NSkippedNewerRun counts predictions that passed the gates but were not
	// written because a run created later already holds that (item, schema).
	NSkippedNewerRun int `json:"n_skipped_newer_run"`
}

// predLine is one line of predictions.jsonl (FORMATS.md, "Predictions").
type predLine struct {
	InstanceID string          `json:"instance_id"`
	SchemaName string          `json:"schema_name"`
	Payload    json.RawMessage `json:"payload"`
	Confidence *float64        `json:"confidence"`
}

func (p *predLine) check() error {
	switch {
	case p.InstanceID == "":
		return errors.New("prediction has no instance_id")
	case p.SchemaName == "":
		return errors.New("prediction has no schema_name")
	}
	return nil
}

type prelabel struct {
	id, schema, payload string
	confidence          any // float64, or nil for null
}

// predsPerInsert is how many prelabels one INSERT statement carries; at
// seven parameters a row it stays below SQLite's limit of 32766 (see
// itemsPerInsert).
const predsPerInsert = 256

// Publish writes the predictions in predictionsPath to training_predictions
// as the prelabels of run opt.RunID. A line is published unless, in this
// order: its item is in the bundle's train split (read from bundleDir), its
// schema is not in opt.Schemas, or its confidence is not null and below
// opt.MinConfidence. A published row replaces the row for the same (item,
// schema) unless that row belongs to a run created later.
//
// Publish is one transaction. A line that is not a JSON object with a
// string instance_id and schema_name fails the whole publish with an error
// that names the line, and the store is left as it was.
func (s *Store) Publish(bundleDir, predictionsPath string, opt Options) (Report, error) {
	if opt.Project == "" || opt.RunID == "" {
		return Report{}, errors.New("writeback: publish: project and run id are required")
	}
	if opt.CreatedAt == 0 {
		opt.CreatedAt = float64(time.Now().UnixNano()) / 1e9
	}
	fail := func(err error) (Report, error) {
		return Report{}, fmt.Errorf("writeback: publish run %q: %w", opt.RunID, err)
	}
	train, err := trainIDs(bundleDir)
	if err != nil {
		return fail(err)
	}
	enabled := make(map[string]bool, len(opt.Schemas))
	for _, name := range opt.Schemas {
		enabled[name] = true
	}

	tx, err := s.db.Begin()
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	ins := &predInserter{tx: tx, project: opt.Project, runID: opt.RunID, createdAt: opt.CreatedAt}
	defer ins.close()

	var rep Report
	accepted := 0
	err = pipeline(func(emit func(prelabel) error) error {
		var buf bytes.Buffer
		return scanLines(predictionsPath, func(line []byte, _ int) error {
			var p predLine
			if err := json.Unmarshal(line, &p); err != nil {
				return err
			}
			if err := p.check(); err != nil {
				return err
			}
			rep.NRead++
			switch {
			case train[p.InstanceID]:
				rep.NSkippedTrainSplit++
				return nil
			case !enabled[p.SchemaName]:
				rep.NSkippedSchemaNotEnabled++
				return nil
			case p.Confidence != nil && *p.Confidence < opt.MinConfidence:
				rep.NSkippedLowConfidence++
				return nil
			}
			payload := "null"
			if len(p.Payload) > 0 {
				buf.Reset()
				if err := json.Compact(&buf, p.Payload); err != nil {
					return err
				}
				payload = buf.String()
			}
			var conf any
			if p.Confidence != nil {
				conf = *p.Confidence
			}
			accepted++
			return emit(prelabel{p.InstanceID, p.SchemaName, payload, conf})
		})
	}, ins.insert)
	if err != nil {
		return fail(err)
	}
	if err := ins.finish(); err != nil {
		return fail(err)
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	rep.NWritten = int(ins.written)
	rep.NSkippedNewerRun = accepted - rep.NWritten
	return rep, nil
}

// trainIDs reads the instance ids of the bundle's train split. A bundle
// whose manifest lists no train split has none; a bundle without a manifest
// must have train.jsonl, since publishing without knowing the train split
// could publish a train item.
func trainIDs(bundleDir string) (map[string]bool, error) {
	path, err := splitPath(bundleDir, "train")
	if err != nil || path == "" {
		return map[string]bool{}, err
	}
	ids := map[string]bool{}
	err = scanLines(path, func(line []byte, _ int) error {
		var r struct {
			InstanceID string `json:"instance_id"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		if r.InstanceID == "" {
			return errors.New("row has no instance_id")
		}
		ids[r.InstanceID] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("train split: %w", err)
	}
	return ids, nil
}

// predInserter upserts prelabels predsPerInsert to a statement; the
// prepared statement for a full one is reused.
type predInserter struct {
	tx             *sql.Tx
	project, runID string
	createdAt      float64
	full           *sql.Stmt
	args           []any
	pending        []prelabel
	written        int64
}

// predsSQL upserts n rows. The WHERE clause keeps a row that a run created
// later has written.
func predsSQL(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO training_predictions
	(project, instance_id, schema_name, run_id, payload, confidence, created_at) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?)")
	}
	b.WriteString(` ON CONFLICT (project, instance_id, schema_name) DO UPDATE SET
	run_id = excluded.run_id, payload = excluded.payload,
	confidence = excluded.confidence, created_at = excluded.created_at
	WHERE excluded.created_at >= training_predictions.created_at`)
	return b.String()
}

// insert queues rows and writes every full statement's worth; finish
// writes the rest.
func (w *predInserter) insert(batch []prelabel) error {
	for _, r := range batch {
		w.pending = append(w.pending, r)
		if len(w.pending) == predsPerInsert {
			if err := w.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *predInserter) finish() error {
	err := w.flush()
	w.close()
	return err
}

func (w *predInserter) flush() error {
	rows := w.pending
	if len(rows) == 0 {
		return nil
	}
	w.args = w.args[:0]
	for _, r := range rows {
		w.args = append(w.args, w.project, r.id, r.schema, w.runID, r.payload, r.confidence, w.createdAt)
	}
	clear(w.pending)
	w.pending = w.pending[:0]
	var res sql.Result
	var err error
	if len(rows) == predsPerInsert {
		if w.full == nil {
			if w.full, err = w.tx.Prepare(predsSQL(predsPerInsert)); err != nil {
				return err
			}
		}
		res, err = w.full.Exec(w.args...)
	} else {
		res, err = w.tx.Exec(predsSQL(len(rows)), w.args...)
	}
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	w.written += n
	return nil
}

func (w *predInserter) close() {
	if w.full != nil {
		w.full.Close()
		w.full = nil
	}
}
