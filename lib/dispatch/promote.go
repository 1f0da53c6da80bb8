package dispatch

import (
	"encoding/json"
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

// gateConfidence is how sure the paired bootstrap must be that a run is
// worse than the published one for the gate, without an explicit margin,
// to hold it back.
const gateConfidence = 0.95

// promotion is the promotion gate: of the writeback schemas, those whose
// prelabels the run publishes, and the decision of each it holds back or,
// under writeback.promote: if_better, compares; with the check of
// learnt of each schema it got to. scores are the run's held-out scores,
// which a first run's decision records.
//
// Under if_better a schema is published when no other run's prelabels of
// it are in the store, when no test item has a prediction of both runs
// (there is nothing to compare them on), or when the run is not worse
// beyond noise: without writeback.margin, unless in at least 95% of a
// paired bootstrap's draws of the common test items its macro-F1 is below
// the published run's; with margin set, when its macro-F1 is at least the
// published run's plus margin. Both are scored against the gold labels of
// this run's test split (today's labels) on the test items both runs
// predicted. The published run's predictions are the rows it holds in the
// store, so a run that is gone from disk is still judged. Under promote:
// always every schema gets that far.
//
// Then, whatever promote says, a schema whose model learnt nothing the
// val split shows (learnt) is not published, and its decision says why;
// one the comparison held back keeps the comparison's reason.
func promotion(cfg *config.Config, r *writeback.RunReading, runID string, m bundle.Manifest, scores map[string]writeback.SchemaScore) ([]string, map[string]rundir.Promotion, []learntCheck, error) {
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
				_, marginSet := wb.Lines["margin"]
				d, err := decide(st, cfg.TaskName, r, runID, s, gateRule{margin: wb.Margin, set: marginSet}, scores[name])
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
		if !ok || s.Kind != config.KindNominal && s.Kind != config.KindMultilabel && s.Kind != config.KindOrdinal {
			kept = append(kept, name)
			continue
		}
		c, err := learnt(r, s)
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

// gateRule is writeback.margin: set, the fixed margin; else the paired
// bootstrap.
type gateRule struct {
	margin float64
	set    bool
}

// decide is the gate's decision for one schema; own is the run's
// held-out score of it.
func decide(st *writeback.Store, project string, r *writeback.RunReading, runID string, s bundle.Schema, rule gateRule, own writeback.SchemaScore) (rundir.Promotion, error) {
	other, err := st.PublishedRunOf(project, s.Name, runID)
	if err != nil {
		return rundir.Promotion{}, err
	}
	if other == "" {
		d := rundir.Promotion{Published: true, MacroF1: own.MacroF1, N: own.N,
			Reason: "published: no run's prelabels of " + s.Name + " are published yet"}
		if s.Ordinal() {
			d.Metric, d.MAE = "mae", own.MAE
		}
		return d, nil
	}
	labels, err := st.StoredLabels(project, other, s)
	if err != nil {
		return rundir.Promotion{}, err
	}
	c, err := r.Compare(s, labels)
	if err != nil {
		return rundir.Promotion{}, err
	}
	d := rundir.Promotion{Against: other, N: c.N, MacroF1: c.Ours.MacroF1, AgainstMacroF1: c.Theirs.MacroF1}
	if c.N == 0 {
		d.Published = true
		d.Reason = fmt.Sprintf("published: no test item of %s has a prelabel of run %s to compare on (%d test items)", s.Name, other, c.NTest)
		return d, nil
	}
	b := c.Bootstrap(writeback.GateResamples, writeback.GateSeed)
	d.Bootstrap = &b
	if s.Ordinal() {
		return decideOrdinal(d, c, other, rule), nil
	}
	noise := fmt.Sprintf(" (paired bootstrap: difference %+.3f, 95%% interval %+.3f to %+.3f, worse in %.0f%% of %d draws)",
		b.Diff, b.Low, b.High, 100*b.PWorse, b.Resamples)
	if rule.set {
		if c.Ours.MacroF1+promoteEpsilon >= c.Theirs.MacroF1+rule.margin {
			d.Published = true
			d.Reason = fmt.Sprintf("published: macro-F1 %.2f >= %.2f of run %s%s on %d test items%s", c.Ours.MacroF1, c.Theirs.MacroF1, other, marginText(rule.margin), c.N, noise)
		} else {
			d.Reason = fmt.Sprintf("not published: macro-F1 %.2f < %.2f of run %s%s on %d test items%s", c.Ours.MacroF1, c.Theirs.MacroF1, other, marginText(rule.margin), c.N, noise)
		}
		return d, nil
	}
	if b.PWorse >= gateConfidence {
		d.Reason = fmt.Sprintf("not published: macro-F1 %.2f < %.2f of run %s on %d test items, worse beyond noise%s", c.Ours.MacroF1, c.Theirs.MacroF1, other, c.N, noise)
		return d, nil
	}
	d.Published = true
	cmp, within := ">=", ""
	if c.Ours.MacroF1+promoteEpsilon < c.Theirs.MacroF1 {
		cmp, within = "<", ", within noise"
	}
	d.Reason = fmt.Sprintf("published: macro-F1 %.2f %s %.2f of run %s on %d test items%s%s", c.Ours.MacroF1, cmp, c.Theirs.MacroF1, other, c.N, within, noise)
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

// heldoutScores are the held-out scores run.json records.
func heldoutScores(rec rundir.Record) map[string]writeback.SchemaScore {
	var scores map[string]writeback.SchemaScore
	if raw, ok := rec.Metrics["heldout"]; ok {
		if b, err := json.Marshal(raw); err == nil {
			_ = json.Unmarshal(b, &scores)
		}
	}
	return scores
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
func gatedSchemas(cfg *config.Config, r *writeback.RunReading, rec *rundir.Record, m bundle.Manifest) ([]string, error) {
	if rec.Promotion == nil {
		schemas, decisions, _, err := promotion(cfg, r, rec.RunID, m, heldoutScores(*rec))
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
		m, err := bundle.ReadManifest(bdir)
		if err != nil {
			return fmt.Errorf("run %s: its bundle, which says which items it trained on, is gone (%v): its predictions cannot be published", id, err)
		}
		now := time.Now()
		rep, n, err := publish(cfg, writeback.ReadEachStep(bdir, pred, m.Schemas), *rec, cfg.Training.Writeback.Schemas, writeback.Unix(&now))
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
			id, rep.NWritten, rep.NRead, writeback.StorePath(cfg), strings.Join(cfg.Training.Writeback.Schemas, ", "))
		return recordRun(cfg, root, *rec)
	})
	if err != nil {
		return "", err
	}
	appendLog(root, id, "potato-dispatch publish: "+strings.TrimPrefix(summary, "run "+id+": "))
	return summary, nil
}
