package dispatch

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/rundir"
	"potato-training/lib/writeback"
)

// StorePath is Potato's store of a project (FORMATS.md).
func StorePath(cfg *config.Config) string { return filepath.Join(cfg.TaskDir, "project.sqlite") }

func unix(t *time.Time) float64 {
	if t == nil {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

// writeBack scores the test split's predictions against the human labels
// (SPEC B8) and publishes the predictions that pass the gates (B7).
func (d *dispatcher) writeBack(m bundle.Manifest) error {
	pred := d.run.Path(rundir.PredictionsFile)
	if _, err := os.Stat(pred); err != nil {
		return fmt.Errorf("the trainer reported a result but no predictions file: %w", err)
	}
	bdir := d.run.Path(rundir.BundleDir)
	scores, err := writeback.Score(bdir, pred, m.Schemas)
	if err != nil {
		return fmt.Errorf("held-out score: %w", err)
	}
	held, ok := writeback.HeldoutOf(m.Schemas, scores)
	d.set(func(r *rundir.Record) {
		if r.Metrics == nil {
			r.Metrics = map[string]any{}
		}
		r.Metrics["heldout"] = scores
		if ok {
			r.Heldout = &rundir.Heldout{Schema: heldoutSchema(m, scores), N: held.N, Accuracy: held.Accuracy, MacroF1: held.MacroF1}
		}
	})
	for _, name := range slices.Sorted(maps.Keys(scores)) {
		s := scores[name]
		d.logf("held-out score of %s on %d test items: accuracy %.3f, macro-F1 %.3f", name, s.N, s.Accuracy, s.MacroF1)
	}

	store, err := writeback.OpenStore(StorePath(d.cfg))
	if err != nil {
		return err
	}
	defer store.Close()
	rec := d.run.Record()
	n, err := store.RecordItems(d.cfg.TaskName, rec.RunID, bdir)
	if err != nil {
		return fmt.Errorf("recording the run's items: %w", err)
	}
	rep, err := store.Publish(bdir, pred, writeback.Options{
		Project: d.cfg.TaskName, RunID: rec.RunID, Schemas: d.cfg.Training.Writeback.Schemas,
		MinConfidence: d.cfg.Training.Writeback.MinConfidence, CreatedAt: unix(&rec.CreatedAt),
	})
	if err != nil {
		return err
	}
	d.set(func(r *rundir.Record) {
		r.Writeback = map[string]int{
			"n_read": rep.NRead, "n_written": rep.NWritten, "n_skipped_train_split": rep.NSkippedTrainSplit,
			"n_skipped_low_confidence": rep.NSkippedLowConfidence, "n_skipped_schema_not_enabled": rep.NSkippedSchemaNotEnabled,
			"n_skipped_newer_run": rep.NSkippedNewerRun, "n_items": n,
		}
	})
	d.logf("write-back to %s: %d of %d predictions written as prelabels (%d in the train split, %d below min_confidence %g, %d of schemas not in writeback.schemas)",
		StorePath(d.cfg), rep.NWritten, rep.NRead, rep.NSkippedTrainSplit, rep.NSkippedLowConfidence, d.cfg.Training.Writeback.MinConfidence, rep.NSkippedSchemaNotEnabled)
	return nil
}

func heldoutSchema(m bundle.Manifest, scores map[string]writeback.SchemaScore) string {
	for _, s := range m.Schemas {
		if _, ok := scores[s.Name]; ok {
			return s.Name
		}
	}
	return ""
}

// record writes the run into Potato's training_runs, whatever its outcome,
// so Potato lists every run (SPEC B3).
func (d *dispatcher) record() {
	rec := d.run.Record()
	kinds := map[string]config.Kind{}
	for _, s := range rec.Schemas {
		if sc, ok := d.cfg.Scheme(s); ok {
			kinds[s] = sc.Kind
		}
	}
	row := writeback.RunRow{
		Project: d.cfg.TaskName, RunID: rec.RunID, Trainer: rec.Trainer, Backend: rec.Backend,
		SchemaNames: rec.Schemas, Kinds: kinds, Status: rec.State, Trigger: rec.Trigger,
		CreatedAt: unix(&rec.CreatedAt), StartedAt: unix(rec.StartedAt), FinishedAt: unix(rec.FinishedAt),
		SplitSeed: int64(d.cfg.Training.SplitSeed), Params: rec.Params, Metrics: rec.Metrics,
		ArtifactDir: d.run.Path(rundir.ArtifactsDir), Error: rec.Error, ErrorCode: rec.ErrorCode,
		Pid: rec.PID, Host: rec.Host,
	}
	if m, err := bundle.ReadManifest(d.run.Path(rundir.BundleDir)); err == nil {
		row.NTrain, row.NVal, row.NTest = m.Stats.Splits["train"], m.Stats.Splits["val"], m.Stats.Splits["test"]
		row.BundleDigest = m.Digest
	}
	d.mu.Lock()
	if d.result != nil {
		row.ModelVersion = d.result.ModelVersion
	}
	d.mu.Unlock()
	store, err := writeback.OpenStore(StorePath(d.cfg))
	if err != nil {
		d.logf("cannot open %s: %v", StorePath(d.cfg), err)
		return
	}
	defer store.Close()
	if err := store.RecordRun(row); err != nil {
		d.logf("cannot record the run in %s: %v", StorePath(d.cfg), err)
	}
}
