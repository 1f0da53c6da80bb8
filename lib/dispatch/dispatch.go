// Package dispatch takes one run from start to finish, as
// potato-dispatch(1) describes: the record and the queue, the bundle and
// the spec, the backend, the limits, cancel, and write-back.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"potato-training/lib/agent"
	"potato-training/lib/backend"
	agentbackend "potato-training/lib/backend/agent"
	"potato-training/lib/backend/local"
	slurmbackend "potato-training/lib/backend/slurm"
	sshbackend "potato-training/lib/backend/ssh"
	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
	"potato-training/lib/validate"
)

// Exit codes of potato-dispatch run; also the content of exit_code.
const (
	ExitSuccess   = 0
	ExitFailed    = 1
	ExitUsage     = 2
	ExitCancelled = 3
)

// Texts of the run log and run.json that users and tests match.
const (
	msgKilled   = "the training process was killed (SIGKILL), which usually means the machine ran out of memory"
	msgNoResult = "the training process ended (%s) without a result"
	msgWall     = "the run did not finish within max_wall_seconds (%d s)"
	msgCancel   = "cancelled"
)

// Options are potato-dispatch run's arguments.
type Options struct {
	ConfigPath string
	Trainer    string
	Schemas    []string
	Backend    string // "" = model_training.backend
	Params     map[string]string
	RunID      string
	Trigger    string
	// Started is called with the run id as soon as the run is recorded.
	Started func(id string)
	// NewBackend makes the backend of a run; nil means the real ones.
	NewBackend func(b *config.Backend) (backend.Backend, error)
}

// UsageError is an error of the request itself (exit 2).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// LoadConfig reads and validates the config; a run never starts from a
// config with errors (SPEC V2). An error that concerns one backend alone
// (a misspelt key of its entry, model_training.backend naming no backend)
// is kept in cfg.BackendErrors instead: it refuses runs on that backend
// (check) and leaves the other backends, status and cancel working.
func LoadConfig(path string) (*config.Config, error) {
	cfg, report, err := validate.File(path)
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	var global []validate.Finding
	for _, e := range report.Errors {
		name := e.Backend
		switch e.Key {
		case "model_training.backend":
			name = cfg.Training.Backend
		case "model_training.auto_retrain.backend":
			name = cfg.Training.AutoRetrain.Backend
		}
		// An entry named local is an error of the whole config: the
		// local backend is not that entry.
		if name == "" || name == config.LocalBackend.Name {
			global = append(global, e)
			continue
		}
		if cfg.BackendErrors == nil {
			cfg.BackendErrors = map[string][]config.Problem{}
		}
		cfg.BackendErrors[name] = append(cfg.BackendErrors[name], config.Problem{Line: e.Line, Key: e.Key, Message: e.Message, Backend: name})
	}
	if len(global) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "%s has %d error(s); run potato validate %s", path, len(global), path)
		for _, e := range global {
			fmt.Fprintf(&b, "\n  %s:%d: %s", e.File, e.Line, e.Message)
		}
		return nil, &UsageError{Err: errors.New(b.String())}
	}
	return cfg, nil
}

// Root opens the training directory of a config.
func Root(cfg *config.Config) (*rundir.Root, error) {
	return rundir.Open(cfg.TrainingDir())
}

func defaultBackend(b *config.Backend) (backend.Backend, error) {
	switch b.Type {
	case config.TypeLocal:
		return local.New(), nil
	case config.TypeSSH:
		return sshbackend.New(b), nil
	case config.TypeSLURM:
		return slurmbackend.New(b), nil
	case config.TypeAgent:
		return agentbackend.New(b), nil
	}
	return nil, fmt.Errorf("backend %s is of type %s, which this version of potato-dispatch cannot run yet", b.Name, b.Type)
}

// check refuses a run that cannot work, before anything is recorded.
func check(cfg *config.Config, opt *Options) (*config.Backend, error) {
	name := opt.Backend
	if name == "" {
		name = cfg.Training.Backend
	}
	if err := cfg.BackendError(name); err != nil {
		return nil, &UsageError{Err: err}
	}
	b, ok := cfg.Backend(name)
	if !ok {
		return nil, usagef("no backend %q in %s: the backends are %s", name, cfg.Path, backendNames(cfg))
	}
	if !cfg.Training.Enabled {
		return nil, usagef("model_training.enabled is not true in %s: set it to train this project", cfg.Path)
	}
	if opt.Trainer == "" {
		return nil, usagef("no trainer given: use --trainer with one of %s", trainer.Choices())
	}
	if strings.HasPrefix(opt.Trainer, local.ExecPrefix) {
		// A program on the machine that runs the training process: the
		// server has no say over what an agent's owner runs.
		if b.Type == config.TypeAgent {
			return nil, usagef("trainer %s names a program: it runs on the local, ssh and slurm backends, not on agent backend %s", opt.Trainer, b.Name)
		}
	} else {
		info, ok := trainer.Lookup(opt.Trainer)
		switch {
		case !ok:
			return nil, usagef("unknown trainer %q: the trainers are %s", opt.Trainer, trainer.Choices())
		case info.LocalOnly && b.Type != config.TypeLocal:
			return nil, usagef("trainer %s runs only on the annotation server (local), not on %s: %s", opt.Trainer, b.Label(), info.LocalReason)
		case !info.Available:
			return nil, usagef("trainer %s is not available in this version", opt.Trainer)
		}
		if err := trainer.CheckParams(opt.Trainer, opt.Params); err != nil {
			return nil, usagef("%v; the parameters of %s are:\n%s", err, opt.Trainer, trainer.ParamsHelp(opt.Trainer, false))
		}
	}
	if len(opt.Schemas) == 0 {
		return nil, usagef("no schema given: use --schemas NAME[,NAME]")
	}
	for _, s := range opt.Schemas {
		sc, ok := cfg.Scheme(s)
		if !ok {
			return nil, usagef("schema %q is not in annotation_schemes of %s", s, cfg.Path)
		}
		if !sc.Classification() && !strings.HasPrefix(opt.Trainer, local.ExecPrefix) {
			return nil, usagef("schema %s is a %s schema: the trainers learn radio, select and multiselect schemas", s, sc.AnnotationType)
		}
	}
	switch b.Type {
	case config.TypeLocal, config.TypeSSH, config.TypeSLURM, config.TypeAgent:
	default:
		return nil, usagef("backend %s is of type %s, which this version of potato-dispatch cannot run yet", b.Name, b.Type)
	}
	return b, nil
}

func backendNames(cfg *config.Config) string {
	names := []string{"local"}
	for _, b := range cfg.Training.Backends {
		names = append(names, b.Name)
	}
	return strings.Join(names, ", ")
}

// Run records a run, waits for its turn in the queue and takes it to its
// end. It returns the run's exit code; err is set when the run could not
// even be recorded (then the code is ExitUsage or ExitFailed).
func Run(ctx context.Context, opt Options) (int, error) {
	cfg, err := LoadConfig(opt.ConfigPath)
	if err != nil {
		return ExitUsage, err
	}
	b, err := check(cfg, &opt)
	if err != nil {
		return ExitUsage, err
	}
	root, err := Root(cfg)
	if err != nil {
		return ExitFailed, err
	}
	settleLost(cfg, root)
	if opt.Trigger == "" {
		opt.Trigger = "manual"
	}
	host, _ := os.Hostname()
	run, err := root.Create(rundir.Record{
		RunID: opt.RunID, Project: cfg.TaskName, Trainer: opt.Trainer, Schemas: opt.Schemas,
		Params: opt.Params, Backend: b.Name, BackendType: b.Type, RanOn: b.Label(),
		Trigger: opt.Trigger, Step: "waiting in the queue", Host: host,
	})
	if err != nil {
		if opt.RunID != "" {
			return ExitUsage, &UsageError{Err: err}
		}
		return ExitFailed, err
	}
	defer run.Close()
	if opt.Started != nil {
		opt.Started(run.ID)
	}
	newBackend := opt.NewBackend
	if newBackend == nil {
		newBackend = defaultBackend
	}
	d := &dispatcher{cfg: cfg, root: root, run: run, backendCfg: b, newBackend: newBackend}
	// The run is in Potato's store from its start, so that Potato's page
	// shows it; a store that cannot be written stops it before any work.
	d.stored = potatoStatus(rundir.StateQueued)
	if err := recordRun(cfg, root, run.Record()); err != nil {
		return d.finish(rundir.StateError, err.Error(), CodeStoreFailed), nil
	}
	return d.execute(ctx), nil
}

type dispatcher struct {
	cfg        *config.Config
	root       *rundir.Root
	run        *rundir.Run
	backendCfg *config.Backend
	newBackend func(*config.Backend) (backend.Backend, error)

	mu        sync.Mutex
	events    *os.File
	throttle  *events.Throttle // what of the events reaches events.jsonl
	result    *events.Result
	failure   *events.Failure
	cancelled bool
	timedOut  bool
	startedAt time.Time
	// finished is set when the run's end is being written: events that
	// still arrive (a remote agent's last posts) are dropped, so nothing
	// changes the record after exit_code.
	finished bool
	// trained is set once the trainer's result is collected: from then on
	// a store that fails leaves the run pending for potato-dispatch
	// writeback.
	trained bool

	storeMu sync.Mutex
	stored  string // the status last upserted into Potato's store
}

func (d *dispatcher) logf(format string, args ...any) { d.run.Logf(format, args...) }

func (d *dispatcher) set(fn func(*rundir.Record)) {
	if err := d.run.Update(fn); err != nil {
		d.logf("cannot write run.json: %v", err)
	}
	d.upsert(d.run.Record())
}

// upsert writes the run row into Potato's store when its status changed
// (Potato's life cycle: queued, building, running, evaluating). A failure
// is a warning here: the end of the run writes the row again, and fails
// the run if it cannot. finish writes the terminal row itself.
func (d *dispatcher) upsert(rec rundir.Record) {
	if rundir.Finished(rec.State) {
		return
	}
	d.storeMu.Lock()
	defer d.storeMu.Unlock()
	st := potatoStatus(rec.State)
	if st == d.stored {
		return
	}
	d.stored = st
	if err := recordRun(d.cfg, d.root, rec); err != nil {
		d.logf("warning: the run is %s, but %v", st, err)
	}
}

func (d *dispatcher) step(s string) { d.set(func(r *rundir.Record) { r.Step = s }) }

// finish ends the run: Potato's store, the record, then exit_code, last.
// A run whose terminal row cannot be written to the store is not a
// success: it ends in error with error_code store_failed, and, when it had
// trained, stays pending for potato-dispatch writeback.
func (d *dispatcher) finish(state, msg, code string) int {
	d.mu.Lock()
	d.finished = true
	d.endEvents()
	trained := d.trained
	d.mu.Unlock()
	if state == rundir.StateError && code == "" {
		code = CodeDispatchFailed
	}
	pending := trained && code == CodeStoreFailed
	now := time.Now().UTC()
	end := func(r *rundir.Record, state, msg, code string) int {
		exit := ExitFailed
		switch state {
		case rundir.StateSuccess:
			exit = ExitSuccess
		case rundir.StateCancelled:
			exit = ExitCancelled
		}
		r.State = state
		r.FinishedAt = &now
		r.ExitCode = &exit
		r.Error, r.ErrorCode = "", ""
		if state != rundir.StateSuccess {
			r.Error = msg
			r.ErrorCode = code
		}
		switch state {
		case rundir.StateSuccess:
			r.Step = "finished"
			if r.Progress != nil {
				r.Progress.Current = r.Progress.Total
			}
		case rundir.StateCancelled:
			r.Step = "cancelled"
		default:
			r.Step = "failed: " + msg
		}
		return exit
	}
	rec := d.run.Record()
	end(&rec, state, msg, code)
	var storeErr error
	if code != CodeStoreFailed || trained {
		storeErr = recordRun(d.cfg, d.root, rec)
	} else {
		storeErr = errors.New(msg) // the store failed before: no second try
	}
	if storeErr != nil && state == rundir.StateSuccess {
		// The run trained and wrote back, but Potato would not list it.
		state, msg, code, pending = rundir.StateError, storeErr.Error(), CodeStoreFailed, true
		end(&rec, state, msg, code)
		if err := recordRun(d.cfg, d.root, rec); err == nil {
			storeErr = nil
		}
	}
	var exit int
	d.set(func(r *rundir.Record) {
		exit = end(r, state, msg, code)
		r.WritebackPending = pending
		r.StoreError = ""
		if storeErr != nil {
			r.StoreError = storeErr.Error()
		}
	})
	if state == rundir.StateSuccess {
		d.logf("run finished: success")
	} else {
		d.logf("run finished: %s: %s", state, msg)
	}
	if storeErr != nil && code != CodeStoreFailed {
		d.logf("%v", storeErr)
	}
	if pending {
		d.logf("the predictions stay in %s: potato-dispatch writeback CONFIG %s applies them to Potato's store", d.run.Path(rundir.PredictionsFile), d.run.ID)
	}
	if state == rundir.StateSuccess {
		rec := d.run.Record()
		updateLatest(d.root, rec.Schemas, &rec, d.logf)
	}
	if rec := d.run.Record(); rec.Trigger == "auto" {
		end := fmt.Sprintf("exit %d", exit)
		if state != rundir.StateSuccess {
			end += ": " + msg
		}
		appendAutoLog(d.root.Dir, state, d.run.ID, end)
	}
	d.prune()
	if err := d.run.Finish(exit); err != nil {
		d.logf("cannot write exit_code: %v", err)
	}
	return exit
}

// CodeDispatchFailed is the error_code of a failure that has no code of
// its own (a backend that could not start the run, a file that could not
// be written), so that Potato's page tells every failure by a code.
const CodeDispatchFailed = "dispatch_failed"

func (d *dispatcher) execute(ctx context.Context) int {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	cancelCh := d.run.WatchCancel(ctx)
	rec := d.run.Record()
	d.logf("run %s: trainer %s, schemas %s, on %s, started by %s", rec.RunID, rec.Trainer, strings.Join(rec.Schemas, ","), rec.RanOn, rec.Trigger)

	// Wait for the queue, giving up if the run is cancelled meanwhile.
	qctx, qstop := context.WithCancel(ctx)
	go func() {
		select {
		case <-cancelCh:
			qstop()
		case <-qctx.Done():
		}
	}()
	release, err := d.root.Acquire(qctx, d.run, func(ahead string) {
		d.logf("waiting in the queue behind run %s", ahead)
		d.step("waiting in the queue behind run " + ahead)
	})
	qstop()
	if err != nil {
		if isClosed(cancelCh) {
			return d.finish(rundir.StateCancelled, msgCancel+" while queued", events.CodeCancelled)
		}
		return d.finish(rundir.StateError, err.Error(), "queue")
	}
	defer release()

	started := time.Now().UTC()
	d.startedAt = started
	// The steps before and after the training process (connecting, copying
	// code, installing packages, copying the model back) run under the
	// run's own limits too: a cancel or max_wall_seconds stops them.
	rctx, rstop := context.WithCancel(ctx)
	defer rstop()
	if w := d.cfg.Training.MaxWallSeconds; w > 0 {
		var dstop context.CancelFunc
		rctx, dstop = context.WithDeadline(rctx, started.Add(time.Duration(w)*time.Second))
		defer dstop()
	}
	go func() {
		select {
		case <-cancelCh:
			rstop()
		case <-rctx.Done():
		}
	}()
	// stepFailed ends the run when a step outside the wait failed: as
	// cancelled or over the limit when that is what stopped it.
	stepFailed := func(err error, code string) int {
		switch {
		case isClosed(cancelCh):
			return d.finish(rundir.StateCancelled, msgCancel, events.CodeCancelled)
		case errors.Is(rctx.Err(), context.DeadlineExceeded):
			return d.finish(rundir.StateError, fmt.Sprintf(msgWall, d.cfg.Training.MaxWallSeconds), "timeout")
		}
		return d.finish(rundir.StateError, err.Error(), code)
	}
	d.set(func(r *rundir.Record) {
		r.State = rundir.StateBuilding
		r.StartedAt = &started
		r.Step = "building the bundle"
	})
	m, err := bundle.Build(d.cfg, d.run.Path(rundir.BundleDir), rec.Schemas)
	if err != nil {
		return d.finish(rundir.StateError, "building the bundle: "+err.Error(), events.CodeBadBundle)
	}
	d.logf("bundle: %d items, splits %s, %d without a label, digest %s", m.Stats.NItems, splitCounts(m), m.Stats.NSkippedNoLabel, m.Digest)
	if isClosed(cancelCh) {
		return d.finish(rundir.StateCancelled, msgCancel, events.CodeCancelled)
	}

	spec := trainer.Spec{
		V: 1, RunID: rec.RunID, Trainer: rec.Trainer, Schemas: m.Schemas,
		BundleDir: d.run.Path(rundir.BundleDir), Workdir: d.run.Path(rundir.ArtifactsDir),
		Params: rec.Params, Seed: int64(d.cfg.Training.SplitSeed),
		Limits: trainer.Limits{MaxWallS: d.cfg.Training.MaxWallSeconds, MaxRAMMB: d.cfg.Training.MaxRAMMB,
			Device: d.cfg.Training.Device, NumThreads: d.cfg.Training.NumThreads},
	}
	if err := os.MkdirAll(spec.Workdir, 0o755); err != nil {
		return d.finish(rundir.StateError, err.Error(), "")
	}
	be, err := d.newBackend(d.backendCfg)
	if err != nil {
		return d.finish(rundir.StateError, err.Error(), "")
	}
	if c, ok := be.(backend.Closer); ok {
		defer c.Close()
	}
	ev, err := os.OpenFile(d.run.Path(rundir.EventsFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return d.finish(rundir.StateError, err.Error(), "")
	}
	d.events = ev
	defer ev.Close()
	job := &backend.Job{Config: d.cfg, Backend: d.backendCfg, Run: d.run, Spec: spec,
		SpecPath: d.run.Path(rundir.SpecFile), Logf: d.logf, Step: d.step}
	job.Event = func(e events.Event) { d.onEvent(job, e) }

	d.set(func(r *rundir.Record) { r.State = rundir.StateDispatching; r.Step = "starting the training process" })
	if err := be.Prepare(rctx, job); err != nil {
		return stepFailed(err, "")
	}
	d.set(func(r *rundir.Record) { r.Device = job.Spec.Limits.Device })
	if err := job.Spec.Write(job.SpecPath); err != nil {
		return d.finish(rundir.StateError, err.Error(), "")
	}
	// Start's context lives as long as the process it starts: the wait
	// below stops that gracefully (SIGTERM, then SIGKILL after grace).
	if err := be.Start(ctx, job); err != nil {
		return stepFailed(err, "")
	}
	// The backend's own step line ("waiting for the agent on HOST") stays
	// until the trainer reports one.
	d.set(func(r *rundir.Record) {
		if c, ok := be.(backend.Claimable); ok && !c.Claimed() {
			return // queued until an agent claims it
		}
		r.State = rundir.StateRunning
		if r.Step == "starting the training process" {
			r.Step = "training"
		}
	})

	grace := time.Duration(d.cfg.Training.GraceSeconds) * time.Second
	outcomeCh := make(chan backend.Outcome, 1)
	var waitErr error
	go func() {
		out, err := be.Wait(ctx)
		waitErr = err
		outcomeCh <- out
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	wall := time.Duration(d.cfg.Training.MaxWallSeconds) * time.Second
	var outcome backend.Outcome
wait:
	for {
		select {
		case outcome = <-outcomeCh:
			break wait
		case <-cancelCh:
			cancelCh = nil
			d.mu.Lock()
			d.cancelled = true
			d.mu.Unlock()
			d.logf("cancel requested: SIGTERM, then SIGKILL after %s", grace)
			d.step("cancelling")
			be.Cancel(grace)
		case <-tick.C:
			// SPEC B5: the limit is checked every second, wherever the run is.
			if wall > 0 && !d.timedOut && time.Since(started) > wall {
				d.timedOut = true
				d.logf(msgWall+": stopping it", d.cfg.Training.MaxWallSeconds)
				d.step("stopping: over max_wall_seconds")
				be.Cancel(grace)
			}
		}
	}
	d.logf("training process ended: %s", describeOutcome(outcome))

	d.mu.Lock()
	res, fail, cancelled := d.result, d.failure, d.cancelled
	d.mu.Unlock()
	job.Result = res
	switch {
	case cancelled:
		return d.finish(rundir.StateCancelled, msgCancel, events.CodeCancelled)
	case d.timedOut:
		return d.finish(rundir.StateError, fmt.Sprintf(msgWall, d.cfg.Training.MaxWallSeconds), "timeout")
	case waitErr != nil:
		return d.finish(rundir.StateError, waitErr.Error(), "backend")
	case res == nil && outcome.Killed:
		return d.finish(rundir.StateError, msgKilled, events.CodeOutOfMemory)
	case res == nil && fail != nil:
		return d.finish(rundir.StateError, fail.Message, fail.Code)
	case res == nil:
		return d.finish(rundir.StateError, fmt.Sprintf(msgNoResult, describeOutcome(outcome)), "no_result")
	case outcome.ExitCode != 0:
		d.logf("warning: the training process sent a result but exited with %s", describeOutcome(outcome))
	}
	d.set(func(r *rundir.Record) { r.State = rundir.StateFetching; r.Step = "collecting the predictions" })
	if err := be.Collect(rctx, job); err != nil {
		return stepFailed(fmt.Errorf("collecting the results: %w", err), "")
	}
	uri := job.ArtifactURI
	if uri == "" {
		uri = "file://" + spec.Workdir
	}
	d.set(func(r *rundir.Record) { r.ArtifactURI = uri })
	d.mu.Lock()
	d.trained = true
	d.mu.Unlock()
	if info, _ := trainer.Lookup(spec.Trainer); info.NoPredictions {
		d.logf("%s writes no predictions: nothing to score or write back", spec.Trainer)
	} else if err := d.writeBack(m); err != nil {
		var se *StoreError
		if errors.As(err, &se) {
			return d.finish(rundir.StateError, "write-back: "+err.Error(), CodeStoreFailed)
		}
		return d.finish(rundir.StateError, "write-back: "+err.Error(), "writeback")
	}
	return d.finish(rundir.StateSuccess, "", "")
}

func describeOutcome(o backend.Outcome) string {
	if o.Signal != "" {
		return o.Signal
	}
	return fmt.Sprintf("exit status %d", o.ExitCode)
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

// onEvent appends an event to events.jsonl and follows it in run.json.
// Progress and metric events pass through a throttle (potato-events(5)):
// whatever rate a trainer sends them at, a few a second reach
// events.jsonl and run.json, and the last of each always.
func (d *dispatcher) onEvent(job *backend.Job, e events.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.finished {
		return
	}
	if d.throttle == nil {
		d.throttle = events.NewThrottle(events.Interval, d.writeEvent)
	}
	_ = d.throttle.Emit(e)
	switch e.Kind {
	case events.KindStatus:
		if s := e.String("step"); s != "" {
			d.set(func(r *rundir.Record) { r.Step = s })
		}
	case events.KindLog:
		if e.String("source") == agent.SourceAgent {
			// The remote agent's own line: "Submitted SLURM job 4242 (...)".
			d.logf("%s", e.String("msg"))
			break
		}
		d.logf("trainer %s: %s", e.String("level"), e.String("msg"))
	case events.KindError:
		var f events.Failure
		if e.Decode(&f) == nil {
			d.failure = &f
			d.logf("trainer error %s: %s", f.Code, f.Message)
			if f.InstallHint != "" {
				d.logf("hint: %s", f.InstallHint)
			}
		}
	case events.KindResult:
		var r events.Result
		if err := e.Decode(&r); err != nil {
			d.logf("ignoring a malformed result event: %v", err)
			return
		}
		d.result = &r
		d.set(func(rec *rundir.Record) {
			rec.ModelVersion = r.ModelVersion
			if r.Precision != "" {
				rec.Precision = r.Precision
			}
			if rec.Metrics == nil {
				rec.Metrics = map[string]any{}
			}
			for k, v := range r.Metrics {
				rec.Metrics[k] = v
			}
		})
	}
}

// writeEvent appends an event that passed the throttle to events.jsonl;
// a progress event is also the run's progress in run.json. The throttle
// calls it, one event at a time, from onEvent or, for an event it held,
// later on its own.
func (d *dispatcher) writeEvent(e events.Event) error {
	_, err := d.events.Write(e.Line())
	if err != nil {
		d.logf("cannot append to events.jsonl: %v", err)
	}
	if e.Kind == events.KindProgress {
		at := time.Now().UTC()
		p := rundir.Progress{Phase: e.String("phase"), Current: e.Number("current"), Total: e.Number("total"), EtaS: e.Number("eta_s"), At: &at}
		d.set(func(r *rundir.Record) { r.Progress = &p })
	}
	return err
}

// endEvents writes what the throttle holds; no event is written after.
// It is called with d.mu held, as the run's end is written.
func (d *dispatcher) endEvents() {
	if d.throttle != nil {
		_ = d.throttle.Close()
	}
}
