package dispatch

import (
	"errors"
	"fmt"
	"time"

	"potato-training/lib/rundir"
)

// finish ends the run: Potato's store, the record, then exit_code, last.
// A run whose terminal row cannot be written to the store is not a
// success: it ends in error with error_code store_failed, and, when it had
// trained, stays pending for potato-dispatch writeback.
func (d *dispatcher) finish(e *ending) int {
	d.mu.Lock()
	d.finished = true
	d.endEvents()
	trained := d.trained
	d.mu.Unlock()
	end := *e
	if end.state == rundir.StateError && end.code == "" {
		end.code = CodeDispatchFailed
	}
	now := time.Now().UTC()
	end, pending, storeErr := d.storeEnd(end, trained, now)
	var exit int
	d.set(func(r *rundir.Record) {
		exit = end.apply(r, now)
		r.WritebackPending = pending
		r.StoreError = ""
		if storeErr != nil {
			r.StoreError = storeErr.Error()
		}
	})
	if end.state != rundir.StateSuccess && !pending {
		d.removePartial()
	}
	if end.state == rundir.StateSuccess {
		d.logf("run finished: success")
	} else {
		d.logf("run finished: %s: %s", end.state, end.msg)
	}
	if storeErr != nil && end.code != CodeStoreFailed {
		d.logf("%v", storeErr)
	}
	if pending {
		d.logf("the predictions stay in %s: potato-dispatch writeback CONFIG %s applies them to Potato's store", d.run.Path(rundir.PredictionsFile), d.run.ID)
	}
	d.afterEnd(end, exit)
	if err := d.run.Finish(exit); err != nil {
		d.logf("cannot write exit_code: %v", err)
	}
	return exit
}

// storeEnd writes the terminal row into Potato's store. A success that
// the store refuses becomes a store_failed error, pending write-back; a
// store that failed before is not tried again for a run that never
// trained.
func (d *dispatcher) storeEnd(end ending, trained bool, now time.Time) (_ ending, pending bool, storeErr error) {
	pending = trained && end.code == CodeStoreFailed
	rec := d.run.Record()
	end.apply(&rec, now)
	if end.code != CodeStoreFailed || trained {
		storeErr = recordRun(d.cfg, d.root, rec)
	} else {
		storeErr = errors.New(end.msg)
	}
	if storeErr != nil && end.state == rundir.StateSuccess {
		// The run trained and wrote back, but Potato would not list it.
		end, pending = *failed(storeErr.Error(), CodeStoreFailed), true
		end.apply(&rec, now)
		if err := recordRun(d.cfg, d.root, rec); err == nil {
			storeErr = nil
		}
	}
	return end, pending, storeErr
}

// apply writes the ending into a record and returns the exit code.
func (e ending) apply(r *rundir.Record, at time.Time) int {
	exit := ExitFailed
	switch e.state {
	case rundir.StateSuccess:
		exit = ExitSuccess
	case rundir.StateCancelled:
		exit = ExitCancelled
	}
	r.State = e.state
	r.FinishedAt = &at
	r.ExitCode = &exit
	r.Error, r.ErrorCode = "", ""
	if e.state != rundir.StateSuccess {
		r.Error = e.msg
		r.ErrorCode = e.code
	}
	switch e.state {
	case rundir.StateSuccess:
		r.Step = "finished"
		if r.Progress != nil {
			r.Progress.Current = r.Progress.Total
		}
	case rundir.StateCancelled:
		r.Step = "cancelled"
	default:
		r.Step = "failed: " + e.msg
	}
	return exit
}

// afterEnd is what follows a run's end before exit_code: the latest
// links, the auto log, and retention.
func (d *dispatcher) afterEnd(end ending, exit int) {
	rec := d.run.Record()
	if end.state == rundir.StateSuccess {
		updateLatest(d.root, rec.Schemas, &rec, d.logf)
	}
	if rec.Trigger == "auto" {
		line := fmt.Sprintf("exit %d", exit)
		if end.state != rundir.StateSuccess {
			line += ": " + end.msg
		}
		appendAutoLog(d.root.Dir, end.state, d.run.ID, line)
	}
	d.prune()
}
