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
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"potato-training/internal/cli"
	"potato-training/lib/backend"
	"potato-training/lib/gpu"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
	"potato-training/lib/trainer/calibrate"
	"potato-training/lib/writeback"
)

// ExecPrefix marks a trainer that is a program: "exec:/path/to/trainer"
// runs that program with --spec spec.json.
const ExecPrefix = trainer.ExecPrefix

// Backend runs the training process here.
type Backend struct {
	// Probe is how the local device is found; tests set a fake nvidia-smi.
	Probe gpu.Probe

	device gpu.Device
	proc   *trainer.Process
	files  []*os.File
	job    *backend.Job
}

// New returns a local backend.
func New() *Backend { return &Backend{} }

// Prepare picks the device (SPEC L1): a requested device that is absent is
// replaced, with a warning in the run log.
func (b *Backend) Prepare(ctx context.Context, job *backend.Job) error {
	b.job = job
	dev, warnings, err := gpu.LocalDevice(ctx, job.Config.Training.Device, b.Probe)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		job.Logf("warning: %s", w)
	}
	b.device = dev
	job.Spec.Limits.Device = dev.String()
	calibrateParams(job)
	job.Logf("device: %s", dev.Describe())
	return nil
}

// PythonEnv names the interpreter of local runs of Python trainers;
// python3 on PATH when unset. potato-agent's --python reads it too.
const PythonEnv = "POTATO_TRAINING_PYTHON"

// command is the training process's command line (trainer.Argv). A Python
// trainer's script is written into the run directory, so the run keeps the
// exact script that ran.
func (b *Backend) command(job *backend.Job) (string, []string, error) {
	name := job.Spec.Trainer
	if path, ok := strings.CutPrefix(name, ExecPrefix); ok {
		abs, err := filepath.Abs(path)
		if err != nil {
			return "", nil, err
		}
		name = ExecPrefix + abs
	}
	progs := trainer.Programs{Python: os.Getenv(PythonEnv), ScriptDir: job.Run.Dir}
	if info, ok := trainer.Lookup(name); !ok || info.Builtin {
		agent, err := cli.FindSibling("potato-agent")
		if err != nil && !strings.HasPrefix(name, ExecPrefix) {
			return "", nil, err
		}
		progs.Worker = agent
	}
	if progs.Python == "" {
		progs.Python = "python3"
	}
	argv, err := trainer.Argv(name, job.SpecPath, progs)
	if err != nil {
		return "", nil, err
	}
	path := argv[0]
	if !strings.Contains(path, "/") {
		if path, err = exec.LookPath(path); err != nil {
			return "", nil, fmt.Errorf("%s, the interpreter for trainer %s, was not found on PATH (set %s to choose one)", argv[0], job.Spec.Trainer, PythonEnv)
		}
	}
	return path, argv[1:], nil
}

// calibrateParams gives decision-calibrate what it reads on this machine:
// Potato's store and the project its rows are keyed by (SPEC B4). Values
// the run was given are kept.
func calibrateParams(job *backend.Job) {
	info, ok := trainer.Lookup(job.Spec.Trainer)
	if !ok || !info.LocalOnly {
		return
	}
	p := make(map[string]string, len(job.Spec.Params)+2)
	maps.Copy(p, job.Spec.Params)
	if p[calibrate.ParamStore] == "" {
		p[calibrate.ParamStore] = filepath.Join(job.Config.TaskDir, writeback.StoreName)
	}
	if p[calibrate.ParamProject] == "" {
		p[calibrate.ParamProject] = job.Config.TaskName
	}
	job.Spec.Params = p
}

// Start runs the process in a new process group under the run directory,
// with max_ram_mb applied as RLIMIT_AS before exec (SPEC L3).
func (b *Backend) Start(ctx context.Context, job *backend.Job) error {
	path, args, err := b.command(job)
	if err != nil {
		return err
	}
	if mb := job.Config.Training.MaxRAMMB; mb > 0 {
		agent, err := cli.FindSibling("potato-agent")
		if err != nil {
			return err
		}
		args = append([]string{"exec", "--max-ram-mb", strconv.Itoa(mb), "--", path}, args...)
		path = agent
	}
	stdout, err := os.OpenFile(job.Run.Path(rundir.StdoutFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	stderr, err := os.OpenFile(job.Run.Path(rundir.StderrFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		stdout.Close()
		return err
	}
	b.files = []*os.File{stdout, stderr}
	env := trainer.Environ(job.Config.Training.NumThreads, b.device.Env()...)
	env = append(env, "POTATO_TRAINING_DEVICE="+b.device.String())
	p, err := trainer.Start(trainer.Command{Path: path, Args: args, Dir: job.Run.Dir, Env: env, Stderr: stderr, RawStdout: stdout})
	if err != nil {
		b.closeFiles()
		return fmt.Errorf("cannot start the training process: %w", err)
	}
	b.proc = p
	job.Logf("started %s (pid %d)", strings.Join(append([]string{filepath.Base(path)}, args...), " "), p.PID())
	return nil
}

// Wait relays events until the process has ended.
func (b *Backend) Wait(ctx context.Context) (backend.Outcome, error) {
	go b.proc.Relay(b.job.Event, func(line string) {
		if len(line) > 4096 {
			line = line[:4096] + "..."
		}
		b.job.Logf("trainer: %s", line)
	})
	<-b.proc.Done()
	b.closeFiles()
	ex := b.proc.Exit()
	out := backend.Outcome{ExitCode: ex.Code}
	if ex.Signal != 0 {
		out.Signal = ex.String()
		out.Killed = ex.Signal == syscall.SIGKILL
	}
	return out, nil
}

func (b *Backend) closeFiles() {
	for _, f := range b.files {
		f.Close()
	}
	b.files = nil
}

// Cancel sends SIGTERM to the process group, SIGKILL after grace.
func (b *Backend) Cancel(grace time.Duration) {
	if b.proc != nil {
		b.proc.Terminate(grace)
	}
}

// Collect moves the predictions the trainer wrote into the run directory;
// the model is already in artifacts/, the trainer's workdir.
func (b *Backend) Collect(ctx context.Context, job *backend.Job) error {
	if job.Result == nil {
		return nil
	}
	src := trainer.PredictionsPath(job.Spec.Workdir, job.Result.PredictionsFile)
	dst := job.Run.Path(rundir.PredictionsFile)
	if src == dst {
		return nil
	}
	err := os.Rename(src, dst)
	if errors.Is(err, fs.ErrNotExist) && job.Result.PredictionsFile == "" && job.Result.NPredictions == 0 {
		return nil // a trainer that predicts nothing (decision-calibrate)
	}
	return err
}
