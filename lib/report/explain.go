package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"potato-training/lib/config"
	"potato-training/lib/project"
	"potato-training/lib/rundir"
	"potato-training/lib/writeback"
)

// ItemPrelabel is an item's prelabel in one schema and the run that made
// it.
type ItemPrelabel struct {
	// Labels are the names the prelabel pre-selects (a span schema's:
	// each span as LABEL START-END, explain_spans.go); Payload is the stored
	// JSON.
	Labels     []string        `json:"labels"`
	Payload    json.RawMessage `json:"payload"`
	Confidence *float64        `json:"confidence"`
	RunID      string          `json:"run_id"`
	Trainer    string          `json:"trainer"`
	RunStatus  string          `json:"run_status"`
	// Heldout is the run's held-out score on this schema; nil when the
	// run recorded none.
	Heldout *Heldout `json:"heldout,omitempty"`
	// BundleDigest is the digest of the annotations snapshot (the bundle)
	// the run trained on, as its manifest and training_runs have it.
	BundleDigest string `json:"bundle_digest"`
	// Split is the item's split in that bundle ("unlabeled": nobody had
	// labelled it; "test" or "val": it was labelled and held out).
	Split       string     `json:"split"`
	PublishedAt *time.Time `json:"published_at,omitempty"`
}

// AnnotatorLabel is one annotator's label on the item now.
type AnnotatorLabel struct {
	Annotator string `json:"annotator"`
	// Label is the label's target: a name (radio, select), a sorted list of
	// names (multiselect), a number (likert, slider, number) or spans.
	Label any `json:"label"`
	// Accepted says whether it is the prelabel; nil when the item has no
	// prelabel in this schema or the schema is not a classification.
	Accepted *bool `json:"accepted,omitempty"`
}

// ItemSchema is what Explain says of one schema.
type ItemSchema struct {
	Schema     string           `json:"schema"`
	Kind       config.Kind      `json:"kind"`
	Prelabel   *ItemPrelabel    `json:"prelabel"`
	Annotators []AnnotatorLabel `json:"annotators"`
}

// Explanation is potato-dispatch explain's answer: per schema, the item's
// prelabel, the run that made it and the annotators' labels now.
type Explanation struct {
	Project string       `json:"project"`
	Item    string       `json:"instance_id"`
	Schemas []ItemSchema `json:"schemas"`
}

// ErrNothing is Explain's answer for an item with no prelabel and no label.
var ErrNothing = errors.New("no prelabel and no label")

// Explain says, per schema of the config (and any other schema the item
// has a prelabel in), where the item's prelabel came from and what the
// annotators labelled it.
func Explain(cfg *config.Config, itemID string) (*Explanation, error) {
	e := &Explanation{Project: cfg.TaskName, Item: itemID, Schemas: []ItemSchema{}}
	var pre []writeback.StoredPrelabel
	runs := map[string]writeback.RunRow{}
	var splits = map[string]string{}
	s, _, err := openStore(cfg)
	switch {
	case err == nil:
		defer s.Close()
		if pre, err = s.ItemPrelabels(cfg.TaskName, itemID); err != nil {
			return nil, err
		}
		for _, p := range pre {
			if _, ok := runs[p.RunID]; ok {
				continue
			}
			row, _, err := s.ReadRun(cfg.TaskName, p.RunID)
			if err != nil {
				return nil, err
			}
			row.RunID = p.RunID
			runs[p.RunID] = row
			if splits[p.RunID], err = s.ItemSplit(cfg.TaskName, p.RunID, itemID); err != nil {
				return nil, err
			}
		}
	case !errors.Is(err, ErrNoStore):
		return nil, err
	}
	ann, err := project.ReadAnnotations(cfg.AnnotationDir, cfg.Schemes)
	if err != nil {
		return nil, fmt.Errorf("the annotators' labels: %w", err)
	}
	root := &rundir.Root{Dir: cfg.TrainingDir()}

	var names []string
	for _, sc := range cfg.Schemes {
		if sc.Kind != config.KindOther && sc.Kind != "" && !slices.Contains(names, sc.Name) {
			names = append(names, sc.Name)
		}
	}
	for _, p := range pre {
		if !slices.Contains(names, p.Schema) {
			names = append(names, p.Schema)
		}
	}
	found := false
	for _, name := range names {
		sc, _ := cfg.Scheme(name)
		is := ItemSchema{Schema: name, Kind: sc.Kind, Annotators: []AnnotatorLabel{}}
		i := slices.IndexFunc(pre, func(p writeback.StoredPrelabel) bool { return p.Schema == name })
		if i >= 0 {
			p := pre[i]
			row := runs[p.RunID]
			ip := &ItemPrelabel{
				Payload: json.RawMessage(p.Payload), Confidence: p.Confidence, RunID: p.RunID,
				Trainer: row.Trainer, RunStatus: row.Status, BundleDigest: row.BundleDigest,
				Split: splits[p.RunID], Heldout: heldoutOf(root, row, name),
			}
			if sc.Kind == config.KindSpan {
				ip.Labels, _ = spanLabels([]byte(p.Payload))
			} else if labels, ok := writeback.PrelabelLabels(sc.Kind, []byte(p.Payload)); ok {
				ip.Labels = labels
			}
			if ip.Labels == nil {
				ip.Labels = []string{}
			}
			// A run published by hand stamps its rows with that moment.
			if at := max(row.FinishedAt, p.CreatedAt); at > 0 {
				t := unixTime(at)
				ip.PublishedAt = &t
			}
			is.Prelabel = ip
			found = true
		}
		for _, v := range ann.Votes(itemID, name) {
			al := AnnotatorLabel{Annotator: ann.Annotators[v.Annotator].ID, Label: v.Target}
			if is.Prelabel != nil && sc.Kind == config.KindSpan {
				if same, ok := spansAccepted(v.Target, is.Prelabel.Payload); ok {
					al.Accepted = &same
				}
			} else if is.Prelabel != nil && sc.Classification() {
				ok := slices.Equal(voteLabels(v.Target), is.Prelabel.Labels)
				al.Accepted = &ok
			}
			is.Annotators = append(is.Annotators, al)
			found = true
		}
		e.Schemas = append(e.Schemas, is)
	}
	if !found {
		return e, fmt.Errorf("item %q: %w in any schema", itemID, ErrNothing)
	}
	return e, nil
}
