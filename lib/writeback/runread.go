package writeback

import (
	"fmt"
	"slices"
	"time"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

// RunReading is what one read of a run's predictions, and one of each
// split file of its bundle, give the steps of its write-back: the
// held-out score (Scores), the preview (Preview), the promotion gate
// (Compare, Val) and the gates the publish judges each line by
// (Publish). Each step used to read the predictions and the splits it
// needs itself: four reads of the predictions and more where the gate
// compares. The publish still reads the predictions once more, streaming
// them into the store, since which schemas it publishes is the gate's
// decision, made on every val and test prediction.
//
// Memory: the gold labels of the val and test splits and the run's
// predicted labels of those items (as Score and Calibrate hold them), the
// bundle's item ids and train ids as 8-byte hashes (as Publish holds
// them), and for the preview one hash entry per prediction that passes
// the gates (as Preview holds them); the other predictions are streamed.
//
// A reading that meets anything it cannot read (a line that is not a
// prediction, a split file that is not a bundle's, no manifest) keeps
// nothing, and each step then reads for itself as it does alone, so that
// every error is the one that step gives, in the order the steps meet it.
type RunReading struct {
	bundleDir, predictionsPath string
	schemas, scored            []bundle.Schema
	ok                         bool
	// gold and pred: split (val, test), schema, item, label; gold as
	// readGold gives it, pred as Score reads it (labelOf).
	gold, pred map[string]map[string]map[string]string
	// hasSplit: the manifest lists the split.
	hasSplit map[string]bool
	g        *gates
	pv       *previewer // nil: no preview asked for, or it failed
	pvOpt    Options
	labeled  func(item, schema string) bool
}

// ReadEachStep is a RunReading that has read nothing: each step reads
// for itself, as it does alone. It serves a command that makes one step.
func ReadEachStep(bundleDir, predictionsPath string, schemas []bundle.Schema) *RunReading {
	return &RunReading{bundleDir: bundleDir, predictionsPath: predictionsPath, schemas: schemas, scored: scoredSchemas(schemas)}
}

// ReadRun reads the predictions in predictionsPath of a run on the
// bundle in bundleDir, whose manifest's schemas are schemas, once: see
// RunReading. preview, when not nil, is the preview's options
// (Store.Preview's opt and labeled).
func ReadRun(bundleDir, predictionsPath string, schemas []bundle.Schema, preview *Options, labeled func(item, schema string) bool) *RunReading {
	r := &RunReading{bundleDir: bundleDir, predictionsPath: predictionsPath, schemas: schemas, scored: scoredSchemas(schemas)}
	if preview != nil {
		r.pvOpt = *preview
	}
	r.labeled = labeled
	if err := r.read(preview != nil); err != nil {
		*r = RunReading{bundleDir: bundleDir, predictionsPath: predictionsPath, schemas: schemas, scored: r.scored, pvOpt: r.pvOpt, labeled: labeled}
		return r
	}
	r.ok = true
	return r
}

// read is ReadRun's work; any error leaves the reading to the steps.
func (r *RunReading) read(preview bool) error {
	m, err := bundle.ReadManifest(r.bundleDir)
	if err != nil {
		return err
	}
	files, err := splitFiles(r.bundleDir)
	if err != nil {
		return err
	}
	r.g = &gates{enabled: make(map[string]bool, len(r.pvOpt.Schemas)), minConfidence: r.pvOpt.MinConfidence,
		multi: map[string]bool{}, rules: predRules{items: cachedItems(files), schemas: map[string]bundle.Schema{}}}
	for _, name := range r.pvOpt.Schemas {
		r.g.enabled[name] = true
	}
	for _, sc := range m.Schemas {
		r.g.rules.schemas[sc.Name] = sc
		if sc.Kind == config.KindMultilabel {
			r.g.multi[sc.Name] = true
		}
	}
	r.g.train = newIDSet(max(m.Splits["train"].N, 0))
	key, keep := itemsKey(files)
	items := r.g.rules.items == nil
	if items {
		r.g.rules.items = newIDSet(0)
	}
	r.hasSplit = map[string]bool{}
	r.gold = map[string]map[string]map[string]string{}
	for _, f := range files {
		r.hasSplit[f.split] = true
		var gr *goldReader
		if (f.split == "val" || f.split == "test") && len(r.scored) > 0 {
			gr = newGoldReader(r.scored)
		}
		train := f.split == "train"
		if !items && !train && gr == nil {
			continue
		}
		ids := newIDReader()
		err := scanLines(f.path, func(line []byte, _ int) error {
			if items || train {
				id, err := ids.line(line)
				if err != nil {
					return err
				}
				if items {
					r.g.rules.items.add(id)
				}
				if train {
					r.g.train.add(id)
				}
			}
			if gr != nil {
				return gr.line(line)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s split: %w", f.split, err)
		}
		if gr != nil {
			r.gold[f.split] = gr.gold
		}
	}
	r.g.train.sort()
	if items {
		r.g.rules.items.sort()
		if keep {
			keepItems(key, r.g.rules.items)
		}
	}

	r.pred = map[string]map[string]map[string]string{}
	for split, golds := range r.gold {
		r.pred[split] = map[string]map[string]string{}
		for _, s := range r.scored {
			r.pred[split][s.Name] = make(map[string]string, len(golds[s.Name]))
		}
	}
	if preview {
		r.pv = newPreviewer(r.bundleDir, r.g, r.labeled)
		r.pv.kept, r.pv.low = &prelabelSet{}, map[string]int{}
	}
	var p predLine
	return scanLines(r.predictionsPath, func(line []byte, n int) error {
		if err := p.parse(line); err != nil {
			return err
		}
		for split, golds := range r.gold {
			if g, ok := golds[p.schema]; ok {
				if _, ok := g[p.id]; ok {
					r.pred[split][p.schema][p.id] = labelOf(p.raw[2])
				}
			}
		}
		if r.pv != nil {
			if err := r.pv.add(&p, n); err != nil {
				r.pv = nil // the preview reads for itself, and fails as it does
			}
		}
		return nil
	})
}

// BundleDir is the run's bundle.
func (r *RunReading) BundleDir() string { return r.bundleDir }

// Scores is Score(bundleDir, predictionsPath, schemas).
func (r *RunReading) Scores() (map[string]SchemaScore, error) {
	if !r.ok {
		return Score(r.bundleDir, r.predictionsPath, r.schemas)
	}
	out := map[string]SchemaScore{}
	if len(r.scored) > 0 && r.hasSplit["test"] {
		out = scoreAll(r.scored, r.gold["test"], r.pred["test"])
	}
	if len(spanSchemas(r.schemas)) > 0 {
		// A span schema's spans are not labels the reading holds: they are
		// read for the score alone (spans.go), as Score reads them.
		path, _, err := splitPath(r.bundleDir, "test")
		if err != nil {
			return nil, fmt.Errorf("writeback: score: %w", err)
		}
		if err := scoreSpanSchemas(path, r.predictionsPath, r.schemas, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// scoredSchema reports whether the reading holds s's labels.
func (r *RunReading) scoredSchema(s bundle.Schema) bool {
	if !r.ok {
		return false
	}
	for _, sc := range r.scored {
		if sc.Name == s.Name && sc.Kind == s.Kind {
			return true
		}
	}
	return false
}

// Compare is CompareOnCommon(bundleDir, predictionsPath, s, other).
func (r *RunReading) Compare(s bundle.Schema, other map[string]string) (Comparison, error) {
	if !r.scoredSchema(s) {
		return CompareOnCommon(r.bundleDir, r.predictionsPath, s, other)
	}
	if !r.hasSplit["test"] {
		return Comparison{}, nil
	}
	gold, ours := r.gold["test"][s.Name], map[string]string{}
	for id, l := range r.pred["test"][s.Name] {
		ours[id] = normalLabel(s.Kind, l)
	}
	return compareOnCommon(s, gold, ours, other), nil
}

// Split is SplitPredictions(bundleDir, predictionsPath, split, s), for
// the val and test splits.
func (r *RunReading) Split(split string, s bundle.Schema) (gold, pred map[string]string, err error) {
	if !r.scoredSchema(s) || split != "val" && split != "test" {
		return SplitPredictions(r.bundleDir, r.predictionsPath, split, s)
	}
	gold, pred = map[string]string{}, map[string]string{}
	for id, g := range r.gold[split][s.Name] {
		gold[id] = normalLabel(s.Kind, g)
	}
	for id, l := range r.pred[split][s.Name] {
		pred[id] = normalLabel(s.Kind, l)
	}
	return gold, pred, nil
}

// Preview is s.Preview(bundleDir, predictionsPath, opt, labeled) with
// the preview's options ReadRun was given.
func (r *RunReading) Preview(s *Store) (Preview, error) {
	opt := r.pvOpt
	if r.pv == nil {
		return s.Preview(r.bundleDir, r.predictionsPath, opt, r.labeled)
	}
	if opt.CreatedAt == 0 {
		opt.CreatedAt = float64(time.Now().UnixNano()) / 1e9
	}
	now, err := s.storedNow(r.pv, opt)
	if err != nil {
		return Preview{}, fmt.Errorf("writeback: preview of run %q: %w", opt.RunID, err)
	}
	return r.pv.result(opt, now), nil
}

// Publish is s.Publish(bundleDir, predictionsPath, opt), with the gates
// of the reading. When the reading made the preview (ReadRun with its
// options) and opt asks for no other min_confidence and no schema the
// preview did not, it publishes the prelabels the preview kept, without
// reading the predictions again; otherwise they are read again, streamed.
func (r *RunReading) Publish(s *Store, opt Options) (Report, error) {
	if !r.ok || opt.Project == "" || opt.RunID == "" {
		return s.Publish(r.bundleDir, r.predictionsPath, opt)
	}
	if opt.CreatedAt == 0 {
		opt.CreatedAt = float64(time.Now().UnixNano()) / 1e9
	}
	g := &gates{train: r.g.train, multi: r.g.multi, rules: r.g.rules, enabled: make(map[string]bool, len(opt.Schemas)), minConfidence: opt.MinConfidence}
	for _, name := range opt.Schemas {
		g.enabled[name] = true
	}
	if pv := r.pv; pv != nil && pv.kept != nil && opt.MinConfidence == r.g.minConfidence &&
		!slices.ContainsFunc(opt.Schemas, func(name string) bool { return !r.g.enabled[name] }) {
		// The preview's counts are a publish's of the preview's schemas;
		// a schema left out counts as not enabled, whatever stopped its
		// predictions after that gate.
		rep := pv.rep
		accepted := pv.kept.countBySchema()
		for name := range r.g.enabled {
			if !g.enabled[name] {
				rep.NSkippedSchemaNotEnabled += pv.low[name] + accepted[name]
				rep.NSkippedLowConfidence -= pv.low[name]
			}
		}
		return s.publishKept(pv.kept, g.enabled, rep, opt)
	}
	return s.publish(g, r.predictionsPath, opt)
}
