// Package report reads Potato's store, the run directories and the
// annotators' user_state.json files to say how annotators took a run's
// prelabels (Acceptance), how the reviewers of Potato's model review
// judged them (Review), and where an item's prelabel came from (Explain):
// potato-dispatch report and explain, described in potato-dispatch(1).
// It only reads; the Training page can show the same structures.
package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	// The SQLite driver of Potato's store, which lib/writeback opens for
	// the reports (lib/writeback, "the driver").
	_ "modernc.org/sqlite"

	"potato-training/lib/config"
	"potato-training/lib/project"
	"potato-training/lib/rundir"
	"potato-training/lib/writeback"
)

// The label flag's thresholds: a label is flagged when its prelabels were
// accepted less than LabelShare of the time, once at least LabelMinN of
// them were judged (fewer say too little about the model). An annotator's
// flag is a test (BiasRule).
const (
	LabelShare = 0.5
	LabelMinN  = 10
)

// SawPrelabel is how the report decides that an annotator saw a prelabel,
// and why; the report prints it and potato-dispatch(1) states it.
const SawPrelabel = `An annotator is counted as having seen an item's prelabel when ` +
	`(1) the item was in the unlabeled split of the bundle of the run whose prelabel it holds: ` +
	`nobody had labelled it when that annotations snapshot was taken, so any label on it now came later ` +
	`(an item someone answered in a radio or select schema without a label, nothing or two labels chosen, ` +
	`also lands in that split; while such an answer is on it, its labels may predate the snapshot, so the ` +
	`item is left out and counted; a multiselect answer with no box checked is the answer "no label" and ` +
	`counts, though it too may predate the snapshot); ` +
	`(2) the annotator's label for the schema is in their user_state.json now; and ` +
	`(3) that file was last written after the run published its prelabels (its end, or the moment ` +
	`potato-dispatch publish wrote them). ` +
	`Potato's user_state.json keeps no time per label, so the snapshot and the file's modification time ` +
	`are the only clocks: a file last written before the run published holds only labels made before the ` +
	`prelabel existed, and those labels are left out and counted; a label made after the snapshot but ` +
	`before Potato showed the prelabel (it reads stored prelabels when it starts) still counts when its ` +
	`annotator wrote the file again later. Items labelled in the bundle (train, val, test) are left out: ` +
	`their label came before their prelabel.`

// Accepted is the rule for "equal to the prelabel", stated with the report.
const Accepted = `A label is accepted when it is the prelabel: for a radio or select schema the same label, ` +
	`for a multiselect schema the same set of labels (no box checked is the empty set). By label, a radio prelabel is accepted when the ` +
	`annotator chose that label; each label of a multiselect prelabel is accepted when the annotator ` +
	`chose it too. Shares are of human labels (one annotator, one item), with a 95% Wilson interval.`

// Heldout is a run's held-out score on one schema: its test split
// predictions against the human labels when it ran. N is 0 when only the
// store's metrics were left to read it from.
type Heldout struct {
	N        int     `json:"n"`
	Accuracy float64 `json:"accuracy"`
	MacroF1  float64 `json:"macro_f1"`
	// Precision is, for a radio or select schema, each label the run
	// predicted on the test split: how many test items it predicted it on
	// and how many of those the test split's labels agreed with.
	Precision []LabelPrecision `json:"precision,omitempty"`
}

// LabelPrecision is a label's held-out precision: of Predicted test
// items the model predicted it on, Agreed were labelled it.
type LabelPrecision struct {
	Label     string  `json:"label"`
	Predicted int     `json:"predicted"`
	Agreed    int     `json:"agreed"`
	Precision float64 `json:"precision"`
}

// SchemaAcceptance is the report of one schema: its published run, and
// how annotators took its prelabels on the items it predicted while they
// were unlabeled.
type SchemaAcceptance struct {
	Schema       string      `json:"schema"`
	Kind         config.Kind `json:"kind"`
	RunID        string      `json:"run_id"`
	Trainer      string      `json:"trainer"`
	BundleDigest string      `json:"bundle_digest"`
	PublishedAt  *time.Time  `json:"published_at,omitempty"`
	Heldout      *Heldout    `json:"heldout,omitempty"`
	// NPrelabels: the run's prelabels in the store now on items of its
	// bundle's unlabeled split.
	NPrelabels int `json:"n_prelabels"`
	// NItemsLabeled: of those items, the ones with at least one counted
	// label.
	NItemsLabeled int `json:"n_items_labeled"`
	// NBeforePublish: labels on those items left out, as their annotator's
	// user_state.json was last written before the run published.
	NBeforePublish int `json:"n_labels_before_publish"`
	// NItemsAnsweredWithoutLabel: of those items, the ones left out as an
	// annotator's answer on them in a radio or select schema has no label,
	// so that their labels may predate the bundle.
	NItemsAnsweredWithoutLabel int `json:"n_items_answered_without_label"`
	// All, Annotators and Labels count human labels (annotator, item):
	// in all, by annotator, and by the prelabel's label.
	All        Tally   `json:"all"`
	Annotators []Tally `json:"annotators"`
	Labels     []Tally `json:"labels"`
	// Review is the run's precision as Potato's reviewers judged its
	// prelabels of the schema (ReviewRule); never nil.
	Review *Review `json:"review"`
}

// Flag is a row of the report that deserves a look.
type Flag struct {
	Kind     string  `json:"kind"`   // "annotator" or "label"
	Schema   string  `json:"schema"` // "" for an annotator over every schema
	Name     string  `json:"name"`
	N        int     `json:"n"`
	Accepted int     `json:"accepted"`
	Share    float64 `json:"share"`
	Reason   string  `json:"reason"`
	// Bias is an annotator's test (BiasRule).
	Bias *BiasTest `json:"bias,omitempty"`
}

// Acceptance is potato-dispatch report's answer.
type Acceptance struct {
	Project              string             `json:"project"`
	SawPrelabel          string             `json:"saw_prelabel"`
	Accepted             string             `json:"accepted"`
	BiasRule             string             `json:"bias_rule"`
	BiasFamily           BiasFamily         `json:"bias_family"`
	ReviewRule           string             `json:"review_rule"`
	Verdicts             VerdictSummary     `json:"verdicts"`
	PreAnnotationEnabled bool               `json:"pre_annotation_enabled"`
	Schemas              []SchemaAcceptance `json:"schemas"`
	// Annotators counts each annotator's labels over every schema.
	Annotators []Tally   `json:"annotators"`
	Flags      []Flag    `json:"flags"`
	Notes      []string  `json:"notes"`
	Generated  time.Time `json:"generated_at"`
}

// Options narrow the report.
type Options struct {
	// RunID reports on this run's prelabels, in each schema it holds
	// prelabels of, instead of each schema's published run.
	RunID string
	// Schema reports on this schema alone.
	Schema string
}

// ErrNoStore is the answer for a project whose store does not exist.
var ErrNoStore = errors.New("no store")

// openStore opens the store of cfg if it exists; a read must not make it.
func openStore(cfg *config.Config) (*writeback.Store, string, error) {
	path := writeback.StorePath(cfg)
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, path, fmt.Errorf("%w: %s does not exist, so no run has published prelabels", ErrNoStore, path)
		}
		return nil, path, err
	}
	s, err := writeback.OpenStore(path)
	return s, path, err
}

// Judgement is one annotator's label on an item that showed a prelabel.
// Prelabel and Label are label names: one for a radio schema, a sorted set
// for a multiselect one.
type Judgement struct {
	Annotator string
	Item      string
	Prelabel  []string
	Label     []string
}

// BuildAcceptance reads what the report needs and computes it.
func BuildAcceptance(cfg *config.Config, opt Options) (*Acceptance, error) {
	a := &Acceptance{
		Project: cfg.TaskName, SawPrelabel: SawPrelabel, Accepted: Accepted, BiasRule: BiasRule, ReviewRule: ReviewRule,
		Verdicts:             VerdictSummary{OtherRuns: []RunVerdicts{}},
		PreAnnotationEnabled: cfg.PreAnnotationEnabled(), Schemas: []SchemaAcceptance{},
		Annotators: []Tally{}, Flags: []Flag{}, Notes: []string{}, Generated: time.Now().UTC(),
	}
	if !cfg.Training.Enabled {
		a.Notes = append(a.Notes, "model_training.enabled is not true in the config, so Potato (2.11 and later) puts no stored prelabel back in its items as it starts and shows none: these figures measure agreement with the model, not acceptance")
	}
	s, _, err := openStore(cfg)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	pubs, err := s.PublishedRuns(cfg.TaskName)
	if err != nil {
		return nil, err
	}
	type target struct{ schema, run string }
	var targets []target
	if opt.RunID != "" {
		row, ok, err := s.ReadRun(cfg.TaskName, opt.RunID)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("no run %s in Potato's store", opt.RunID)
		}
		for _, name := range row.SchemaNames {
			targets = append(targets, target{name, opt.RunID})
		}
	} else {
		for _, p := range pubs {
			targets = append(targets, target{p.Schema, p.RunID})
			if p.Others > 0 {
				a.Notes = append(a.Notes, fmt.Sprintf("%s: %d prelabels of older runs are still in the store (on items run %s did not predict); they are not in this report", p.Schema, p.Others, p.RunID))
			}
		}
	}
	if opt.Schema != "" {
		targets = slices.DeleteFunc(targets, func(t target) bool { return t.schema != opt.Schema })
	}
	if len(targets) == 0 {
		a.Notes = append(a.Notes, "no prelabels in Potato's store to report on")
		return a, nil
	}

	ann, err := project.ReadAnnotations(cfg.AnnotationDir, cfg.Schemes)
	if err != nil {
		return nil, fmt.Errorf("the annotators' labels: %w", err)
	}
	written := make([]time.Time, len(ann.Annotators))
	for i, an := range ann.Annotators {
		if fi, err := os.Stat(filepath.Join(cfg.AnnotationDir, an.Dir, "user_state.json")); err == nil {
			written[i] = fi.ModTime()
		}
	}
	root := &rundir.Root{Dir: cfg.TrainingDir()}

	overall := map[string]*Tally{}
	// The annotators' strata: per schema, and over all schemas.
	type bySchema map[string]*strataBuilder
	var schemaStrata []bySchema
	overallStrata := map[string]*strataBuilder{}
	inSchemas := map[string]int{}
	for _, t := range targets {
		sc, ok := cfg.Scheme(t.schema)
		if !ok || !sc.Classification() {
			a.Notes = append(a.Notes, fmt.Sprintf("%s: not a radio, select or multiselect schema of the config: its prelabels are not compared", t.schema))
			continue
		}
		if cfg.Training.Enabled && !slices.Contains(cfg.Training.Writeback.Schemas, t.schema) {
			a.Notes = append(a.Notes, fmt.Sprintf("%s is not in model_training.writeback.schemas, so Potato (2.11 and later) puts none of its stored prelabels back in its items as it starts and shows none: its figures measure agreement with the model, not acceptance", t.schema))
		}
		sa := SchemaAcceptance{Schema: t.schema, Kind: sc.Kind, RunID: t.run, Annotators: []Tally{}, Labels: []Tally{}}
		row, _, err := s.ReadRun(cfg.TaskName, t.run)
		if err != nil {
			return nil, err
		}
		sa.Trainer, sa.BundleDigest = row.Trainer, row.BundleDigest
		var published time.Time
		if row.FinishedAt > 0 {
			published = unixTime(row.FinishedAt)
		} else if info, err := root.Read(t.run); err == nil && info.FinishedAt != nil {
			published = info.FinishedAt.UTC()
		}
		sa.Heldout = heldoutOf(root, row, t.schema)

		pre, err := s.RunPrelabels(cfg.TaskName, t.run, t.schema, "unlabeled")
		if err != nil {
			return nil, err
		}
		// A run published by hand stamps its rows with that moment, after
		// the run's end.
		for _, p := range pre {
			if at := unixTime(p.CreatedAt); at.After(published) {
				published = at
			}
		}
		if !published.IsZero() {
			sa.PublishedAt = &published
		}
		sa.NPrelabels = len(pre)
		var js []Judgement
		for _, p := range pre {
			names, ok := writeback.PrelabelLabels(sc.Kind, []byte(p.Payload))
			if !ok || sc.Kind == config.KindNominal && len(names) != 1 {
				continue
			}
			answers := ann.Answers(p.InstanceID, t.schema)
			if sc.Kind == config.KindNominal && slices.ContainsFunc(answers, func(v project.Vote) bool { return v.Target == nil }) {
				sa.NItemsAnsweredWithoutLabel++
				continue
			}
			counted := false
			// A multiselect answer with no box checked (no target) is the
			// answer "no label", which may reject a prelabel.
			for _, v := range answers {
				if !published.IsZero() && !written[v.Annotator].IsZero() && written[v.Annotator].Before(published) {
					sa.NBeforePublish++
					continue
				}
				js = append(js, Judgement{Annotator: ann.Annotators[v.Annotator].ID, Item: p.InstanceID, Prelabel: names, Label: voteLabels(v.Target)})
				counted = true
			}
			if counted {
				sa.NItemsLabeled++
			}
		}
		tallySchema(&sa, js)
		ref := referenceOf(sa.Heldout, sc.Kind)
		strata := bySchema{}
		for _, j := range js {
			o := overall[j.Annotator]
			if o == nil {
				o = &Tally{Name: j.Annotator}
				overall[j.Annotator] = o
			}
			ok := slices.Equal(j.Prelabel, j.Label)
			o.add(ok)
			b := strata[j.Annotator]
			if b == nil {
				b = &strataBuilder{}
				strata[j.Annotator] = b
			}
			ob := overallStrata[j.Annotator]
			if ob == nil {
				ob = &strataBuilder{}
				overallStrata[j.Annotator] = ob
			}
			key, found := "", false
			if ref != nil {
				key, found = ref.key(j.Prelabel)
			}
			if !found {
				b.noRef++
				ob.noRef++
				continue
			}
			b.add(key, ref.counts[key], ok)
			ob.add(t.schema+"\x00"+key, ref.counts[key], ok)
		}
		if ref == nil && len(js) > 0 {
			a.Notes = append(a.Notes, fmt.Sprintf("%s: run %s recorded no held-out score with its count of test items, so its annotators' agreement is not tested for automation bias", t.schema, t.run))
		}
		schemaStrata = append(schemaStrata, strata)
		a.Schemas = append(a.Schemas, sa)
	}

	// The tests: each annotator in each schema, and over all schemas for
	// one with tested labels in several (for one with tested labels in a
	// single schema, that schema's test is theirs over all).
	var tests []*BiasTest
	for i := range a.Schemas {
		sa := &a.Schemas[i]
		for k := range sa.Annotators {
			row := &sa.Annotators[k]
			row.Bias = schemaStrata[i][row.Name].test()
			tests = append(tests, row.Bias)
			if row.Bias.N > 0 {
				inSchemas[row.Name]++
			}
		}
	}
	overallTest := map[string]*BiasTest{}
	for _, name := range slices.Sorted(maps.Keys(overallStrata)) {
		if inSchemas[name] > 1 {
			overallTest[name] = overallStrata[name].test()
			tests = append(tests, overallTest[name])
		}
	}
	a.BiasFamily = correct(tests)
	if err := buildReviews(cfg, s, root, a); err != nil {
		return nil, err
	}

	flaggedIn := map[string]bool{}
	for i := range a.Schemas {
		sa := &a.Schemas[i]
		for k := range sa.Annotators {
			row := &sa.Annotators[k]
			if row.Bias.Verdict == VerdictFlagged {
				row.Flag = biasReason(row.Bias)
				flaggedIn[row.Name] = true
			}
		}
		a.Flags = append(a.Flags, schemaFlags(sa)...)
	}
	for _, name := range slices.Sorted(maps.Keys(overall)) {
		o := overall[name]
		o.finish()
		o.Bias = overallTest[name]
		if o.Bias == nil {
			// Their tested labels, if any, are in one schema: that
			// schema's test.
			for _, sa := range a.Schemas {
				for _, row := range sa.Annotators {
					if row.Name == name && (o.Bias == nil || row.Bias.N > 0) {
						o.Bias = row.Bias
					}
				}
			}
		}
		if o.Bias != nil && o.Bias.Verdict == VerdictFlagged {
			o.Flag = biasReason(o.Bias)
			if !flaggedIn[name] {
				a.Flags = append(a.Flags, Flag{Kind: "annotator", Name: name, N: o.N, Accepted: o.Accepted, Share: o.Share, Reason: o.Flag, Bias: o.Bias})
			}
		}
		a.Annotators = append(a.Annotators, *o)
	}
	return a, nil
}

// labelReason is the label flag's reason, as the report prints it.
const labelReason = "the model is often wrong here: its prelabels were accepted less than half the time"

// biasReason is a flagged annotator's reason, as the report prints it.
func biasReason(b *BiasTest) string {
	return fmt.Sprintf("possible automation bias: agreed with the prelabels more often than a careful annotator would (%.3f against %.3f expected, p = %s, below the level %.2g of the correction)",
		b.Observed, b.Expected, pText(*b.PValue), b.Level)
}

// pText prints a p-value; one too small for a float64 is below 1e-300.
func pText(p float64) string {
	if p < 1e-300 {
		return "<1e-300"
	}
	return fmt.Sprintf("%.2g", p)
}

func weakLabel(t Tally) bool { return t.N >= LabelMinN && 2*t.Accepted < t.N }

// tallySchema counts js into sa: in all, by annotator and by label.
func tallySchema(sa *SchemaAcceptance, js []Judgement) {
	sa.All = Tally{Name: sa.Schema}
	byAnn := map[string]*Tally{}
	byLabel := map[string]*Tally{}
	get := func(m map[string]*Tally, k string) *Tally {
		if m[k] == nil {
			m[k] = &Tally{Name: k}
		}
		return m[k]
	}
	for _, j := range js {
		ok := slices.Equal(j.Prelabel, j.Label)
		sa.All.add(ok)
		get(byAnn, j.Annotator).add(ok)
		if sa.Kind == config.KindMultilabel {
			if len(j.Prelabel) == 0 {
				get(byLabel, NoLabel).add(len(j.Label) == 0)
			}
			for _, name := range j.Prelabel {
				get(byLabel, name).add(slices.Contains(j.Label, name))
			}
		} else {
			get(byLabel, j.Prelabel[0]).add(ok)
		}
	}
	sa.All.finish()
	for _, k := range slices.Sorted(maps.Keys(byAnn)) {
		t := byAnn[k]
		t.finish()
		sa.Annotators = append(sa.Annotators, *t)
	}
	for _, k := range slices.Sorted(maps.Keys(byLabel)) {
		t := byLabel[k]
		t.finish()
		if weakLabel(*t) {
			t.Flag = labelReason
		}
		sa.Labels = append(sa.Labels, *t)
	}
}

// NoLabel names, by label, the multiselect prelabels that chose no label.
const NoLabel = "(none)"

// schemaFlags are the flags of one schema's rows.
func schemaFlags(sa *SchemaAcceptance) []Flag {
	var out []Flag
	for _, t := range sa.Annotators {
		if t.Flag == "" {
			continue
		}
		out = append(out, Flag{Kind: "annotator", Schema: sa.Schema, Name: t.Name, N: t.N, Accepted: t.Accepted, Share: t.Share, Reason: t.Flag, Bias: t.Bias})
	}
	for _, t := range sa.Labels {
		if t.Flag != "" {
			out = append(out, Flag{Kind: "label", Schema: sa.Schema, Name: t.Name, N: t.N, Accepted: t.Accepted, Share: t.Share, Reason: t.Flag})
		}
	}
	return out
}

// voteLabels is a vote's target as label names: one for a radio schema,
// the sorted set for a multiselect one.
func voteLabels(target any) []string {
	switch t := target.(type) {
	case string:
		return []string{t}
	case []string:
		return t
	}
	return nil
}

// heldoutOf is a run's held-out score on schema: run.json's, which has the
// count of test items, else the store's metrics (Potato's names: plain for
// a run of one schema, "<schema>/..." for a run of several).
func heldoutOf(root *rundir.Root, row writeback.RunRow, schema string) *Heldout {
	if info, err := root.Read(row.RunID); err == nil {
		if raw, ok := info.Metrics["heldout"]; ok {
			var scores map[string]writeback.SchemaScore
			if b, err := json.Marshal(raw); err == nil && json.Unmarshal(b, &scores) == nil {
				if sc, ok := scores[schema]; ok {
					h := &Heldout{N: sc.N, Accuracy: sc.Accuracy, MacroF1: sc.MacroF1}
					if sc.Kind == config.KindNominal {
						for _, l := range sc.Labels {
							if n := l.TP + l.FP; n > 0 {
								h.Precision = append(h.Precision, LabelPrecision{Label: l.Label, Predicted: n, Agreed: l.TP, Precision: float64(l.TP) / float64(n)})
							}
						}
					}
					return h
				}
			}
		}
	}
	prefix := ""
	if len(row.SchemaNames) > 1 {
		prefix = schema + "/"
	}
	acc, ok := row.Metrics[prefix+"test_accuracy"]
	if !ok {
		return nil
	}
	return &Heldout{Accuracy: acc, MacroF1: row.Metrics[prefix+"test_macro_f1"]}
}

func unixTime(s float64) time.Time {
	return time.Unix(0, int64(s*1e9)).UTC()
}
