package writeback

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

// StoredLabels returns, for one schema, the label of each prelabel that
// run runID holds in the store now, in the form predictions and gold
// labels take: a nominal label, or a multilabel prelabel's names sorted
// and joined by "|". A row whose payload names no label is left out.
func (s *Store) StoredLabels(project, runID string, schema bundle.Schema) (map[string]string, error) {
	rows, err := s.db.Query(`SELECT instance_id, payload FROM training_predictions
		WHERE project = ? AND run_id = ? AND schema_name = ?`, project, runID, schema.Name)
	if err != nil {
		return nil, fmt.Errorf("writeback: prelabels of run %s: %w", runID, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, payload string
		if err := rows.Scan(&id, &payload); err != nil {
			return nil, fmt.Errorf("writeback: prelabels of run %s: %w", runID, err)
		}
		if l, ok := storedLabel(schema.Kind, []byte(payload)); ok {
			out[id] = l
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("writeback: prelabels of run %s: %w", runID, err)
	}
	return out, nil
}

// storedLabel is the label of a stored payload, read by PrelabelLabels,
// in the form predictions take: a multilabel prelabel's names (sorted)
// joined by "|".
func storedLabel(kind config.Kind, payload []byte) (string, bool) {
	if kind == config.KindSpan {
		return predictedSpans(payload), true
	}
	names, ok := PrelabelLabels(kind, payload)
	if !ok || kind != config.KindMultilabel && (len(names) != 1 || names[0] == "") {
		return "", false
	}
	return strings.Join(names, "|"), true
}

// Comparison is two runs' scores for one schema on the same test items.
type Comparison struct {
	Ours, Theirs SchemaScore
	// N is the number of test items both runs predicted, out of NTest
	// with a gold label.
	N, NTest int
	// gold, ours and theirs are the labels on the common items, for
	// Bootstrap.
	gold, ours, theirs map[string]string
	kind               config.Kind
	// scale is an ordinal schema's (ordinal_gate.go).
	scale []string
}

// CompareOnCommon scores, for one schema, this run's predictions
// (predictionsPath) and another run's labels (other: item to label, as
// StoredLabels returns them) against the gold labels of the bundle's test
// split, on the test items both predicted: the same items, today's
// labels, for both. Items the other run has no prelabel for (they were in
// its train split, or it did not predict them) are left out of both.
func CompareOnCommon(bundleDir, predictionsPath string, s bundle.Schema, other map[string]string) (Comparison, error) {
	var c Comparison
	path, _, err := splitPath(bundleDir, "test")
	if err != nil || path == "" {
		return c, err
	}
	read := readGold
	if s.Kind == config.KindSpan {
		read = readSpanGold
	}
	golds, err := read(path, []bundle.Schema{s})
	if err != nil {
		return c, fmt.Errorf("writeback: compare: test split: %w", err)
	}
	gold := golds[s.Name]
	ours := map[string]string{}
	var p predLine
	err = scanLines(predictionsPath, func(line []byte, _ int) error {
		if err := p.parse(line); err != nil {
			return err
		}
		if p.schema == s.Name {
			if _, ok := gold[p.id]; ok && s.Kind == config.KindSpan {
				ours[p.id] = predictedSpans(p.raw[2])
			} else if ok {
				ours[p.id] = normalLabel(s.Kind, labelOf(p.raw[2]))
			}
		}
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("writeback: compare: %w", err)
	}
	return compareOnCommon(s, gold, ours, other), nil
}

// compareOnCommon is CompareOnCommon's work on the test split's gold
// labels of s and this run's predicted labels (ours, normalLabel's form)
// of them.
func compareOnCommon(s bundle.Schema, gold, ours, other map[string]string) Comparison {
	c := Comparison{NTest: len(gold)}
	common, mine, theirs := map[string]string{}, map[string]string{}, map[string]string{}
	for id, g := range gold {
		o, okO := ours[id]
		t, okT := other[id]
		if okO && okT {
			common[id], mine[id], theirs[id] = normalLabel(s.Kind, g), o, t
		}
	}
	c.N = len(common)
	c.gold, c.ours, c.theirs, c.kind = common, mine, theirs, s.Kind
	if s.Ordinal() {
		compareOrdinal(&c, s)
		return c
	}
	if s.Kind == config.KindSpan {
		c.Ours, c.Theirs = scoreSpans(s.Labels, common, mine), scoreSpans(s.Labels, common, theirs)
	} else if s.Kind == config.KindMultilabel {
		c.Ours, c.Theirs = scoreMultilabel(common, mine), scoreMultilabel(common, theirs)
	} else {
		c.Ours, c.Theirs = scoreNominal(common, mine), scoreNominal(common, theirs)
	}
	return c
}

// normalLabel sorts a multilabel label's names, so that the same set
// compares equal whatever order a trainer or an annotator gave.
func normalLabel(kind config.Kind, l string) string {
	if kind != config.KindMultilabel || l == "" {
		return l
	}
	names := strings.Split(l, "|")
	slices.Sort(names)
	return strings.Join(names, "|")
}

// PublishedRunOf returns the run whose prelabels of schema Potato shows
// now, other than except: of the runs holding rows of the schema, the one
// whose rows were stamped last. "" when there is none.
func (s *Store) PublishedRunOf(project, schema, except string) (string, error) {
	var run string
	err := s.db.QueryRow(`SELECT run_id FROM training_predictions
		WHERE project = ? AND schema_name = ? AND run_id <> ?
		GROUP BY run_id ORDER BY max(created_at) DESC, run_id DESC LIMIT 1`, project, schema, except).Scan(&run)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("writeback: published run of %s: %w", schema, err)
	}
	return run, nil
}
