package dispatch

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/rundir"
	"potato-training/lib/writeback"
)

// promoteEpsilon absorbs the rounding of two macro-F1s computed alike: a
// run that predicts what the published run predicts ties with it.
const promoteEpsilon = 1e-9

// promotion is the promotion gate: of the writeback schemas, those whose
// prelabels the run publishes, and the decision of each it holds back or,
// under writeback.promote: if_better, compares; with the check of
// learnt of each schema it got to.
//
// Under if_better a schema is published when no other run's prelabels of
// it are in the store, when no test item has a prediction of both runs
// (there is nothing to compare them on), or when the run's macro-F1 is at
// least the published run's plus margin; both are scored against the gold
// labels of this run's test split (today's labels) on the test items both
// runs predicted. The published run's predictions are the rows it holds
// in the store, so a run that is gone from disk is still judged. Under
// promote: always every schema gets that far.
//
// Then, whatever promote says, a schema whose model learnt nothing the
// val split shows (learnt) is not published, and its decision says why;
// one the comparison held back keeps the comparison's reason.
func promotion(cfg *config.Config, bdir, pred, runID string, m bundle.Manifest) ([]string, map[string]rundir.Promotion, []learntCheck, error) {
	wb := cfg.Training.Writeback
	kinds := map[string]bundle.Schema{}
	for _, s := range m.Schemas {
		kinds[s.Name] = s
	}
	var publish []string
	var decisions map[string]rundir.Promotion
	if wb.Promote == config.PromoteIfBetter {
		decisions = map[string]rundir.Promotion{}
		err := withStore(cfg, func(st *writeback.Store) error {
			for _, name := range wb.Schemas {
				s, ok := kinds[name]
				if !ok {
					publish = append(publish, name) // not this run's: Publish skips it
					continue
				}
				d, err := decide(st, cfg.TaskName, bdir, pred, runID, s, wb.Margin)
				if err != nil {
					return err
				}
				decisions[name] = d
				if d.Published {
					publish = append(publish, name)
				}
			}
			return nil
		})
		if err != nil {
			return nil, nil, nil, err
		}
	} else {
		publish = slices.Clone(wb.Schemas)
	}
	var kept []string
	var checks []learntCheck
	for _, name := range publish {
		s, ok := kinds[name]
		if !ok || s.Kind != config.KindNominal && s.Kind != config.KindMultilabel {
			kept = append(kept, name)
			continue
		}
		c, err := learnt(bdir, pred, s)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("the check against the most common label: %w", err)
		}
		checks = append(checks, c)
		if !c.Checked || c.LearntEnough {
			kept = append(kept, name)
			continue
		}
		if decisions == nil {
			decisions = map[string]rundir.Promotion{}
		}
		d := decisions[name]
		d.Published, d.Reason = false, learntHeld+c.reason()
		decisions[name] = d
	}
	slices.Sort(kept)
	return kept, decisions, checks, nil
}

// decide is the gate's decision for one schema.
func decide(st *writeback.Store, project, bdir, pred, runID string, s bundle.Schema, margin float64) (rundir.Promotion, error) {
	other, err := st.PublishedRunOf(project, s.Name, runID)
	if err != nil {
		return rundir.Promotion{}, err
	}
	if other == "" {
		return rundir.Promotion{Published: true, Reason: "published: no run's prelabels of " + s.Name + " are published yet"}, nil
	}
	labels, err := st.StoredLabels(project, other, s)
	if err != nil {
		return rundir.Promotion{}, err
	}
	c, err := writeback.CompareOnCommon(bdir, pred, s, labels)
	if err != nil {
		return rundir.Promotion{}, err
	}
	d := rundir.Promotion{Against: other, N: c.N, MacroF1: c.Ours.MacroF1, AgainstMacroF1: c.Theirs.MacroF1}
	switch {
	case c.N == 0:
		d.Published = true
		d.Reason = fmt.Sprintf("published: no test item of %s has a prelabel of run %s to compare on (%d test items)", s.Name, other, c.NTest)
	case c.Ours.MacroF1+promoteEpsilon >= c.Theirs.MacroF1+margin:
		d.Published = true
		d.Reason = fmt.Sprintf("published: macro-F1 %.2f >= %.2f of run %s%s on %d test items", c.Ours.MacroF1, c.Theirs.MacroF1, other, marginText(margin), c.N)
	default:
		d.Reason = fmt.Sprintf("not published: macro-F1 %.2f < %.2f of run %s%s on %d test items", c.Ours.MacroF1, c.Theirs.MacroF1, other, marginText(margin), c.N)
	}
	return d, nil
}

// heldByComparison reports whether a decision is the comparison's
// holding a schema back.
func heldByComparison(d rundir.Promotion) bool {
	return !d.Published && d.Against != "" && !strings.HasPrefix(d.Reason, learntHeld)
}

// promoteDefaultNote is what the run log says the first time the default
// writeback.promote, if_better, holds a run of a project back (no run of
// the project was held back by the comparison before): it used to be
// always.
const promoteDefaultNote = "note: writeback.promote is not set, and it is now if_better when left out (it was always): " +
	"a run whose held-out macro-F1 is below that of the run published now no longer replaces its prelabels; " +
	"set model_training.writeback.promote: always to publish every successful run again, or publish this one by hand " +
	"(potato-dispatch publish CONFIG RUN_ID)"

// noteDefaultPromote logs promoteDefaultNote when the run is the first
// the default holds back.
func (d *dispatcher) noteDefaultPromote(decisions map[string]rundir.Promotion) {
	wb := d.cfg.Training.Writeback
	if _, set := wb.Lines["promote"]; set || wb.Promote != config.PromoteIfBetter {
		return
	}
	held := false
	for _, dec := range decisions {
		held = held || heldByComparison(dec)
	}
	if !held {
		return
	}
	runs, err := d.root.List()
	if err != nil {
		return
	}
	for _, r := range runs {
		if r.RunID == d.run.ID {
			continue
		}
		for _, dec := range r.Promotion {
			byHand := strings.HasPrefix(dec.Reason, "published by hand") && !strings.Contains(dec.Reason, learntHeld)
			if heldByComparison(dec) || byHand && dec.Against != "" {
				return
			}
		}
	}
	d.logf("%s", promoteDefaultNote)
}

func marginText(m float64) string {
	if m == 0 {
		return ""
	}
	return fmt.Sprintf(" %+.2f margin", m)
}

// gatedSchemas are the schemas a run applied again (potato-dispatch
// writeback) publishes: those its gate published, when it recorded a
// decision; else the gate's choice now, recorded when it holds a schema
// back or compares.
func gatedSchemas(cfg *config.Config, bdir, pred string, rec *rundir.Record, m bundle.Manifest) ([]string, error) {
	if rec.Promotion == nil {
		schemas, decisions, _, err := promotion(cfg, bdir, pred, rec.RunID, m)
		if err == nil && decisions != nil {
			rec.Promotion = decisions
		}
		return schemas, err
	}
	var out []string
	for _, name := range cfg.Training.Writeback.Schemas {
		if d, ok := rec.Promotion[name]; !ok || d.Published {
			out = append(out, name)
		}
	}
	return out, nil
}

// Publish publishes a successful run's predictions by hand, whatever the
// promotion gate decided: those of every writeback schema, its rows
// stamped now, so that they are the newest and Potato shows them after its
// next start. run.json records it in each decision. It returns one line
// on what it wrote.
func Publish(configPath, id string) (string, error) {
	cfg, root, info, err := readRun(configPath, id)
	if err != nil {
		return "", err
	}
	if !info.Finished || info.State != rundir.StateSuccess {
		return "", fmt.Errorf("run %s is %s: only a successful run's predictions can be published", id, info.State)
	}
	if len(cfg.Training.Writeback.Schemas) == 0 {
		return "", fmt.Errorf("model_training.writeback.schemas is empty: no schema's predictions are published")
	}
	var summary string
	err = root.Edit(id, func(rec *rundir.Record, _ bool) error {
		dir := root.RunDir(id)
		pred := filepath.Join(dir, rundir.PredictionsFile)
		if _, err := os.Stat(pred); err != nil {
			return fmt.Errorf("run %s: %w: nothing to publish", id, err)
		}
		bdir := filepath.Join(dir, rundir.BundleDir)
		if _, err := bundle.ReadManifest(bdir); err != nil {
			return fmt.Errorf("run %s: its bundle, which says which items it trained on, is gone (%v): its predictions cannot be published", id, err)
		}
		now := time.Now()
		rep, n, err := publish(cfg, bdir, pred, *rec, cfg.Training.Writeback.Schemas, unix(&now))
		if err != nil {
			return err
		}
		for name, d := range rec.Promotion {
			if !d.Published {
				d.Published, d.Reason = true, "published by hand (potato-dispatch publish), after the gate's "+d.Reason
				rec.Promotion[name] = d
			}
		}
		rec.Writeback, rec.RetractedAt = writebackCounts(rep, n), nil
		summary = fmt.Sprintf("run %s: %d of %d predictions published as prelabels in %s (%s); Potato shows them after its next start",
			id, rep.NWritten, rep.NRead, StorePath(cfg), strings.Join(cfg.Training.Writeback.Schemas, ", "))
		return recordRun(cfg, root, *rec)
	})
	if err != nil {
		return "", err
	}
	appendLog(root, id, "potato-dispatch publish: "+strings.TrimPrefix(summary, "run "+id+": "))
	return summary, nil
}
