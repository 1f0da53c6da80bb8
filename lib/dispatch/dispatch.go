// Package dispatch takes one run from start to finish, as
// potato-dispatch(1) describes: the record and the queue, the bundle and
// the spec, the backend, the limits, cancel, and write-back.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"potato-training/lib/backend"
	agentbackend "potato-training/lib/backend/agent"
	"potato-training/lib/backend/local"
	slurmbackend "potato-training/lib/backend/slurm"
	sshbackend "potato-training/lib/backend/ssh"
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
	// Curve, when set, makes the run a learning curve's: its points, and
	// CurveDraws the nested draws at each (0: the trainer's default).
	Curve      []float64
	CurveDraws int
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
		return nil, usagef("no backend %q in %s: the backends are %s", name, cfg.Path, strings.Join(cfg.BackendNames(), ", "))
	}
	if !cfg.Training.Enabled {
		return nil, usagef("model_training.enabled is not true in %s: set it to train this project", cfg.Path)
	}
	if opt.Trainer == "" {
		return nil, usagef("no trainer given: use --trainer with one of %s", trainer.Choices())
	}
	// A program (exec:) is one of the machine that runs the training
	// process, with parameters of its own: on an agent backend, the agent
	// runs it only if its --allow-exec names it, since the server has no
	// say over what an agent's owner runs.
	if !trainer.IsExec(opt.Trainer) {
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
	if err := checkCurve(opt); err != nil {
		return nil, err
	}
	if len(opt.Schemas) == 0 {
		return nil, usagef("no schema given: use --schemas NAME[,NAME]")
	}
	for _, s := range opt.Schemas {
		sc, ok := cfg.Scheme(s)
		if !ok {
			return nil, usagef("schema %q is not in annotation_schemes of %s", s, cfg.Path)
		}
		if trainer.IsExec(opt.Trainer) {
			continue
		}
		if info, _ := trainer.Lookup(opt.Trainer); sc.Kind == config.KindSpan && !slices.Contains(info.Kinds, string(sc.Kind)) {
			return nil, usagef("schema %s is a span schema: trainer %s learns %s schemas; hf-span learns span schemas", s, opt.Trainer, strings.Join(info.Kinds, " and "))
		} else if !slices.Contains(info.Kinds, string(sc.Kind)) {
			return nil, usagef("schema %s is a %s schema: the trainers learn radio, select and multiselect schemas, and hf-span span schemas", s, sc.AnnotationType)
		}
	}
	switch b.Type {
	case config.TypeLocal, config.TypeSSH, config.TypeSLURM, config.TypeAgent:
	default:
		return nil, usagef("backend %s is of type %s, which this version of potato-dispatch cannot run yet", b.Name, b.Type)
	}
	return b, nil
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
		Trigger: opt.Trigger, Step: "waiting in the queue", Host: host, Curve: newCurve(cfg, opt.Curve, opt.CurveDraws),
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
	d.budget.limit = int64(max(cfg.Training.MaxEventsMB, 0)) << 20
	// The run is in Potato's store from its start, so that Potato's page
	// shows it; a store that cannot be written stops it before any work.
	d.stored = potatoStatus(rundir.StateQueued)
	if err := recordRun(cfg, root, run.Record()); err != nil {
		return d.finish(failed(err.Error(), CodeStoreFailed)), nil
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
	series    seriesBound      // the metric series kept
	budget    budget           // max_events_mb
	result    *events.Result
	failure   *events.Failure
	cancelled bool
	timedOut  bool
	// claimed is set when an agent claimed a run that was queued for one;
	// claimMu orders that claim with the end of the start.
	claimMu sync.Mutex
	claimed bool
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

// CodeDispatchFailed is the error_code of a failure that has no code of
// its own (a backend that could not start the run, a file that could not
// be written), so that Potato's page tells every failure by a code.
const CodeDispatchFailed = "dispatch_failed"
