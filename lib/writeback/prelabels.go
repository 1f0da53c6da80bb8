package writeback

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

// StoredPrelabel is one row of training_predictions: the prelabel Potato
// shows for (InstanceID, Schema), and the run that wrote it.
type StoredPrelabel struct {
	InstanceID string
	Schema     string
	RunID      string
	// Payload is the stored JSON, as Potato reads it.
	Payload    string
	Confidence *float64 // nil for null
	// CreatedAt is the created_at of the run that wrote the row, in unix
	// seconds (Publish stamps every row with it).
	CreatedAt float64
}

const prelabelCols = `instance_id, schema_name, run_id, payload, confidence, created_at`

func scanPrelabels(rows *sql.Rows, fn func(StoredPrelabel) error) error {
	defer rows.Close()
	for rows.Next() {
		var p StoredPrelabel
		var conf sql.NullFloat64
		if err := rows.Scan(&p.InstanceID, &p.Schema, &p.RunID, &p.Payload, &conf, &p.CreatedAt); err != nil {
			return err
		}
		if conf.Valid {
			c := conf.Float64
			p.Confidence = &c
		}
		if err := fn(p); err != nil {
			return err
		}
	}
	return rows.Err()
}

// ItemPrelabels returns the prelabels of one item, one a schema, in schema
// name order.
func (s *Store) ItemPrelabels(project, itemID string) ([]StoredPrelabel, error) {
	rows, err := s.db.Query(`SELECT `+prelabelCols+` FROM training_predictions
		WHERE project = ? AND instance_id = ? ORDER BY schema_name`, project, itemID)
	if err != nil {
		return nil, fmt.Errorf("writeback: prelabels of item %q: %w", itemID, err)
	}
	var out []StoredPrelabel
	err = scanPrelabels(rows, func(p StoredPrelabel) error { out = append(out, p); return nil })
	if err != nil {
		return nil, fmt.Errorf("writeback: prelabels of item %q: %w", itemID, err)
	}
	return out, nil
}

// SchemaPrelabels calls fn with every prelabel of one schema, whichever
// run wrote it.
func (s *Store) SchemaPrelabels(project, schema string, fn func(StoredPrelabel) error) error {
	rows, err := s.db.Query(`SELECT `+prelabelCols+` FROM training_predictions
		WHERE project = ? AND schema_name = ?`, project, schema)
	if err != nil {
		return fmt.Errorf("writeback: prelabels of %q: %w", schema, err)
	}
	if err := scanPrelabels(rows, fn); err != nil {
		return fmt.Errorf("writeback: prelabels of %q: %w", schema, err)
	}
	return nil
}

// RunPrelabels returns the prelabels run runID holds now for schema on the
// items of split in that run's bundle, in item order. A run records its
// labelled splits in training_run_items; an item it predicted with no row
// there was in its unlabeled split ("unlabeled": nobody had labelled it
// when the bundle was built), as is one with a row "unlabeled" (a store
// written before the unlabeled split went unrecorded).
func (s *Store) RunPrelabels(project, runID, schema, split string) ([]StoredPrelabel, error) {
	rows, err := s.db.Query(`SELECT p.instance_id, p.schema_name, p.run_id, p.payload, p.confidence, p.created_at
		FROM training_predictions p LEFT JOIN training_run_items i
		ON i.project = p.project AND i.run_id = p.run_id AND i.instance_id = p.instance_id
		WHERE p.project = ? AND p.run_id = ? AND p.schema_name = ? AND coalesce(i.split, ?) = ?
		ORDER BY p.instance_id`, project, runID, schema, bundle.UnlabeledSplit, split)
	if err != nil {
		return nil, fmt.Errorf("writeback: prelabels of run %q: %w", runID, err)
	}
	var out []StoredPrelabel
	err = scanPrelabels(rows, func(p StoredPrelabel) error { out = append(out, p); return nil })
	if err != nil {
		return nil, fmt.Errorf("writeback: prelabels of run %q: %w", runID, err)
	}
	return out, nil
}

// PublishedRun is, for one schema, the run whose prelabels Potato shows
// now: of the runs that hold rows of the schema in training_predictions,
// the one created last (a row is only ever replaced by a run created at
// the same time or later, so its rows are the newest). N counts its rows;
// Others counts the rows older runs still hold for the schema.
type PublishedRun struct {
	Schema string
	RunID  string
	N      int
	Others int
}

// PublishedRuns returns the published run of every schema that has
// prelabels, in schema name order.
func (s *Store) PublishedRuns(project string) ([]PublishedRun, error) {
	rows, err := s.db.Query(`SELECT schema_name, run_id, count(*), max(created_at)
		FROM training_predictions WHERE project = ?
		GROUP BY schema_name, run_id ORDER BY schema_name, max(created_at) DESC, run_id DESC`, project)
	if err != nil {
		return nil, fmt.Errorf("writeback: published runs: %w", err)
	}
	defer rows.Close()
	var out []PublishedRun
	for rows.Next() {
		var schema, run string
		var n int
		var at float64
		if err := rows.Scan(&schema, &run, &n, &at); err != nil {
			return nil, fmt.Errorf("writeback: published runs: %w", err)
		}
		if len(out) > 0 && out[len(out)-1].Schema == schema {
			out[len(out)-1].Others += n
			continue
		}
		out = append(out, PublishedRun{Schema: schema, RunID: run, N: n})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("writeback: published runs: %w", err)
	}
	return out, nil
}

// ReadRun returns the row of training_runs for (project, runID); false when
// there is none. Metrics keeps only the numbers of the stored object.
func (s *Store) ReadRun(project, runID string) (RunRow, bool, error) {
	r := RunRow{Project: project, RunID: runID}
	var names, kinds, metrics string
	var started, finished sql.NullFloat64
	err := s.db.QueryRow(`SELECT trainer, backend, schema_names, kinds, status, trigger,
		created_at, started_at, finished_at, n_train, n_val, n_test, split_seed, metrics,
		artifact_dir, model_version, bundle_digest, error, error_code, host
		FROM training_runs WHERE project = ? AND run_id = ?`, project, runID).Scan(
		&r.Trainer, &r.Backend, &names, &kinds, &r.Status, &r.Trigger,
		&r.CreatedAt, &started, &finished, &r.NTrain, &r.NVal, &r.NTest, &r.SplitSeed, &metrics,
		&r.ArtifactDir, &r.ModelVersion, &r.BundleDigest, &r.Error, &r.ErrorCode, &r.Host)
	if errors.Is(err, sql.ErrNoRows) {
		return RunRow{}, false, nil
	}
	if err != nil {
		return RunRow{}, false, fmt.Errorf("writeback: run %q: %w", runID, err)
	}
	r.StartedAt, r.FinishedAt = started.Float64, finished.Float64
	_ = json.Unmarshal([]byte(names), &r.SchemaNames)
	_ = json.Unmarshal([]byte(kinds), &r.Kinds)
	var m map[string]any
	if json.Unmarshal([]byte(metrics), &m) == nil {
		r.Metrics = map[string]float64{}
		for k, v := range m {
			if f, ok := v.(float64); ok {
				r.Metrics[k] = f
			}
		}
	}
	return r, true, nil
}

// ItemSplit is the split of an item in a run's bundle: the one
// training_run_items records ("train", "test", ...), or "unlabeled" for an
// item the run holds a prelabel of and has no row for (see RunPrelabels);
// "" when the run has neither.
func (s *Store) ItemSplit(project, runID, itemID string) (string, error) {
	var split string
	err := s.db.QueryRow(`SELECT coalesce(
		(SELECT split FROM training_run_items WHERE project = ?1 AND run_id = ?2 AND instance_id = ?3),
		(SELECT ?4 FROM training_predictions WHERE project = ?1 AND run_id = ?2 AND instance_id = ?3 LIMIT 1),
		'')`, project, runID, itemID, bundle.UnlabeledSplit).Scan(&split)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("writeback: items of run %q: %w", runID, err)
	}
	return split, nil
}

// PrelabelLabels reads the label names out of a prelabel's payload in any
// form Potato reads one: {"label": NAME, ...}, a name, or a list of either
// (a multilabel prelabel as Publish stores it). For a multilabel schema a
// name that joins several with "|" (the trainers' form) is split, and the
// names come back sorted and without repeats, so two payloads that
// pre-select the same boxes give the same names. ok is false for a payload
// with no label in any of these forms (null, a number, an object without
// label); a multilabel prelabel of no name is ok with no names.
func PrelabelLabels(kind config.Kind, payload []byte) (names []string, ok bool) {
	var v any
	if err := json.Unmarshal(payload, &v); err != nil {
		return nil, false
	}
	name := func(e any) (string, bool) {
		switch x := e.(type) {
		case string:
			return x, true
		case map[string]any:
			s, ok := x["label"].(string)
			return s, ok
		}
		return "", false
	}
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			n, ok := name(e)
			if !ok {
				return nil, false
			}
			names = append(names, n)
		}
	case map[string]any:
		if l, isList := x["label"].([]any); isList {
			return PrelabelLabels(kind, mustJSON(l))
		}
		n, ok := name(x)
		if !ok {
			return nil, false
		}
		names = []string{n}
	case string:
		names = []string{x}
	default:
		return nil, false
	}
	if kind != config.KindMultilabel {
		return names, true
	}
	var out []string
	for _, n := range names {
		for part := range strings.SplitSeq(n, "|") {
			if part != "" {
				out = append(out, part)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), true
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// labelNames are the label names a payload's label gives: a nominal
// schema's one string; a multilabel schema's names, from a "|"-joined
// string or a list of strings or {"label": NAME} objects, empty names
// left out. ok is false for any other form or kind.
func labelNames(kind config.Kind, raw json.RawMessage) (names []string, ok bool) {
	var one string
	switch kind {
	case config.KindNominal, config.KindOrdinal:
		if json.Unmarshal(raw, &one) != nil {
			return nil, false
		}
		return []string{one}, true
	case config.KindMultilabel:
		if json.Unmarshal(raw, &one) == nil {
			for n := range strings.SplitSeq(one, "|") {
				if n != "" {
					names = append(names, n)
				}
			}
			return names, true
		}
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil {
			return nil, false
		}
		for _, e := range list {
			var obj struct {
				Label *string `json:"label"`
			}
			switch {
			case json.Unmarshal(e, &one) == nil:
			case json.Unmarshal(e, &obj) == nil && obj.Label != nil:
				one = *obj.Label
			default:
				return nil, false
			}
			if one != "" {
				names = append(names, one)
			}
		}
		return names, true
	}
	return nil, false
}

// potatoMultilabel rewrites a multilabel prediction's payload as Potato
// stores a prelabel that its annotation page pre-selects: the trainers'
// {"label": "a|b", "confidence": c} (FORMATS.md: the chosen names, sorted,
// joined by "|"; or the names as a list) becomes one entry a chosen name,
// [{"label": "a", "confidence": pa}, {"label": "b", "confidence": pb}], and
// no name chosen becomes []. Each name's confidence is its probability in
// the prediction's probs (rawProbs, checked by refusal), or c when probs
// has none for it. Potato 2.12 reads a prelabel's label names
// from a string, a {"label": NAME} object or a list of either, and checks
// the box of each name that is one of the schema's labels; "a|b" is none of
// them, so the joined form pre-selects nothing. A payload that is not such
// an object (a list already, null) is returned unchanged.
func potatoMultilabel(raw, rawProbs []byte) ([]byte, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return raw, nil
	}
	var p struct {
		Label      json.RawMessage `json:"label"`
		Confidence json.RawMessage `json:"confidence"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, err
	}
	var names []string
	var joined string
	switch {
	case p.Label == nil:
		return raw, nil
	case json.Unmarshal(p.Label, &joined) == nil:
		for name := range strings.SplitSeq(joined, "|") {
			if name != "" {
				names = append(names, name)
			}
		}
	case json.Unmarshal(p.Label, &names) == nil:
		names = slices.DeleteFunc(names, func(n string) bool { return n == "" })
	default:
		return raw, nil
	}
	type entry struct {
		Label      string          `json:"label"`
		Confidence json.RawMessage `json:"confidence,omitempty"`
	}
	probs, _ := probsOf(rawProbs)
	out := make([]entry, len(names))
	for i, name := range names {
		out[i] = entry{Label: name, Confidence: p.Confidence}
		if v, ok := probs[name]; ok {
			out[i].Confidence = strconv.AppendFloat(nil, v, 'g', -1, 64)
		}
	}
	return json.Marshal(out)
}
