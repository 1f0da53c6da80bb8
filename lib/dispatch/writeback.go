package dispatch

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
	"potato-training/lib/writeback"
)

// writeBack scores the test split's predictions against the human labels
// (SPEC B8) and publishes the predictions that pass the gates (B7).
func (d *dispatcher) writeBack(m bundle.Manifest) error {
	pred := d.run.Path(rundir.PredictionsFile)
	if _, err := os.Stat(pred); err != nil {
		return fmt.Errorf("the trainer reported a result but no predictions file: %w", err)
	}
	bdir := d.run.Path(rundir.BundleDir)
	if cals := calibrate(bdir, pred, m, d.logf); cals != nil {
		d.set(func(r *rundir.Record) { r.Calibration = cals })
	}
	rec := d.run.Record()
	// One reading of the predictions and the splits for the score, the
	// preview, the gate and the publish's gates.
	labeled, annErr := annotated(d.cfg)
	var pv *writeback.Options
	if annErr == nil {
		opt := previewOptions(d.cfg, rec)
		pv = &opt
	}
	r := writeback.ReadRun(bdir, pred, m.Schemas, pv, labeled)
	scores, err := r.Scores()
	if err != nil {
		return fmt.Errorf("held-out score: %w", err)
	}
	d.set(func(r *rundir.Record) { setHeldout(r, m, scores) })
	for _, name := range slices.Sorted(maps.Keys(scores)) {
		s := scores[name]
		if s.Spans != nil {
			d.logf("held-out score of %s on %d test items: %s", name, s.N, s.Spans)
			continue
		}
		if s.MAE != nil && s.QWK != nil {
			d.logf("held-out score of %s on %d test items: accuracy %.3f, macro-F1 %.3f, mean absolute error %.3f points, quadratic-weighted kappa %.3f", name, s.N, s.Accuracy, s.MacroF1, *s.MAE, *s.QWK)
			continue
		}
		d.logf("held-out score of %s on %d test items: accuracy %.3f, macro-F1 %.3f", name, s.N, s.Accuracy, s.MacroF1)
	}

	rec = d.run.Record()
	d.logPreview(r, annErr)
	schemas, decisions, checks, err := promotion(d.cfg, r, rec.RunID, m, scores)
	if err != nil {
		return err
	}
	for _, c := range checks {
		d.logf("check of %s against its most common label: %s", c.Schema, c.reason())
	}
	if decisions != nil {
		d.set(func(r *rundir.Record) { r.Promotion = decisions })
		for _, name := range slices.Sorted(maps.Keys(decisions)) {
			d.logf("promotion of %s (writeback.promote: %s): %s", name, d.cfg.Training.Writeback.Promote, decisions[name].Reason)
		}
		d.noteDefaultPromote(decisions)
	}
	rep, n, err := publish(d.cfg, r, rec, schemas, writeback.Unix(&rec.CreatedAt))
	if err != nil {
		return err
	}
	d.set(func(r *rundir.Record) { r.Writeback = writebackCounts(rep, n) })
	d.logf("write-back to %s: %d of %d predictions written as prelabels (%d in the train split, %d below min_confidence %g, %d of schemas not in writeback.schemas, %d refused)",
		writeback.StorePath(d.cfg), rep.NWritten, rep.NRead, rep.NSkippedTrainSplit, rep.NSkippedLowConfidence, d.cfg.Training.Writeback.MinConfidence, rep.NSkippedSchemaNotEnabled, rep.NRefused)
	if rep.NRefused > 0 {
		d.logf("warning: %s", rep.RefusedSummary())
	}
	if rep.NWritten > 0 {
		d.logf("%s", prelabelsShown)
	}
	return nil
}

// calibrate calibrates the confidences of a run's predictions on its val
// split, rewriting the predictions file (writeback.Calibrate), before
// they are scored, gated and published: what min_confidence filters and
// Potato's store holds is the calibrated confidence. A failure leaves the
// trainer's confidences, says so in the log, and returns nil; the
// scoring that follows reports a predictions file it cannot read.
func calibrate(bdir, pred string, m bundle.Manifest, logf func(string, ...any)) map[string]rundir.Calibration {
	cals, err := writeback.Calibrate(bdir, pred, m.Schemas)
	if err != nil {
		logf("calibration: %v: the confidences stay as the trainer gave them", err)
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(cals)) {
		logf("%s", writeback.CalibrationNote(name, cals[name]))
	}
	if len(cals) == 0 {
		return nil
	}
	return cals
}

// prelabelsShown says when annotators see the prelabels written: Potato
// (2.11 and later) replays stored prelabels into its items at its start,
// with model_training.enabled and writeback.schemas set, which a run that
// published has; pre_annotation.enabled is not needed (docs/potato.md).
const prelabelsShown = "Potato shows them after its next start"

// setHeldout records the held-out scores in a run's record.
func setHeldout(r *rundir.Record, m bundle.Manifest, scores map[string]writeback.SchemaScore) {
	if r.Metrics == nil {
		r.Metrics = map[string]any{}
	}
	r.Metrics["heldout"] = scores
	if held, ok := writeback.HeldoutOf(m.Schemas, scores); ok {
		name := heldoutSchema(m, scores)
		r.Heldout = &rundir.Heldout{Schema: name, N: held.N, Accuracy: held.Accuracy, MacroF1: held.MacroF1,
			MAE: scores[name].MAE, QWK: scores[name].QWK}
	}
}

func heldoutSchema(m bundle.Manifest, scores map[string]writeback.SchemaScore) string {
	for _, s := range m.Schemas {
		if _, ok := scores[s.Name]; ok {
			return s.Name
		}
	}
	return ""
}

// publish records the run's items and publishes its predictions of
// schemas in Potato's store, its rows stamped at (unix seconds), each in
// one transaction; r is the run's reading. An error is a StoreError.
func publish(cfg *config.Config, r *writeback.RunReading, rec rundir.Record, schemas []string, at float64) (writeback.Report, int, error) {
	var rep writeback.Report
	var n int
	err := withStore(cfg, func(s *writeback.Store) error {
		var err error
		if n, err = s.RecordItems(cfg.TaskName, rec.RunID, r.BundleDir()); err != nil {
			return fmt.Errorf("recording the run's items: %w", err)
		}
		rep, err = r.Publish(s, writeback.Options{
			Project: cfg.TaskName, RunID: rec.RunID, Schemas: schemas,
			MinConfidence: cfg.Training.Writeback.MinConfidence, CreatedAt: at,
		})
		return err
	})
	return rep, n, err
}

func writebackCounts(rep writeback.Report, n int) map[string]int {
	return map[string]int{
		"n_read": rep.NRead, "n_written": rep.NWritten, "n_skipped_train_split": rep.NSkippedTrainSplit,
		"n_skipped_low_confidence": rep.NSkippedLowConfidence, "n_skipped_schema_not_enabled": rep.NSkippedSchemaNotEnabled,
		"n_skipped_newer_run": rep.NSkippedNewerRun, "n_refused": rep.NRefused, "n_items": n,
	}
}

// Writeback applies a finished run to Potato's store again, from its run
// directory: the run row as run.json has it and, for a run that trained
// (success, or pending after store_failed or a dispatch lost in its
// write-back), its items and predictions. A pending run becomes the
// success it would have been. It is idempotent:
// applying a run twice leaves the store as once (a newer run's prelabels
// stay). It returns one line on what it wrote.
func Writeback(configPath, id string) (string, error) {
	cfg, err := LoadConfig(configPath)
	if err != nil {
		return "", err
	}
	root, err := Root(cfg)
	if err != nil {
		return "", err
	}
	settleLost(cfg, root)
	info, err := root.Read(id)
	if err != nil {
		return "", err
	}
	if !info.Finished {
		return "", fmt.Errorf("run %s is %s: its dispatch writes Potato's store itself; writeback applies a finished run", id, info.State)
	}
	var summary string
	err = root.Edit(id, func(rec *rundir.Record, finished bool) error {
		if !finished {
			return fmt.Errorf("run %s is not finished", id)
		}
		dir := root.RunDir(id)
		pred := filepath.Join(dir, rundir.PredictionsFile)
		tinfo, _ := trainer.Lookup(rec.Trainer)
		trained := rec.WritebackPending || rec.State == rundir.StateSuccess
		published := ""
		if _, err := os.Stat(pred); trained && err == nil && !tinfo.NoPredictions {
			bdir := filepath.Join(dir, rundir.BundleDir)
			m, err := bundle.ReadManifest(bdir)
			if err != nil {
				return fmt.Errorf("run %s: its bundle, which says which items it trained on, is gone (%v): its predictions cannot be written back", id, err)
			}
			// A dispatch lost in its write-back may not have scored them.
			if _, ok := rec.Metrics["heldout"]; rec.WritebackPending && !ok {
				scores, err := writeback.Score(bdir, pred, m.Schemas)
				if err != nil {
					return fmt.Errorf("run %s: held-out score: %w", id, err)
				}
				setHeldout(rec, m, scores)
			}
			if rec.WritebackPending && rec.Calibration == nil {
				logf := func(format string, args ...any) { appendLog(root, id, fmt.Sprintf(format, args...)) }
				if cals := calibrate(bdir, pred, m, logf); cals != nil {
					rec.Calibration = cals
				}
			}
			r := writeback.ReadEachStep(bdir, pred, m.Schemas)
			if rec.Promotion == nil {
				r = writeback.ReadRun(bdir, pred, m.Schemas, nil, nil) // for the gate and the publish
			}
			schemas, err := gatedSchemas(cfg, r, rec, m)
			if err != nil {
				return err
			}
			rep, n, err := publish(cfg, r, *rec, schemas, writeback.Unix(&rec.CreatedAt))
			if err != nil {
				return err
			}
			// The prelabels are back: a retraction is undone.
			rec.Writeback, rec.RetractedAt = writebackCounts(rep, n), nil
			published = fmt.Sprintf("%d of %d predictions written as prelabels, %d items recorded", rep.NWritten, rep.NRead, n)
		} else if rec.WritebackPending && !tinfo.NoPredictions {
			return fmt.Errorf("run %s: no %s in its run directory: nothing to write back", id, rundir.PredictionsFile)
		}
		was := rec.State + " (" + rec.ErrorCode + ")"
		if rec.WritebackPending {
			code := ExitSuccess
			rec.State, rec.Error, rec.ErrorCode, rec.Step, rec.ExitCode = rundir.StateSuccess, "", "", "finished", &code
		}
		if err := recordRun(cfg, root, *rec); err != nil {
			return err
		}
		msg := fmt.Sprintf("run %s: %s recorded in %s", id, rec.State, writeback.StorePath(cfg))
		if rec.WritebackPending {
			msg = fmt.Sprintf("run %s: was %s, now success in %s", id, was, writeback.StorePath(cfg))
			if rec.ArtifactURI == "" {
				// Lost while it copied the model back: the predictions are
				// whole, the model files may not be.
				msg += "; its model files did not all come back to " + filepath.Join(dir, rundir.ArtifactsDir)
			}
		}
		if published != "" {
			msg += "; " + published
		}
		rec.WritebackPending, rec.StoreError = false, ""
		summary = msg
		return nil
	})
	if err != nil {
		return "", err
	}
	appendLog(root, id, "potato-dispatch writeback: "+strings.TrimPrefix(summary, "run "+id+": "))
	// A run that is now a success may be the latest model.
	if after, err := root.Read(id); err == nil && after.State == rundir.StateSuccess {
		updateLatest(root, after.Schemas, nil, func(format string, args ...any) { appendLog(root, id, fmt.Sprintf(format, args...)) })
	}
	return summary, nil
}
