package dispatch

import (
	"fmt"
	"slices"
	"strings"

	"potato-training/lib/rundir"
	"potato-training/lib/writeback"
)

// Why retention keeps a finished run beyond retain_runs; the run log
// says so.
const (
	keepNewestSuccess = "the newest successful run of trainer %s for schema %s"
	keepPending       = "its predictions wait for potato-dispatch writeback"
	keepCited         = "its prelabels are still in Potato's store"
)

// pruneChoice is retention's decision over a project's runs: the
// finished runs to delete, and those beyond the window that stay, with
// why.
type pruneChoice struct {
	remove []rundir.Info
	kept   []keptRun
}

type keptRun struct {
	id, why string
}

// choosePrune applies retain_runs (keep; SPEC X6 as Potato's prune_runs
// has it) to runs, listed oldest first, as
// Potato's prune_runs does: a finished run is kept when it is one of the
// newest keep finished runs, or one of the newest keep successful runs
// (so failed runs never push good ones out), or the newest successful run
// of its trainer for one of its schemas, or waits for write-back, or has
// prelabels cited in Potato's store (cited); every other finished run is
// removed. A run that is not finished (queued, running, or whose
// dispatch is gone and not yet settled) is never removed and does not
// count. current is the run that is ending: it counts as finished.
func choosePrune(runs []rundir.Info, keep int, cited map[string]bool, current string) pruneChoice {
	var c pruneChoice
	if keep <= 0 {
		return c
	}
	newest := map[string]bool{} // trainer + "\x00" + schema
	finished, succeeded := 0, 0
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		if !r.Finished && r.RunID != current {
			continue
		}
		finished++
		why := ""
		// A curve run is an analysis with no model: it neither holds a
		// place among the successes nor stands for its trainer's model.
		success := r.State == rundir.StateSuccess && r.Curve == nil
		if success {
			succeeded++
			for _, s := range r.Schemas {
				k := r.Trainer + "\x00" + s
				if !newest[k] {
					newest[k] = true
					if why == "" {
						why = fmt.Sprintf(keepNewestSuccess, r.Trainer, s)
					}
				}
			}
		}
		switch {
		case finished <= keep || success && succeeded <= keep:
			continue // within retain_runs
		case why != "":
		case r.WritebackPending:
			why = keepPending
		case cited[r.RunID]:
			why = keepCited
		default:
			c.remove = append(c.remove, r)
			continue
		}
		c.kept = append(c.kept, keptRun{r.RunID, why})
	}
	return c
}

// prune applies retain_runs at the end of a run: the runs it chooses lose
// their rows in Potato's store (training_runs, training_run_items) and
// then their directories, and the run log says which. A store that
// cannot be read removes nothing: retention never guesses which runs are
// cited.
func (d *dispatcher) prune() {
	keep := d.cfg.Training.RetainRuns
	if keep <= 0 {
		return
	}
	runs, err := d.root.List()
	if err != nil {
		d.logf("warning: retain_runs %d: listing the runs: %v", keep, err)
		return
	}
	// The ending run's record, as this dispatch has it.
	rec := d.run.Record()
	for i := range runs {
		if runs[i].RunID == d.run.ID {
			runs[i].Record = rec
		}
	}
	// Without a run to remove even when nothing were cited, the store is
	// not opened.
	choice := choosePrune(runs, keep, nil, d.run.ID)
	var removed []string
	if len(choice.remove) > 0 {
		err = withStore(d.cfg, func(s *writeback.Store) error {
			cited, err := s.CitedRuns(d.cfg.TaskName)
			if err != nil {
				return err
			}
			choice = choosePrune(runs, keep, cited, d.run.ID)
			var ids []string
			for _, r := range choice.remove {
				ids = append(ids, r.RunID)
			}
			removed, err = s.PruneRuns(d.cfg.TaskName, ids)
			return err
		})
	}
	if err != nil {
		d.logf("warning: retain_runs %d: no run removed: %v", keep, err)
		return
	}
	for _, r := range choice.remove {
		if !slices.Contains(removed, r.RunID) {
			d.logf("retain_runs %d: kept run %s: it wrote prelabels meanwhile", keep, r.RunID)
			continue
		}
		if err := d.root.Remove(r.RunID); err != nil {
			d.logf("warning: retain_runs %d: run %s is out of Potato's store, but its directory stays: %v", keep, r.RunID, err)
			continue
		}
		d.logf("retain_runs %d: removed run %s (%s, %s, created %s): its directory and its rows in Potato's store",
			keep, r.RunID, r.State, r.Trainer, r.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"))
	}
	d.compressEvents(runs, removed)
	if len(choice.kept) > 0 {
		var parts []string
		for _, k := range choice.kept {
			parts = append(parts, k.id+" ("+k.why+")")
		}
		d.logf("retain_runs %d: kept %d older run(s): %s", keep, len(choice.kept), strings.Join(parts, "; "))
	}
}

// localModel reports whether a run's model files are in its artifacts/
// on this machine (and not left on a backend's host).
func localModel(r rundir.Record) bool {
	return r.ArtifactURI == "" || strings.HasPrefix(r.ArtifactURI, "file://")
}

// newestSuccess is the newest successful run of runs (oldest first) whose
// schemas hold schema (any when ""), of trainer (any when ""), whose
// model is local when local is set; nil when none.
func newestSuccess(runs []rundir.Info, schema, trainer string, local bool) *rundir.Info {
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		if r.State != rundir.StateSuccess || !r.Finished {
			continue
		}
		if schema != "" && !slices.Contains(r.Schemas, schema) || trainer != "" && r.Trainer != trainer {
			continue
		}
		if local && !localModel(r.Record) || r.Curve != nil { // a curve run keeps no model
			continue
		}
		return &runs[i]
	}
	return nil
}

// updateLatest points training/latest/<schema>, for each of schemas, at
// the artifacts of the newest successful run of that schema whose model
// is on this machine, and says in logf what changed.
func updateLatest(root *rundir.Root, schemas []string, ending *rundir.Record, logf func(string, ...any)) {
	runs, err := root.List()
	if err != nil {
		logf("warning: %s/: listing the runs: %v", rundir.LatestDir, err)
		return
	}
	if ending != nil {
		for i := range runs {
			if runs[i].RunID == ending.RunID {
				runs[i].Record = *ending
				runs[i].Finished = true
			}
		}
	}
	for _, s := range schemas {
		r := newestSuccess(runs, s, "", true)
		if r == nil {
			continue
		}
		if ending != nil && r.RunID != ending.RunID && slices.Contains(ending.Schemas, s) && !localModel(*ending) {
			logf("%s stays at run %s: the model of this run stayed at %s", root.LatestLink(s), r.RunID, ending.ArtifactURI)
		}
		if cur, _ := root.Latest(s); cur == r.RunID {
			continue
		}
		if err := root.SetLatest(s, r.RunID); err != nil {
			logf("warning: %s: %v", root.LatestLink(s), err)
			continue
		}
		logf("%s now points at run %s", root.LatestLink(s), r.RunID)
	}
}

// compressEvents gzips the events.jsonl of every finished run that stays,
// but the ending one: old runs keep their events, readable with zcat, at a
// fraction of the disk. A run waiting for writeback keeps its file as it is.
func (d *dispatcher) compressEvents(runs []rundir.Info, removed []string) {
	for _, r := range runs {
		if r.RunID == d.run.ID || !r.Finished || r.WritebackPending || slices.Contains(removed, r.RunID) {
			continue
		}
		done, err := d.root.CompressEvents(r.RunID)
		switch {
		case err != nil:
			d.logf("warning: compressing the events of run %s: %v", r.RunID, err)
		case done:
			d.logf("compressed the events of run %s into %s", r.RunID, rundir.EventsArchive)
		}
	}
}
