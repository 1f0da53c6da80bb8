package dispatch

import (
	"errors"
	"fmt"
	"time"

	"potato-training/lib/rundir"
	"potato-training/lib/writeback"
)

// ErrNotFinished is Retract's refusal of a run that has not ended: its
// dispatch writes the prelabels as the run ends, after any retraction.
var ErrNotFinished = errors.New("not finished")

// Retracted is what Retract did, as potato-dispatch retract --json prints
// it and the HTTP API answers ({"retracted": n}, as Potato's route).
type Retracted struct {
	RunID string `json:"run_id"`
	writeback.Retraction
	// Store is Potato's store the rows were deleted from.
	Store string `json:"store"`
}

// Retract deletes a finished run's prelabels from Potato's store (Potato's
// DELETE /admin/training/api/runs/<id>/predictions): its rows of
// training_predictions, not those a newer run has replaced since. Its row
// of training_runs, its items and its run directory stay. run.json
// records it: writeback.n_retracted adds up the rows deleted, and
// retracted_at is when it was first asked. Retracting again deletes
// nothing and answers 0. potato-dispatch writeback publishes the run's
// predictions again.
func Retract(configPath, id string) (Retracted, error) {
	out := Retracted{RunID: id}
	cfg, err := LoadConfig(configPath)
	if err != nil {
		return out, err
	}
	root, err := Root(cfg)
	if err != nil {
		return out, err
	}
	out.Store = writeback.StorePath(cfg)
	settleLost(cfg, root)
	info, err := root.Read(id)
	if err != nil {
		return out, err
	}
	if !info.Finished {
		return out, fmt.Errorf("run %s is %w (%s): its dispatch writes its prelabels as it ends; cancel it, or retract it once it has ended", id, ErrNotFinished, info.State)
	}
	now := time.Now().UTC()
	err = root.Edit(id, func(rec *rundir.Record, finished bool) error {
		if !finished {
			return fmt.Errorf("run %s is %w (%s)", id, ErrNotFinished, rec.State)
		}
		err := withStore(cfg, func(s *writeback.Store) error {
			var err error
			out.Retraction, err = s.RetractRun(cfg.TaskName, id)
			return err
		})
		if err != nil {
			return err
		}
		if rec.Writeback == nil {
			rec.Writeback = map[string]int{}
		}
		rec.Writeback["n_retracted"] += int(out.N)
		if rec.RetractedAt == nil {
			rec.RetractedAt = &now
		}
		return nil
	})
	if err != nil {
		return Retracted{RunID: id, Store: out.Store}, err
	}
	appendLog(root, id, fmt.Sprintf("potato-dispatch retract: %s deleted from %s; the run stays in training_runs", out.Retraction, out.Store))
	return out, nil
}
