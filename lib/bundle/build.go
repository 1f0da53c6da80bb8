package bundle

import (
	"fmt"
	"os"

	"potato-training/lib/config"
	"potato-training/lib/project"
)

// Build writes the bundle of a run into dir: every item of the project's
// data files that has a resolved target for one of schemas goes to its
// split; with writeback.include_unlabeled the others go to unlabeled.jsonl.
// Items are streamed; only the annotators' labels are held in memory. A
// build that fails removes dir.
func Build(cfg *config.Config, dir string, schemas []string) (Manifest, error) {
	var specs []Schema
	var schemes []config.Scheme
	for _, name := range schemas {
		s, ok := cfg.Scheme(name)
		if !ok {
			return Manifest{}, fmt.Errorf("schema %q is not in annotation_schemes", name)
		}
		schemes = append(schemes, s)
		specs = append(specs, Schema{Name: s.Name, AnnotationType: s.AnnotationType, Kind: s.Kind, Labels: s.Labels, SourceField: s.SourceField})
	}
	ann, err := project.ReadAnnotations(cfg.AnnotationDir, schemes)
	if err != nil {
		return Manifest{}, err
	}
	src := project.Source{DataFiles: cfg.DataFiles, IDKey: cfg.IDKey, TextKey: cfg.TextKey,
		AnnotationDir: cfg.AnnotationDir, Schemes: schemes, NoDuplicateCheck: true}
	// Potato resolves the data files' items only: a first pass keeps the
	// votes on those (consensus would otherwise weigh votes on items no
	// longer there).
	inData := map[string]struct{}{}
	if err := project.EachItem(src, func(it project.Item) error {
		if ann.Has(it.ID) {
			inData[it.ID] = struct{}{}
		}
		return nil
	}); err != nil {
		return Manifest{}, err
	}
	ann.Retain(func(id string) bool { _, ok := inData[id]; return ok })
	res, err := ann.Resolve(cfg.Training.Aggregation)
	if err != nil {
		return Manifest{}, err
	}
	var splits []Split
	var names []string
	for _, s := range cfg.Training.Splits {
		splits = append(splits, Split{Name: s.Name, Fraction: s.Fraction})
		names = append(names, s.Name)
	}
	unlabeled := cfg.Training.Writeback.IncludeUnlabeled
	w, err := NewWriter(dir, names, unlabeled)
	if err != nil {
		return Manifest{}, err
	}
	seed := int64(cfg.Training.SplitSeed)
	skipped := 0
	// Only labelled ids are checked for duplicates: that set is as large as
	// the labels already in memory, so memory stays flat as items grow.
	labelled := map[string]struct{}{}
	err = project.EachItem(src, func(it project.Item) error {
		var targets map[string]any
		for _, s := range schemes {
			if t, ok := res.Target(it.ID, s.Name); ok {
				if targets == nil {
					targets = make(map[string]any, len(schemes))
				}
				targets[s.Name] = t
			}
		}
		if targets == nil {
			if unlabeled {
				return w.Add(UnlabeledSplit, Row{InstanceID: it.ID, Text: it.Text})
			}
			skipped++
			return nil
		}
		if _, dup := labelled[it.ID]; dup {
			return fmt.Errorf("item id %q appears twice in the data files", it.ID)
		}
		labelled[it.ID] = struct{}{}
		return w.Add(SplitOf(seed, it.ID, splits), Row{InstanceID: it.ID, Text: it.Text, Targets: targets})
	})
	if err != nil {
		w.Abort()
		os.RemoveAll(dir)
		return Manifest{}, err
	}
	m, err := w.Close(Manifest{
		Schemas:     specs,
		Modality:    "text",
		TextKey:     cfg.TextKey,
		SplitSeed:   seed,
		Aggregation: cfg.Training.Aggregation,
		Stats:       Stats{NSkippedNoLabel: skipped},
	})
	if err != nil {
		// Half a bundle is of no use, and on a full disk it keeps the
		// disk full for the run's own end and for Potato.
		os.RemoveAll(dir)
	}
	return m, err
}
