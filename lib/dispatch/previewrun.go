package dispatch

import (
	"fmt"
	"os"
	"path/filepath"

	"potato-training/lib/config"
	"potato-training/lib/project"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
	"potato-training/lib/writeback"
)

// PreviewWriteback says what writing a finished run's predictions to
// Potato's store would do now (potato-dispatch writeback --dry-run): per
// schema of writeback.schemas, the prelabels it would add, change, remove
// and keep, and how many of the items it would change annotators have
// labelled. It writes nothing: not the store, not run.json, not run.log.
func PreviewWriteback(configPath, id string) (writeback.Preview, error) {
	cfg, root, info, err := readRun(configPath, id)
	if err != nil {
		return writeback.Preview{}, err
	}
	if !info.Finished {
		return writeback.Preview{}, fmt.Errorf("run %s is %s: its dispatch writes Potato's store itself; writeback applies a finished run", id, info.State)
	}
	dir := root.RunDir(id)
	pred := filepath.Join(dir, rundir.PredictionsFile)
	tinfo, _ := trainer.Lookup(info.Trainer)
	if info.State != rundir.StateSuccess && !info.WritebackPending || tinfo.NoPredictions {
		return writeback.Preview{}, fmt.Errorf("run %s is %s and made no predictions to write back", id, info.State)
	}
	if _, err := os.Stat(pred); err != nil {
		return writeback.Preview{}, fmt.Errorf("run %s: no %s in its run directory: nothing to write back", id, rundir.PredictionsFile)
	}
	bdir := filepath.Join(dir, rundir.BundleDir)
	if _, err := os.Stat(filepath.Join(bdir, "manifest.json")); err != nil {
		return writeback.Preview{}, fmt.Errorf("run %s: its bundle, which says which items it trained on, is gone (%v): its predictions cannot be written back", id, err)
	}
	return preview(cfg, bdir, pred, info.Record)
}

// preview is PreviewWriteback's work on a run's bundle and predictions.
func preview(cfg *config.Config, bdir, pred string, rec rundir.Record) (writeback.Preview, error) {
	labeled, err := annotated(cfg)
	if err != nil {
		return writeback.Preview{}, err
	}
	var p writeback.Preview
	err = withStore(cfg, func(s *writeback.Store) error {
		var err error
		p, err = s.Preview(bdir, pred, previewOptions(cfg, rec), labeled)
		return err
	})
	return p, err
}

// annotated reads the annotators' labels: whether an item has one of a
// schema now, for the preview.
func annotated(cfg *config.Config) (func(item, schema string) bool, error) {
	ann, err := project.ReadAnnotations(cfg.AnnotationDir, cfg.Schemes)
	if err != nil {
		return nil, fmt.Errorf("the annotators' labels: %w", err)
	}
	return func(item, schema string) bool { return len(ann.Votes(item, schema)) > 0 }, nil
}

// previewOptions are the preview's: the run publishing every writeback
// schema.
func previewOptions(cfg *config.Config, rec rundir.Record) writeback.Options {
	return writeback.Options{
		Project: cfg.TaskName, RunID: rec.RunID, Schemas: cfg.Training.Writeback.Schemas,
		MinConfidence: cfg.Training.Writeback.MinConfidence, CreatedAt: writeback.Unix(&rec.CreatedAt),
	}
}

// logPreview writes to the run log, before the run publishes, what its
// write-back will do to each schema's prelabels, from the run's reading;
// annErr is a failure to read the annotators' labels. A preview that
// fails is logged and the write-back goes on: it is a report, not a gate.
func (d *dispatcher) logPreview(r *writeback.RunReading, annErr error) {
	if annErr != nil {
		d.logf("write-back preview unavailable: %v", annErr)
		return
	}
	var p writeback.Preview
	err := withStore(d.cfg, func(s *writeback.Store) error {
		var err error
		p, err = r.Preview(s)
		return err
	})
	if err != nil {
		d.logf("write-back preview unavailable: %v", err)
		return
	}
	for _, sp := range p.Schemas {
		d.logf("write-back preview, %s", sp)
	}
}
