// Package local is the backend that always exists: the training process
// runs as a subprocess of the dispatch, on the annotation server (SPEC
// section 4).
package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"potato-training/lib/backend"
	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/gpu"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
	"potato-training/lib/trainer/calibrate"
	"potato-training/lib/writeback"
)

// Backend runs the training process here.
type Backend struct {
	// Probe is how the local device is found; tests set a fake nvidia-smi.
	Probe gpu.Probe
}

// New returns a local backend.
func New() *Backend { return &Backend{} }

// execution is one local run.
type execution struct {
	run   backend.Run
	spec  trainer.Spec
	proc  *trainer.Process
	files []*os.File
}

// Prepare picks the device (SPEC L1): a requested device that is absent is
// replaced, with a warning in the run log. A trainer that uses no GPU runs
// on the CPU, whatever model_training.device says.
func (b *Backend) Prepare(ctx context.Context, run backend.Run) (backend.Execution, error) {
	dev, err := Device(ctx, run.Config, run.Spec.Trainer, b.Probe, func(w string) { run.Sink.Logf("warning: %s", w) })
	if err != nil {
		return nil, err
	}
	e := &execution{run: run, spec: run.Spec}
	e.spec.Limits.Device = dev.String()
	e.spec.Params = calibrateParams(run.Config, e.spec)
	if trainer.UsesGPU(run.Spec.Trainer) {
		run.Sink.Logf("device: %s", dev.Describe())
	} else {
		run.Sink.Logf("device: %s (%s uses no GPU)", dev.Describe(), run.Spec.Trainer)
	}
	return e, nil
}

// Device is the device a local run of trainerName gets: the CPU for a
// trainer that uses no GPU, else model_training.device resolved, its
// warnings passed to warn. potato-check(1) reports the same.
func Device(ctx context.Context, cfg *config.Config, trainerName string, probe gpu.Probe, warn func(string)) (gpu.Device, error) {
	if !trainer.UsesGPU(trainerName) {
		return gpu.CPU(probe), nil
	}
	dev, warnings, err := gpu.LocalDevice(ctx, cfg.Training.Device, probe)
	for _, w := range warnings {
		warn(w)
	}
	return dev, err
}

func (e *execution) Spec() trainer.Spec { return e.spec }

// PythonEnv names the interpreter of local runs of Python trainers when
// model_training.python does not (trainer.PythonEnv).
const PythonEnv = trainer.PythonEnv

// command is the training process's command line (trainer.Argv). A Python
// trainer's script is written into the run directory, so the run keeps the
// exact script that ran; its interpreter is the config's (trainer.
// LocalPythonOf), and the run log names it.
func (e *execution) command() (string, []string, error) {
	name := e.spec.Trainer
	if path, ok := strings.CutPrefix(name, trainer.ExecPrefix); ok {
		abs, err := filepath.Abs(path)
		if err != nil {
			return "", nil, err
		}
		name = trainer.ExecName(abs)
	}
	progs := trainer.Programs{ScriptDir: e.run.Dir.Dir}
	info, known := trainer.Lookup(name)
	if !known || info.Builtin {
		agent, err := trainer.FindProgram("potato-agent")
		if err != nil && !trainer.IsExec(name) {
			return "", nil, err
		}
		progs.Worker = agent
	}
	if known && !info.Builtin {
		py := trainer.LocalPythonOf(e.run.Config)
		path, err := py.Find()
		if err != nil {
			return "", nil, fmt.Errorf("the interpreter of trainer %s: %w", e.spec.Trainer, err)
		}
		progs.Python = path
		e.run.Sink.Logf("python: %s", py.Describe())
	}
	argv, err := trainer.Argv(name, e.run.SpecPath, progs)
	if err != nil {
		return "", nil, err
	}
	return argv[0], argv[1:], nil
}

// calibrateParams gives decision-calibrate what it reads on this machine:
// Potato's store and the project its rows are keyed by (SPEC B4). Values
// the run was given are kept; the run's map is not changed.
func calibrateParams(cfg *config.Config, spec trainer.Spec) map[string]string {
	info, ok := trainer.Lookup(spec.Trainer)
	if !ok || !info.LocalOnly {
		return spec.Params
	}
	p := make(map[string]string, len(spec.Params)+2)
	maps.Copy(p, spec.Params)
	if p[calibrate.ParamStore] == "" {
		p[calibrate.ParamStore] = writeback.StorePath(cfg)
	}
	if p[calibrate.ParamProject] == "" {
		p[calibrate.ParamProject] = cfg.TaskName
	}
	return p
}

// Start runs the process in a new process group under the run directory,
// with max_ram_mb applied as RLIMIT_AS before exec (SPEC L3).
func (e *execution) Start(ctx context.Context) (backend.Started, error) {
	path, args, err := e.command()
	if err != nil {
		return backend.Started{}, err
	}
	if mb := e.run.Config.Training.MaxRAMMB; mb > 0 {
		agent, err := trainer.FindProgram("potato-agent")
		if err != nil {
			return backend.Started{}, err
		}
		args = append([]string{"exec", "--max-ram-mb", strconv.Itoa(mb), "--", path}, args...)
		path = agent
	}
	stdout, err := os.OpenFile(e.run.Dir.Path(rundir.StdoutFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return backend.Started{}, err
	}
	stderr, err := os.OpenFile(e.run.Dir.Path(rundir.StderrFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		stdout.Close()
		return backend.Started{}, err
	}
	e.files = []*os.File{stdout, stderr}
	// The spec the process reads names the device as its environment
	// shows it (cuda:0 once only GPU 1 is visible); run.json keeps the
	// machine's own numbering, as on every backend.
	spec := e.spec
	env := trainer.Environ(trainer.LaunchEnv(&spec)...)
	if err := spec.Write(e.run.SpecPath); err != nil {
		e.closeFiles()
		return backend.Started{}, err
	}
	p, err := trainer.Start(trainer.Command{Path: path, Args: args, Dir: e.run.Dir.Dir, Env: env, Stderr: stderr, RawStdout: stdout})
	if err != nil {
		e.closeFiles()
		return backend.Started{}, fmt.Errorf("cannot start the training process: %w", err)
	}
	e.proc = p
	e.run.Sink.Logf("started %s (pid %d)", strings.Join(append([]string{filepath.Base(path)}, args...), " "), p.PID())
	return backend.Started{}, nil
}

// Relay passes the events on until the process has ended.
func (e *execution) Relay(ctx context.Context) (backend.Outcome, error) {
	go e.proc.Relay(e.run.Sink.Event, e.run.Sink.TrainerLine)
	<-e.proc.Done()
	e.closeFiles()
	ex := e.proc.Exit()
	out := backend.Outcome{ExitCode: ex.Code}
	if ex.Signal != 0 {
		out.Signal = ex.String()
		out.Killed = ex.Signal == syscall.SIGKILL
	}
	return out, nil
}

func (e *execution) closeFiles() {
	for _, f := range e.files {
		f.Close()
	}
	e.files = nil
}

// Cancel sends SIGTERM to the process group, SIGKILL after grace.
func (e *execution) Cancel(ctx context.Context, grace time.Duration) error {
	if e.proc != nil {
		e.proc.Terminate(grace)
	}
	return nil
}

// Collect moves the predictions the trainer wrote into the run directory;
// the model is already in artifacts/, the trainer's workdir.
func (e *execution) Collect(ctx context.Context, res events.Result) (backend.Collected, error) {
	src := trainer.PredictionsPath(e.spec.Workdir, res.PredictionsFile)
	dst := e.run.Dir.Path(rundir.PredictionsFile)
	if src == dst {
		return backend.Collected{}, nil
	}
	err := os.Rename(src, dst)
	if errors.Is(err, fs.ErrNotExist) && res.PredictionsFile == "" && res.NPredictions == 0 {
		return backend.Collected{}, nil // a trainer that predicts nothing (decision-calibrate)
	}
	return backend.Collected{}, err
}

// Close has nothing to release once the process has been reaped; it
// closes the output files of a process that never started.
func (e *execution) Close() error {
	e.closeFiles()
	return nil
}
