package agent

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/atomicfile"
	"potato-training/lib/events"
	"potato-training/lib/slurm"
	"potato-training/lib/trainer"
)

// The files of a SLURM job directory that the agent reads (SPEC M5).
const (
	jobScript    = "job.sh"
	jobEvents    = "events.jsonl"
	jobExitCode  = "exit_code"
	jobSlurmOut  = "slurm.out"
	defaultPollS = 10
)

// SourceAgent marks a log event the agent itself wrote, so the run log
// shows it as the agent's line, not as the trainer's.
const SourceAgent = "agent"

// agentLine is a log event of the agent's own.
func agentLine(msg string) events.Event {
	e := events.Log("info", msg)
	e.Fields["source"] = SourceAgent
	return e
}

// slurmJob is the scheduler's side of one run: the submitted job, its
// last known queue state, and the cancel sequence (M6).
type slurmJob struct {
	j    *job
	opt  slurm.Options
	dir  string
	env  []string // the environment of sbatch, squeue, scancel
	id   string
	poll time.Duration

	mu        sync.Mutex
	state     string // the last state squeue gave
	desc      string // the last state as the run log wrote it
	restarts  int    // scontrol's Restarts when last seen
	cancelled bool   // the agent asked for the cancel
	nudge     chan struct{}
	// spoke is true once the training process has written an event since
	// the job last started: its own steps then make the step line.
	spoke bool
	// staleOut is slurm.out when a requeue was last seen: an earlier
	// attempt's lines, which say nothing of how a later one ended.
	staleOut []byte
}

// slurmEnv is the agent's environment less its token, for the scheduler's
// commands: sbatch hands its environment to the job.
func slurmEnv() []string { return withoutToken(os.Environ()) }

// jobEnv are the variables job.sh sets for the training process: the
// device (the scheduler sets CUDA_VISIBLE_DEVICES from gres; no gres, no
// GPU; a trainer that uses no GPU hides the job's), the thread variables and the interpreter for Python trainers.
func jobEnv(o slurm.Options, spec *trainer.Spec, python string) []string {
	spec.Limits.Device = "cpu"
	if o.WithGPU() && trainer.UsesGPU(spec.Trainer) {
		spec.Limits.Device = "cuda"
	}
	if n := o.NumThreads; n > 0 {
		spec.Limits.NumThreads = n
	}
	env := trainer.LaunchEnv(spec)
	if python != "" {
		env = append(env, "POTATO_TRAINING_PYTHON="+python)
	}
	return env
}

// trainSLURM is train for an agent on a login node (M5): job.sh into the
// job directory, sbatch, then events.jsonl relayed as it grows and squeue
// polled until the job has left the queue. It returns the training
// process's exit code and, when the run did not end normally, why (a
// *failure).
func (j *job) trainSLURM(ctx context.Context, spec trainer.Spec, specPath string) (int, error) {
	o := *j.o.SLURM
	python := o.JobPython
	if python == "" {
		python = j.o.Python
	}
	env := jobEnv(o, &spec, python)
	if err := writeSpec(spec, specPath); err != nil {
		return -1, fail(agentproto.CodeFailed, err)
	}
	command, err := trainer.Argv(spec.Trainer, specPath, trainer.Programs{Worker: j.o.Worker, Python: python,
		ScriptDir: filepath.Join(j.o.Workdir, "trainers")})
	if err == nil {
		// job.sh runs the command in the job's directory (see train).
		command[0], err = ProgramPath(command[0])
	}
	if err != nil {
		return -1, fail(agentproto.CodeStartFailed, err)
	}
	// The backend's env that came on standard input joins slurm.json's.
	if len(j.o.Env) > 0 {
		o.Env = maps.Clone(o.Env)
		if o.Env == nil {
			o.Env = map[string]string{}
		}
		maps.Copy(o.Env, j.o.Env)
	}
	if len(o.Env) > 0 {
		envPath := filepath.Join(j.dir, slurm.EnvFile)
		if err := atomicfile.WriteFile(envPath, []byte(o.EnvScript()), 0o600); err != nil {
			return -1, fail(agentproto.CodeFailed, err)
		}
		// A requeued job reads it again: it goes once the job has left
		// the queue for good, or was never submitted.
		defer os.Remove(envPath)
	}
	if err := os.WriteFile(filepath.Join(j.dir, jobScript), []byte(o.Script(spec.RunID, j.dir, command, env)), 0o700); err != nil {
		return -1, fail(agentproto.CodeFailed, err)
	}
	// A previous attempt of the same run leaves nothing to misread.
	for _, f := range []string{jobEvents, jobExitCode, jobSlurmOut} {
		os.Remove(filepath.Join(j.dir, f))
	}
	poll := time.Duration(o.PollIntervalS) * time.Second
	if poll <= 0 {
		poll = defaultPollS * time.Second
	}
	sj := &slurmJob{j: j, opt: o, dir: j.dir, env: slurmEnv(), poll: poll, nudge: make(chan struct{}, 1)}

	j.mu.Lock()
	if j.cancel {
		j.mu.Unlock()
		return -1, failf(agentproto.CodeCancelled, "cancelled before the job was submitted")
	}
	j.mu.Unlock()
	args := o.SbatchArgs(spec.RunID, j.dir)
	out, stderr, err := sj.command(ctx, "sbatch", args...)
	if err != nil {
		return -1, failf(agentproto.CodeSubmitFailed, "sbatch: %s", commandError(err, stderr))
	}
	id, err := slurm.ParseSubmit(out)
	if err != nil {
		return -1, fail(agentproto.CodeSubmitFailed, err)
	}
	sj.id = id
	flags := strings.Join(o.Flags(), " ")
	if flags == "" {
		flags = "no options"
	}
	j.emit(agentLine(fmt.Sprintf("Submitted SLURM job %s (%s)", id, flags)))
	j.mu.Lock()
	j.sj = sj
	cancelled := j.cancel
	j.mu.Unlock()
	if cancelled {
		go sj.cancel(j.grace)
	}
	return sj.follow(ctx)
}

// command runs one of the scheduler's commands, bounded in time.
func (sj *slurmJob) command(ctx context.Context, name string, args ...string) ([]byte, []byte, error) {
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, name, args...)
	cmd.Dir = sj.dir
	cmd.Env = sj.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.Bytes(), stderr.Bytes(), err
}

func commandError(err error, stderr []byte) string {
	if msg := strings.TrimSpace(string(stderr)); msg != "" {
		lines := strings.Split(msg, "\n")
		return lines[len(lines)-1]
	}
	return err.Error()
}

// cancel is M6: a pending job gets a plain scancel; a running one
// scancel --full --signal=TERM, then a plain scancel after grace if it is
// still in the queue.
func (sj *slurmJob) cancel(grace time.Duration) {
	ctx := context.Background()
	sj.mu.Lock()
	sj.cancelled = true
	pending := sj.state == "" || sj.state == slurm.StatePending
	sj.mu.Unlock()
	// The last poll may be up to poll_interval_s old: ask the queue now.
	if out, _, err := sj.command(ctx, "squeue", slurm.SqueueArgs(sj.id)...); err == nil {
		if q, ok, _ := slurm.ParseSqueue(out, sj.id); ok {
			pending = q.State == slurm.StatePending
		}
	}
	if pending {
		sj.j.emit(agentLine(fmt.Sprintf("cancelling SLURM job %s: scancel", sj.id)))
		if _, stderr, err := sj.command(ctx, "scancel", sj.id); err != nil {
			sj.j.emit(agentLine(fmt.Sprintf("warning: scancel %s: %s", sj.id, commandError(err, stderr))))
		}
		sj.poke()
		return
	}
	sj.j.emit(agentLine(fmt.Sprintf("cancelling SLURM job %s: scancel --full --signal=TERM, then scancel after %s", sj.id, grace)))
	if _, stderr, err := sj.command(ctx, "scancel", "--full", "--signal=TERM", sj.id); err != nil {
		sj.j.emit(agentLine(fmt.Sprintf("warning: scancel --full --signal=TERM %s: %s", sj.id, commandError(err, stderr))))
	}
	sj.poke()
	time.Sleep(grace)
	if out, _, err := sj.command(ctx, "squeue", slurm.SqueueArgs(sj.id)...); err == nil {
		if q, ok, _ := slurm.ParseSqueue(out, sj.id); !ok || !slurm.Active(q.State) {
			return
		}
	}
	if _, stderr, err := sj.command(ctx, "scancel", sj.id); err != nil {
		sj.j.emit(agentLine(fmt.Sprintf("warning: scancel %s: %s", sj.id, commandError(err, stderr))))
	}
	sj.poke()
}

func (sj *slurmJob) poke() {
	select {
	case sj.nudge <- struct{}{}:
	default:
	}
}
