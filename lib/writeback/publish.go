package writeback

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
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
	// confidence is below it is not published, nor, when it is above 0,
	// one whose confidence is null or absent.
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
	// NRefused counts predictions that break the rules of predRules: an
	// id that is not an item of the bundle, a schema or label the bundle
	// does not have, a confidence that is not a number in [0, 1], a
	// payload over MaxPayload or with keys a prelabel does not have.
	NRefused int `json:"n_refused"`
	// RefusedBy counts the refused predictions by reason, one of the
	// Refused* constants; absent when none was refused.
	RefusedBy map[string]int `json:"refused_by,omitempty"`
	// FirstRefused says why the first refused prediction was refused,
	// with its line number; "" when none was.
	FirstRefused string `json:"-"`
	// Refusals say the same of the first maxNamedRefusals refused
	// predictions, FirstRefused the first of them.
	Refusals []string `json:"-"`
}

// predKeys are the fields of a line of predictions.jsonl (FORMATS.md,
// "Predictions"), in the order of predLine's raw values.
var predKeys = []string{"instance_id", "schema_name", "payload", "confidence", "probs"}

// predLine is one line of predictions.jsonl: the id and schema decoded, the
// payload and confidence as raw JSON (nil when absent).
type predLine struct {
	id, schema string
	raw        [5][]byte // instance_id, schema_name, payload, confidence, probs
	probs      []probEntry
}

// parse scans line into p. The raw values point into line.
func (p *predLine) parse(line []byte) error {
	if err := scanObject(line, predKeys, p.raw[:]); err != nil {
		return err
	}
	var err error
	if p.id, err = stringValue(p.raw[0], "instance_id"); err != nil {
		return err
	}
	if p.schema, err = stringValue(p.raw[1], "schema_name"); err != nil {
		return err
	}
	switch {
	case p.id == "":
		return errors.New("prediction has no instance_id")
	case p.schema == "":
		return errors.New("prediction has no schema_name")
	}
	return nil
}

// confidence decodes the raw confidence; ok is false for null.
func (p *predLine) confidence() (c float64, ok bool, err error) {
	raw := p.raw[3]
	if raw == nil || string(raw) == "null" {
		return 0, false, nil
	}
	if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return 0, false, errors.New("confidence is not a number or null")
	}
	c, err = strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return 0, false, fmt.Errorf("confidence: %w", err)
	}
	return c, true, nil
}

// predsPerInsert is how many prelabels one INSERT statement carries.
const predsPerInsert = 256

// upsertPredsSQL upserts n prelabels. Project, run id and created_at are
// bound once, as ?1 to ?3; each row's own values are plain "?", numbered
// from 4 on. The driver looks up every parameter's name, which is linear in
// the count of numbered ones, so only those three are numbered. The WHERE
// clause keeps a row that a run created later has written.
func upsertPredsSQL(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO training_predictions
	(project, run_id, created_at, instance_id, schema_name, payload, confidence) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?1,?2,?3,?,?,?,?)")
	}
	b.WriteString(` ON CONFLICT (project, instance_id, schema_name) DO UPDATE SET
	run_id = excluded.run_id, payload = excluded.payload,
	confidence = excluded.confidence, created_at = excluded.created_at
	WHERE excluded.created_at >= training_predictions.created_at`)
	return b.String()
}

// prelabel is one row for training_predictions.
type prelabel struct {
	id, schema, payload string
	confidence          any // float64, or nil for null
}

// Publish writes the predictions in predictionsPath to training_predictions
// as the prelabels of run opt.RunID. A line is published unless, in this
// order: it breaks the rules of predRules (refused, and counted as such),
// its item is in the bundle's train split (read from bundleDir), its
// schema is not in opt.Schemas, or its confidence is below
// opt.MinConfidence (a null or absent one, when that is above 0). A published row replaces the row for the same (item,
// schema) unless that row belongs to a run created later. A line without a
// payload publishes a null one. Blank lines are ignored. The payload of a
// schema that the bundle's manifest says is multilabel is stored in the
// form Potato's annotation page pre-selects (potatoMultilabel); any other
// payload is stored as the line has it.
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
	g, err := readGates(bundleDir, opt)
	if err != nil {
		return fail(err)
	}
	return s.publish(g, predictionsPath, opt)
}

// publish is Publish's work once its gates are read: opt's Project,
// RunID and CreatedAt are set. The predictions are judged and kept, then
// written sorted (publishKept); the store is written to, and locked, only
// once they are all read.
func (s *Store) publish(g *gates, predictionsPath string, opt Options) (Report, error) {
	var rep Report
	var p predLine
	var all prelabelSet
	err := scanLines(predictionsPath, func(line []byte, n int) error {
		payload, confidence, ok, err := g.judge(&p, line, n, &rep)
		if ok {
			all.add(p.id, p.schema, payload, confidence)
		}
		return err
	})
	if err != nil {
		return Report{}, fmt.Errorf("writeback: publish run %q: %w", opt.RunID, err)
	}
	return s.publishKept(&all, nil, rep, opt)
}

// publishKept writes the prelabels of kept whose schema is enabled (all,
// when enabled is nil), sorted, in one transaction, and completes rep,
// which counts every other gate's decision already.
func (s *Store) publishKept(kept *prelabelSet, enabled map[string]bool, rep Report, opt Options) (Report, error) {
	fail := func(err error) (Report, error) {
		return Report{}, fmt.Errorf("writeback: publish run %q: %w", opt.RunID, err)
	}
	tx, err := s.db.Begin()
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	ins := &predInserter{tx: tx, shared: []any{opt.Project, opt.RunID, opt.CreatedAt}}
	defer ins.close()
	var written int64
	kept.sort()
	accepted, err := kept.batches(predsPerInsert, enabled, func(rows []prelabel) error {
		n, err := ins.exec(rows)
		written += n
		return err
	})
	if err != nil {
		return fail(err)
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	rep.NWritten = int(written)
	rep.NSkippedNewerRun = accepted - rep.NWritten
	return rep, nil
}

// predRules are what a prediction must be to be stored, since the far side
// of a run is not trusted with Potato's store: its instance_id an item of
// the bundle (Potato stops its start-up replay of the store at an id it
// does not have), its schema one of the manifest's, its payload naming a
// label of that schema (a nominal schema's one label; a multilabel
// schema's names, "|"-joined or a list, none at all included), and its
// confidence, and the payload's, a number in [0, 1], null or absent.
type predRules struct {
	items *idSet
	// schemas are the manifest's; nil for a bundle without a manifest
	// (none that a run builds), whose labels are then not checked.
	schemas map[string]bundle.Schema
}

// gates are what Publish and Preview judge a prediction by, in this
// order: the rules of predRules, the bundle's train split, the schemas
// opt.Schemas enables and opt.MinConfidence.
type gates struct {
	train         *idSet
	multi         map[string]bool // the bundle's multilabel schemas
	rules         predRules
	enabled       map[string]bool
	minConfidence float64
	compact       bytes.Buffer // a payload with white space, compacted
}

// readGates reads the gates of the bundle in bundleDir under opt.
func readGates(bundleDir string, opt Options) (*gates, error) {
	g := &gates{enabled: make(map[string]bool, len(opt.Schemas)), minConfidence: opt.MinConfidence}
	for _, name := range opt.Schemas {
		g.enabled[name] = true
	}
	var err error
	if g.train, err = trainIDs(bundleDir); err != nil {
		return nil, err
	}
	if g.multi, err = multilabelSchemas(bundleDir); err != nil {
		return nil, err
	}
	g.rules, err = readRules(bundleDir)
	return g, err
}

// judge reads line n of a predictions file into p and counts it in rep:
// read, and refused or skipped by the gate that stops it. ok is whether it
// passes every gate; then payload is what the store would hold (compact
// JSON, a multilabel schema's in Potato's form, "null" for none; it may
// point into line or into g), and confidence a float64, or nil for a
// null or absent one. err is a line that is not a prediction at all.
func (g *gates) judge(p *predLine, line []byte, n int, rep *Report) (payload []byte, confidence any, ok bool, err error) {
	if err := p.parse(line); err != nil {
		return nil, nil, false, err
	}
	return g.judgeParsed(p, n, rep)
}

// judgeParsed is judge of a line p has parsed already.
func (g *gates) judgeParsed(p *predLine, n int, rep *Report) (payload []byte, confidence any, ok bool, err error) {
	rep.NRead++
	if reason, why := g.rules.refusal(p); reason != "" {
		rep.refuse(n, reason, why)
		return nil, nil, false, nil
	}
	c, hasConf, _ := p.confidence() // refusal has checked it
	switch {
	case g.train.has(p.id):
		rep.NSkippedTrainSplit++
		return nil, nil, false, nil
	case !g.enabled[p.schema]:
		rep.NSkippedSchemaNotEnabled++
		return nil, nil, false, nil
	case hasConf && c < g.minConfidence, !hasConf && g.minConfidence > 0:
		rep.NSkippedLowConfidence++
		return nil, nil, false, nil
	}
	if hasConf {
		confidence = c
	}
	payload = p.raw[2]
	if payload == nil {
		return []byte("null"), confidence, true, nil
	}
	if bytes.ContainsAny(payload, " \t\r\n") {
		g.compact.Reset()
		if err := json.Compact(&g.compact, payload); err != nil {
			return nil, nil, false, err
		}
		payload = g.compact.Bytes()
	}
	if g.multi[p.schema] {
		if payload, err = potatoMultilabel(payload, p.raw[4]); err != nil {
			return nil, nil, false, fmt.Errorf("payload of %s %s: %w", p.schema, p.id, err)
		}
		// Potato's form repeats the confidence for each name, so it may
		// outgrow a payload that refusal let through.
		if len(payload) > MaxPayload {
			rep.refuse(n, RefusedSize, tooLarge(p, len(payload)))
			return nil, nil, false, nil
		}
	}
	return payload, confidence, true, nil
}

// readRules reads the items and schemas of the bundle in bundleDir.
func readRules(bundleDir string) (predRules, error) {
	files, err := splitFiles(bundleDir)
	if err != nil {
		return predRules{}, err
	}
	r := predRules{items: cachedItems(files)}
	if r.items == nil {
		// The key is taken before the files are read: a file changed
		// while they are read is read again next time.
		key, keep := itemsKey(files)
		r.items = newIDSet(0)
		for _, f := range files {
			if err := addIDs(r.items, f.path); err != nil {
				return predRules{}, fmt.Errorf("%s split: %w", f.split, err)
			}
		}
		r.items.sort()
		if keep {
			keepItems(key, r.items)
		}
	}
	m, err := bundle.ReadManifest(bundleDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return predRules{}, err
	default:
		r.schemas = map[string]bundle.Schema{}
		for _, sc := range m.Schemas {
			r.schemas[sc.Name] = sc
		}
	}
	return r, nil
}

// multilabelSchemas are the schemas of kind multilabel in the bundle's
// manifest; none for a bundle without one.
func multilabelSchemas(bundleDir string) (map[string]bool, error) {
	m, err := bundle.ReadManifest(bundleDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, s := range m.Schemas {
		if s.Kind == config.KindMultilabel {
			out[s.Name] = true
		}
	}
	return out, nil
}

// predInserter upserts prelabels, reusing the prepared statement for a
// full batch.
type predInserter struct {
	tx     *sql.Tx
	shared []any // ?1 to ?3
	full   *sql.Stmt
	args   []any
}

func (w *predInserter) exec(rows []prelabel) (int64, error) {
	w.args = append(w.args[:0], w.shared...)
	for _, r := range rows {
		w.args = append(w.args, r.id, r.schema, r.payload, r.confidence)
	}
	var res sql.Result
	var err error
	if len(rows) == predsPerInsert {
		if w.full == nil {
			if w.full, err = w.tx.Prepare(upsertPredsSQL(predsPerInsert)); err != nil {
				return 0, err
			}
		}
		res, err = w.full.Exec(w.args...)
	} else {
		res, err = w.tx.Exec(upsertPredsSQL(len(rows)), w.args...)
	}
	clear(w.args)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (w *predInserter) close() {
	if w.full != nil {
		w.full.Close()
		w.full = nil
	}
}
