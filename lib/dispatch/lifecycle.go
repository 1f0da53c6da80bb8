package dispatch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"potato-training/lib/backend"
	"potato-training/lib/bundle"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
	"potato-training/lib/writeback"
)

// A run's life after it is recorded, one phase a function (docs/DESIGN.md,
// "One run"): its turn in the queue, the bundle, the backend's
// preparation, the start, the relay of events until the training process
// ends, the collection of what it made, and the write-back. A phase that
// ends the run returns how (an *ending); finish writes that ending.

// ending is how a run ends: its state, the message and the error_code.
type ending struct{ state, msg, code string }

func failed(msg, code string) *ending { return &ending{rundir.StateError, msg, code} }

func cancelled(msg string) *ending {
	return &ending{rundir.StateCancelled, msg, events.CodeCancelled}
}

var succeeded = &ending{state: rundir.StateSuccess}

func (d *dispatcher) execute(ctx context.Context) int {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	cancel := d.run.WatchCancel(ctx)
	rec := d.run.Record()
	d.logf("run %s: trainer %s, schemas %s, on %s, started by %s", rec.RunID, rec.Trainer, strings.Join(rec.Schemas, ","), rec.RanOn, rec.Trigger)

	defer d.closeEvents()
	release, end := d.waitTurn(ctx, cancel)
	if end != nil {
		return d.finish(end)
	}
	defer release()
	lim := d.limit(ctx, cancel)
	defer lim.stop()
	return d.finish(d.train(ctx, lim))
}

// train takes the run from the bundle to the write-back, once it is the
// run's turn.
func (d *dispatcher) train(ctx context.Context, lim *limits) *ending {
	m, end := d.build(lim)
	if end != nil {
		return end
	}
	exec, end := d.prepare(lim, m)
	if end != nil {
		return end
	}
	defer exec.Close()
	if end := d.start(ctx, lim, exec); end != nil {
		return end
	}
	res, end := d.relay(ctx, lim, exec)
	if end != nil {
		return end
	}
	if end := d.collect(lim, exec, *res); end != nil {
		return end
	}
	return d.writeBackPhase(m, exec.Spec().Trainer)
}

// waitTurn waits for the run's turn in the queue (SPEC B6), giving up if
// the run is cancelled meanwhile. release gives the turn back.
func (d *dispatcher) waitTurn(ctx context.Context, cancel <-chan struct{}) (release func(), end *ending) {
	qctx, qstop := context.WithCancel(ctx)
	defer qstop()
	go func() {
		select {
		case <-cancel:
			qstop()
		case <-qctx.Done():
		}
	}()
	release, err := d.root.Acquire(qctx, d.run, func(ahead string) {
		d.logf("waiting in the queue behind run %s", ahead)
		d.step("waiting in the queue behind run " + ahead)
	})
	if err != nil {
		if isClosed(cancel) {
			return nil, cancelled(msgCancel + " while queued")
		}
		return nil, failed(err.Error(), "queue")
	}
	return release, nil
}

// limits are a run's cancel and max_wall_seconds (SPEC B5). ctx ends
// with either, so the steps before and after the training process
// (connecting, copying code, installing packages, copying the model back)
// stop too.
type limits struct {
	ctx     context.Context
	stop    context.CancelFunc
	cancel  <-chan struct{}
	started time.Time
	wall    time.Duration
	wallS   int
}

func (d *dispatcher) limit(ctx context.Context, cancel <-chan struct{}) *limits {
	l := &limits{cancel: cancel, started: time.Now().UTC(), wallS: d.cfg.Training.MaxWallSeconds}
	l.wall = time.Duration(l.wallS) * time.Second
	if l.wall > 0 {
		l.ctx, l.stop = context.WithDeadline(ctx, l.started.Add(l.wall))
	} else {
		l.ctx, l.stop = context.WithCancel(ctx)
	}
	go func() {
		select {
		case <-cancel:
			l.stop()
		case <-l.ctx.Done():
		}
	}()
	return l
}

// failed ends the run after a step outside the relay failed: as
// cancelled, or over the limit, when that is what stopped it.
func (l *limits) failed(err error, code string) *ending {
	switch {
	case isClosed(l.cancel):
		return cancelled(msgCancel)
	case errors.Is(l.ctx.Err(), context.DeadlineExceeded):
		return l.overWall()
	}
	return failed(err.Error(), code)
}

func (l *limits) overWall() *ending { return failed(fmt.Sprintf(msgWall, l.wallS), "timeout") }

// build writes the bundle (what it holds: SPEC S6, step 5).
func (d *dispatcher) build(lim *limits) (bundle.Manifest, *ending) {
	rec := d.run.Record()
	d.set(func(r *rundir.Record) {
		r.State = rundir.StateBuilding
		r.StartedAt = &lim.started
		r.Step = "building the bundle"
	})
	// The bundle's ids, kept for the reading of the predictions
	// (writeback.BundleItems).
	items := writeback.NewBundleItems()
	m, err := bundle.BuildItems(d.cfg, d.run.Path(rundir.BundleDir), rec.Schemas, items.Add)
	if err != nil {
		return m, failed("building the bundle: "+err.Error(), events.CodeBadBundle)
	}
	if err := items.Keep(d.run.Path(rundir.BundleDir)); err != nil {
		return m, failed("building the bundle: "+err.Error(), events.CodeBadBundle)
	}
	d.logf("bundle: %d items, splits %s, %d without a label, digest %s", m.Stats.NItems, splitCounts(m), m.Stats.NSkippedNoLabel, m.Digest)
	if isClosed(lim.cancel) {
		return m, cancelled(msgCancel)
	}
	return m, nil
}

// prepare has the backend make the run's execution, then writes the spec
// the training process reads.
func (d *dispatcher) prepare(lim *limits, m bundle.Manifest) (backend.Execution, *ending) {
	rec := d.run.Record()
	spec := trainer.Spec{
		V: 1, RunID: rec.RunID, Trainer: rec.Trainer, Schemas: m.Schemas,
		BundleDir: d.run.Path(rundir.BundleDir), Workdir: d.run.Path(rundir.ArtifactsDir),
		Params: rec.Params, Seed: int64(d.cfg.Training.SplitSeed),
		Limits: trainer.Limits{MaxWallS: d.cfg.Training.MaxWallSeconds, MaxRAMMB: d.cfg.Training.MaxRAMMB,
			Device: d.cfg.Training.Device, NumThreads: d.cfg.Training.NumThreads},
	}
	if rec.Curve != nil {
		spec.Curve, spec.CurveDraws = rec.Curve.Points, rec.Curve.Draws
	}
	if err := os.MkdirAll(spec.Workdir, 0o755); err != nil {
		return nil, failed(err.Error(), "")
	}
	be, err := d.newBackend(d.backendCfg)
	if err != nil {
		return nil, failed(err.Error(), "")
	}
	if err := d.openEvents(); err != nil {
		return nil, failed(err.Error(), "")
	}
	d.set(func(r *rundir.Record) { r.State = rundir.StateDispatching; r.Step = "starting the training process" })
	exec, err := be.Prepare(lim.ctx, backend.Run{Config: d.cfg, Backend: d.backendCfg, Dir: d.run, Spec: spec,
		SpecPath: d.run.Path(rundir.SpecFile), Sink: sink{d}})
	if err != nil {
		d.hints(err)
		return nil, lim.failed(err, "")
	}
	spec = exec.Spec()
	d.set(func(r *rundir.Record) { r.Device = spec.Limits.Device })
	if err := spec.Write(d.run.Path(rundir.SpecFile)); err != nil {
		exec.Close()
		return nil, failed(err.Error(), "")
	}
	return exec, nil
}

// hints logs the lines of a backend's error that say how to fix it.
func (d *dispatcher) hints(err error) {
	var h *backend.HintError
	if errors.As(err, &h) {
		for _, l := range h.Hints {
			d.logf("hint: %s", l)
		}
	}
}

// start starts the training process. Its context is the dispatch's own,
// not the limits': relay stops the process gracefully when they end.
func (d *dispatcher) start(ctx context.Context, lim *limits, exec backend.Execution) *ending {
	started, err := exec.Start(ctx)
	if err != nil {
		d.hints(err)
		return lim.failed(err, "")
	}
	// The backend's own step line ("waiting for the agent on HOST") stays
	// until the trainer reports one.
	d.claimMu.Lock()
	defer d.claimMu.Unlock()
	if started.Queued && !d.claimed {
		d.set(func(r *rundir.Record) { // until an agent claims it (G6)
			r.State = rundir.StateQueued
			if started.Step != "" {
				r.Step = started.Step
			}
		})
		return nil
	}
	d.set(func(r *rundir.Record) {
		r.State = rundir.StateRunning
		switch {
		case started.Step != "":
			r.Step = started.Step
		case r.Step == "starting the training process":
			r.Step = "training"
		}
	})
	return nil
}

// relay passes the events on until the training process has ended,
// cancelling it on request or over max_wall_seconds (checked every
// second, wherever the run is), and judges how it ended.
func (d *dispatcher) relay(ctx context.Context, lim *limits, exec backend.Execution) (*events.Result, *ending) {
	grace := time.Duration(d.cfg.Training.GraceSeconds) * time.Second
	type relayed struct {
		out backend.Outcome
		err error
	}
	done := make(chan relayed, 1)
	go func() {
		out, err := exec.Relay(ctx)
		done <- relayed{out, err}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	cancel := lim.cancel
	var end relayed
wait:
	for {
		select {
		case end = <-done:
			break wait
		case <-cancel:
			cancel = nil
			d.mu.Lock()
			d.cancelled = true
			d.mu.Unlock()
			d.logf("cancel requested: SIGTERM, then SIGKILL after %s", grace)
			d.step("cancelling")
			d.stopProcess(ctx, exec, grace)
		case <-tick.C:
			if lim.wall > 0 && !d.timedOut && time.Since(lim.started) > lim.wall {
				d.timedOut = true
				d.logf(msgWall+": stopping it", lim.wallS)
				d.step("stopping: over max_wall_seconds")
				d.stopProcess(ctx, exec, grace)
			}
		}
	}
	d.logf("training process ended: %s", end.out)
	return d.judge(lim, end.out, end.err)
}

func (d *dispatcher) stopProcess(ctx context.Context, exec backend.Execution, grace time.Duration) {
	if err := exec.Cancel(ctx, grace); err != nil {
		d.logf("warning: stopping the training process: %v", err)
	}
}

// judge turns how the process ended into the run's result, or its end.
func (d *dispatcher) judge(lim *limits, out backend.Outcome, err error) (*events.Result, *ending) {
	d.mu.Lock()
	res, fail, wasCancelled := d.result, d.failure, d.cancelled
	d.mu.Unlock()
	switch {
	case wasCancelled:
		return nil, cancelled(msgCancel)
	case d.timedOut:
		return nil, lim.overWall()
	case err != nil:
		return nil, failed(err.Error(), "backend")
	case res == nil && out.Killed:
		return nil, failed(msgKilled, events.CodeOutOfMemory)
	case res == nil && fail != nil:
		return nil, failed(fail.Message, fail.Code)
	case res == nil:
		return nil, failed(fmt.Sprintf(msgNoResult, out), "no_result")
	case out.ExitCode != 0:
		d.logf("warning: the training process sent a result but exited with %s", out)
	}
	return res, nil
}

// collect brings the predictions and the model home and records where
// the model is.
func (d *dispatcher) collect(lim *limits, exec backend.Execution, res events.Result) *ending {
	d.set(func(r *rundir.Record) { r.State = rundir.StateFetching; r.Step = "collecting the predictions" })
	got, err := exec.Collect(lim.ctx, res)
	if err != nil {
		return lim.failed(fmt.Errorf("collecting the results: %w", err), "")
	}
	uri := got.ArtifactURI
	if uri == "" {
		uri = "file://" + exec.Spec().Workdir
	}
	d.set(func(r *rundir.Record) { r.ArtifactURI = uri })
	d.mu.Lock()
	d.trained = true
	d.mu.Unlock()
	return nil
}

// writeBackPhase scores the predictions and writes them into Potato's
// store as prelabels (SPEC B3, B7).
func (d *dispatcher) writeBackPhase(m bundle.Manifest, trainerName string) *ending {
	if d.run.Record().Curve != nil {
		return d.curvePhase(m)
	}
	if info, _ := trainer.Lookup(trainerName); info.NoPredictions {
		d.logf("%s writes no predictions: nothing to score or write back", trainerName)
		return succeeded
	}
	if err := d.writeBack(m); err != nil {
		var se *StoreError
		if errors.As(err, &se) {
			return failed("write-back: "+err.Error(), CodeStoreFailed)
		}
		return failed("write-back: "+err.Error(), "writeback")
	}
	return succeeded
}

func splitCounts(m bundle.Manifest) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(m.Stats.Splits)) {
		parts = append(parts, fmt.Sprintf("%s %d", name, m.Stats.Splits[name]))
	}
	return strings.Join(parts, ", ")
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
