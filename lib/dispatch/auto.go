package dispatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"potato-training/lib/config"
	"potato-training/lib/project"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
)

// Files of potato-dispatch auto under training/.
const (
	// AutoStateFile records the last automatic run: its id, when it was
	// started and the annotation count it was started at.
	AutoStateFile = "auto.json"
	autoLockFile  = "auto.lock"
	// AutoLogFile has one line per decision of potato-dispatch auto and
	// one per end of an automatic run:
	// "2026-12-03T15:10:24Z skip: 3 new annotation(s) ...".
	AutoLogFile = "auto.log"
)

// The words of auto.log: what potato-dispatch auto decided, or how an
// automatic run ended (its state: success, error, cancelled).
const (
	AutoLogStart  = "start"  // a run was started
	AutoLogSkip   = "skip"   // nothing to do now: too soon, too few labels, a run is busy
	AutoLogConfig = "config" // the configuration stops automatic runs
	AutoLogError  = "error"  // the decision itself failed (unreadable annotations)
)

// Why potato-dispatch auto starts no run: one of these, filled in.
const (
	msgAutoOff      = "model_training.auto_retrain.enabled is not true in %s"
	msgTrainingOff  = "model_training.enabled is not true in %s"
	msgAutoBusy     = "run %s is %s: an automatic run waits until no run is queued or running"
	msgAutoInterval = "the last automatic run, %s, started %s ago: min_interval_s is %d"
	msgAutoFew      = "%d new annotation(s) since the last automatic run: update_frequency is %d"
	msgAutoLocked   = "another potato-dispatch auto is deciding for this project"
)

// AutoState is training/auto.json: the last run potato-dispatch auto
// started. Annotations is the count of labelled (item, schema) pairs of
// auto_retrain.schemas, over every annotator, when it was started.
type AutoState struct {
	RunID       string    `json:"run_id"`
	StartedAt   time.Time `json:"started_at"`
	Annotations int       `json:"annotations"`
}

// AutoPlan is potato-dispatch auto's decision (SPEC B10). When Start is
// false, Reason says why in one line; otherwise the run to start is
// Trainer, Schemas, Backend and Params with trigger auto, and Started
// must be called with its id. Close releases the plan's lock, which keeps
// two auto checks of a project from starting two runs.
type AutoPlan struct {
	Start  bool
	Reason string
	// Problem is set when Reason is a problem of the configuration
	// (auto_retrain or model_training not enabled, a trainer, schema or
	// backend that cannot run), which no number of new labels resolves;
	// otherwise no run is simply nothing to do now.
	Problem bool

	Trainer string
	Schemas []string
	Backend string // auto_retrain.backend, else model_training.backend, else local
	Params  map[string]string
	// Annotations is the count now; New the part of it since the last
	// automatic run.
	Annotations int
	New         int

	frequency  int
	configPath string
	logDir     string // training/, where auto.log is
	root       *rundir.Root
	lock       *os.File
}

// PlanAuto decides whether an automatic run starts now: auto_retrain is
// enabled, no run of the project is queued or running, min_interval_s
// has passed since the last automatic run, and at least update_frequency
// annotations were added since it.
//
// An annotation is one annotator's label for one item in one of
// auto_retrain.schemas, as their user_state.json holds it now: a new
// label adds one, a changed label none, a retracted one takes one away.
// Counts are compared with the count the last automatic run recorded in
// auto.json (0 before the first), so manual runs do not reset it.
//
// A configuration that stops automatic runs (see AutoPlan.Problem) is
// found before anything else. Each decision is appended to
// training/auto.log; a config too broken to load is logged there too
// when its output_annotation_dir can be read from it.
func PlanAuto(configPath string, now time.Time) (*AutoPlan, error) {
	cfg, err := LoadConfig(configPath)
	if err != nil {
		if c, rerr := config.ReadConfigFile(configPath); rerr == nil && c.AnnotationDir != "" {
			if _, serr := os.Stat(c.AnnotationDir); serr == nil {
				appendAutoLog(c.TrainingDir(), AutoLogConfig, "", err.Error())
			}
		}
		return nil, err
	}
	ar := cfg.Training.AutoRetrain
	p := &AutoPlan{configPath: configPath, logDir: cfg.TrainingDir(), Trainer: ar.Trainer, Schemas: ar.Schemas, Params: autoParams(ar.Params)}
	p.Backend = ar.Backend
	if p.Backend == "" {
		p.Backend = cfg.Training.Backend
	}
	if p.Backend == "" {
		p.Backend = config.LocalBackend.Name
	}
	if !ar.Enabled {
		return p.problem(msgAutoOff, configPath), nil
	}
	if !cfg.Training.Enabled {
		return p.problem(msgTrainingOff, configPath), nil
	}
	// The run's own checks: a trainer, schemas and backend that can run.
	if _, err := check(cfg, &Options{Trainer: p.Trainer, Schemas: p.Schemas, Backend: p.Backend, Params: p.Params}); err != nil {
		return p.problem("model_training.auto_retrain: %v", err), nil
	}
	fail := func(err error) (*AutoPlan, error) {
		p.Close()
		p.log(AutoLogError, "", err.Error())
		return nil, err
	}
	if p.root, err = Root(cfg); err != nil {
		return fail(err)
	}
	p.lock, err = os.OpenFile(filepath.Join(p.root.Dir, autoLockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fail(err)
	}
	if err := syscall.Flock(int(p.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		p.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return p.no(msgAutoLocked), nil
		}
		return fail(fmt.Errorf("%s: %w", autoLockFile, err))
	}
	runs, err := p.root.List()
	if err != nil {
		return fail(err)
	}
	last, err := readAutoState(p.root)
	if err != nil {
		return fail(err)
	}
	for _, r := range runs {
		if !r.Finished && !r.Gone && !rundir.Finished(r.State) {
			return p.no(msgAutoBusy, r.RunID, r.State), nil
		}
		// A run started by hand with --trigger auto counts as well.
		if r.Trigger == "auto" && r.CreatedAt.After(last.StartedAt) {
			last.RunID, last.StartedAt = r.RunID, r.CreatedAt
		}
	}
	if wait := time.Duration(ar.MinIntervalS) * time.Second; last.RunID != "" && now.Sub(last.StartedAt) < wait {
		return p.no(msgAutoInterval, last.RunID, now.Sub(last.StartedAt).Truncate(time.Second), ar.MinIntervalS), nil
	}
	p.Annotations, err = countAnnotations(cfg, ar.Schemas)
	if err != nil {
		return fail(err)
	}
	p.New = max(p.Annotations-last.Annotations, 0)
	p.frequency = ar.UpdateFrequency
	if p.New < ar.UpdateFrequency {
		return p.no(msgAutoFew, p.New, ar.UpdateFrequency), nil
	}
	p.Start = true
	return p, nil
}

// no is a plan that starts nothing now (logged as skip).
func (p *AutoPlan) no(format string, args ...any) *AutoPlan {
	p.Close()
	p.Start, p.Reason = false, fmt.Sprintf(format, args...)
	p.log(AutoLogSkip, "", p.Reason)
	return p
}

// problem is a plan that the configuration stops (logged as config).
func (p *AutoPlan) problem(format string, args ...any) *AutoPlan {
	p.Close()
	p.Start, p.Problem, p.Reason = false, true, fmt.Sprintf(format, args...)
	p.log(AutoLogConfig, "", p.Reason)
	return p
}

func (p *AutoPlan) log(word, runID, msg string) { appendAutoLog(p.logDir, word, runID, msg) }

// Refused records in auto.log that the planned run was refused before it
// was recorded (err, exit code 2 or 1): a configuration problem when
// the exit code is 2.
func (p *AutoPlan) Refused(code int, err error) {
	word := AutoLogError
	if code == ExitUsage {
		word = AutoLogConfig
	}
	p.log(word, "", "the run was refused: "+err.Error())
}

// appendAutoLog appends one line to dir/auto.log: the UTC time, the word,
// the run id when there is one, and the message on one line. A log that
// cannot be written loses the line, never the decision.
func appendAutoLog(dir, word, runID, msg string) {
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(dir, AutoLogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	head := word
	if runID != "" {
		head += " " + runID
	}
	msg = strings.Join(strings.Fields(msg), " ")
	_, _ = fmt.Fprintf(f, "%s %s: %s\n", time.Now().UTC().Format(time.RFC3339), head, msg)
}

// Args are potato-dispatch's arguments for the run: "run CONFIG
// --trainer ... --trigger auto".
func (p *AutoPlan) Args() []string {
	args := []string{"run", p.configPath, "--trainer", p.Trainer, "--schemas", strings.Join(p.Schemas, ","), "--backend", p.Backend, "--trigger", "auto"}
	for _, k := range slices.Sorted(maps.Keys(p.Params)) {
		args = append(args, "--param", k+"="+p.Params[k])
	}
	return args
}

// Options are the planned run's options for Run: the plan's config,
// trainer, schemas, backend and params, with trigger auto.
func (p *AutoPlan) Options() Options {
	return Options{ConfigPath: p.configPath, Trainer: p.Trainer, Schemas: p.Schemas, Backend: p.Backend, Params: p.Params, Trigger: "auto"}
}

// Started records the run started for the plan in auto.json, and its
// start in auto.log.
func (p *AutoPlan) Started(runID string, at time.Time) error {
	if p.root == nil {
		return errors.New("no automatic run was planned")
	}
	p.log(AutoLogStart, runID, fmt.Sprintf("%d new annotation(s), update_frequency %d; trainer %s, schemas %s, backend %s",
		p.New, p.frequency, p.Trainer, strings.Join(p.Schemas, ","), p.Backend))
	return WriteAutoState(p.root, AutoState{RunID: runID, StartedAt: at.UTC(), Annotations: p.Annotations})
}

// WriteAutoState replaces auto.json of root's training directory, which
// it makes when missing.
func WriteAutoState(root *rundir.Root, st AutoState) error {
	if err := os.MkdirAll(root.Dir, 0o755); err != nil {
		return err
	}
	return rundir.WriteJSONFile(filepath.Join(root.Dir, AutoStateFile), st, 0o644)
}

// Close releases the lock.
func (p *AutoPlan) Close() {
	if p.lock != nil {
		p.lock.Close()
		p.lock = nil
	}
}

func readAutoState(root *rundir.Root) (AutoState, error) {
	var st AutoState
	path := filepath.Join(root.Dir, AutoStateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w (remove it to count annotations from 0)", path, err)
	}
	return st, nil
}

// countAnnotations counts the labelled (item, schema) pairs of schemas
// over every annotator.
func countAnnotations(cfg *config.Config, schemas []string) (int, error) {
	a, err := project.ReadAnnotations(cfg.AnnotationDir, cfg.Schemes)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil // nobody has annotated yet
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range a.ItemIDs() {
		for _, s := range schemas {
			n += len(a.Votes(id, s))
		}
	}
	return n, nil
}

// autoParams turns auto_retrain.params into --param values, as
// potato-validate checks them (trainer.ParamString).
func autoParams(m map[string]any) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = trainer.ParamString(v)
	}
	return out
}
