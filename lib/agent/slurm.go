package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

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

// ExitCodeWait is how long the agent waits for exit_code once the job has
// left the queue: on a shared file system the compute node's last write
// may reach the login node late (NFS attribute caching). The environment
// variable POTATO_TRAINING_EXIT_CODE_WAIT_S overrides it.
var ExitCodeWait = 30 * time.Second

func exitCodeWait() time.Duration {
	if v, err := strconv.Atoi(os.Getenv("POTATO_TRAINING_EXIT_CODE_WAIT_S")); err == nil && v >= 0 {
		return time.Duration(v) * time.Second
	}
	return ExitCodeWait
}

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
	var env []string
	if o.WithGPU() && trainer.UsesGPU(spec.Trainer) {
		spec.Limits.Device = "cuda"
	} else {
		spec.Limits.Device = "cpu"
		env = append(env, "CUDA_VISIBLE_DEVICES=")
	}
	env = append(env, "POTATO_TRAINING_DEVICE="+spec.Limits.Device)
	if n := o.NumThreads; n > 0 {
		spec.Limits.NumThreads = n
		for _, k := range []string{"MKL_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"} {
			env = append(env, k+"="+strconv.Itoa(n))
		}
	}
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

// follow relays events.jsonl and watches the queue until the job has
// left it, then reads how it ended.
func (sj *slurmJob) follow(ctx context.Context) (int, error) {
	j := sj.j
	// The scheduler's commands outlive ctx: a stopped agent still cancels
	// its job, so the GPU is released (M6).
	bg := context.WithoutCancel(ctx)
	t := &tailer{path: filepath.Join(sj.dir, jobEvents), emit: func(e events.Event) {
		sj.mu.Lock()
		sj.spoke = true
		sj.mu.Unlock()
		j.emit(e)
	}, raw: func(l string) {
		j.mu.Lock()
		j.raw = append(j.raw, []byte(l))
		j.mu.Unlock()
	}}
	// POTATO_TRAINING_NO_INOTIFY leaves the size poll alone, for a file
	// system whose inotify misbehaves.
	var w *fsnotify.Watcher
	err := errors.New("turned off")
	if os.Getenv("POTATO_TRAINING_NO_INOTIFY") == "" {
		w, err = fsnotify.NewWatcher()
	}
	var watch <-chan fsnotify.Event
	var watchErr <-chan error
	if err == nil {
		defer w.Close()
		if w.Add(sj.dir) == nil {
			watch, watchErr = w.Events, w.Errors
		}
	}
	// A size poll as well: inotify does not see writes that another NFS
	// client (the compute node) makes.
	fast := time.NewTicker(time.Second)
	defer fast.Stop()
	queue := time.NewTimer(0)
	defer queue.Stop()
	lost := j.o.Lost
	done := ctx.Done()
	for {
		select {
		case ev := <-watch:
			switch filepath.Base(ev.Name) {
			case jobEvents:
				t.read()
			case jobExitCode:
				// The job is ending: look at the queue now, not at the
				// next poll.
				queue.Reset(0)
			}
			continue
		case <-watchErr:
			// An overflowed queue loses events: read what is there.
			t.read()
			continue
		case <-fast.C:
			t.read()
			continue
		case <-sj.nudge:
			queue.Reset(0)
			continue
		case <-lost:
			lost = nil
			j.stop(agentproto.CodeLostSession, LostSession, j.grace)
			continue
		case <-done:
			done = nil
			j.stop(agentproto.CodeAgentStopped, "the agent was stopped", j.grace)
			continue
		case <-queue.C:
		}
		active, err := sj.check(bg)
		if err != nil {
			j.emit(agentLine(fmt.Sprintf("warning: squeue: %v", err)))
		}
		if !active {
			break
		}
		next := sj.poll
		if _, err := os.Stat(filepath.Join(sj.dir, jobExitCode)); err == nil && next > time.Second {
			next = time.Second
		}
		queue.Reset(next)
	}
	code, why := sj.ended(bg, t)
	t.read()
	t.flush()
	return code, why
}

// check runs squeue once and logs a change of the job's queue state; it
// reports whether the job is still in the queue.
func (sj *slurmJob) check(ctx context.Context) (bool, error) {
	out, stderr, err := sj.command(ctx, "squeue", slurm.SqueueArgs(sj.id)...)
	if err != nil {
		if slurm.InvalidJob(stderr) {
			return false, nil
		}
		// The scheduler may be briefly unreachable: keep waiting.
		return true, errors.New(commandError(err, stderr))
	}
	q, ok, err := slurm.ParseSqueue(out, sj.id)
	if err != nil {
		return true, err
	}
	if !ok || !slurm.Active(q.State) {
		return false, nil
	}
	sj.mu.Lock()
	sj.state = q.State
	if q.State == slurm.StatePending {
		// Requeued or not started yet: the queue has the step line until
		// the training process speaks again.
		sj.spoke = false
	}
	spoke := sj.spoke
	sj.mu.Unlock()
	desc := q.Describe()
	if desc != sj.lastDesc() {
		sj.setDesc(desc)
		line := fmt.Sprintf("SLURM job %s: %s", sj.id, desc)
		if q.State == slurm.StatePending {
			// A job that ran may be back: scontrol's Restarts says so even
			// when it ran between two polls.
			line += sj.requeued(ctx)
		}
		sj.j.emit(agentLine(line))
		state := "queued"
		if q.State == slurm.StateRunning {
			state = "running"
		}
		// A job seen running only after its training process has
		// reported keeps the process's step line; the run log has the
		// queue's word.
		if !(q.State == slurm.StateRunning && spoke) {
			sj.j.emit(events.Status(state, fmt.Sprintf("SLURM job %s: %s", sj.id, desc)))
		}
	}
	return true, nil
}

// requeued says, for a pending job, whether the scheduler requeued it
// (after a node failure or a preemption) since the last look: then it
// starts again from the beginning and the run keeps waiting. "" when not.
func (sj *slurmJob) requeued(ctx context.Context) string {
	out, _, err := sj.command(ctx, "scontrol", slurm.ScontrolArgs(sj.id)...)
	if err != nil {
		return ""
	}
	job, err := slurm.ParseScontrol(out)
	sj.mu.Lock()
	seen := sj.restarts
	if err == nil && job.Restarts > seen {
		sj.restarts = job.Restarts
	}
	sj.mu.Unlock()
	if err != nil || job.Restarts <= seen {
		return ""
	}
	restarts := fmt.Sprintf(", Restarts=%d", job.Restarts)
	why := ""
	if b, err := os.ReadFile(filepath.Join(sj.dir, jobSlurmOut)); err == nil {
		sj.mu.Lock()
		sj.staleOut = b
		sj.mu.Unlock()
		switch slurm.Reason("", b, false) {
		case slurm.ReasonNodeFail:
			why = " after a node failure"
		case slurm.ReasonPreempted:
			why = " after a preemption"
		}
	}
	return fmt.Sprintf(": requeued by the scheduler%s%s; it will run again from the start", why, restarts)
}

func (sj *slurmJob) lastDesc() string {
	sj.mu.Lock()
	defer sj.mu.Unlock()
	return sj.desc
}

func (sj *slurmJob) setDesc(d string) {
	sj.mu.Lock()
	sj.desc = d
	sj.mu.Unlock()
}

// ended reads how a job that has left the queue ended: scontrol's state
// and slurm.out for a scheduler's reason (M7), then exit_code, which the
// agent waits for but never guesses.
func (sj *slurmJob) ended(ctx context.Context, t *tailer) (int, error) {
	state := ""
	if out, _, err := sj.command(ctx, "scontrol", slurm.ScontrolArgs(sj.id)...); err == nil {
		if job, err := slurm.ParseScontrol(out); err == nil {
			state = job.State
			sj.j.emit(agentLine(fmt.Sprintf("SLURM job %s: %s (ExitCode=%d:%d, RunTime=%s)", sj.id, job.State, job.ExitCode, job.Signal, job.RunTime)))
		}
	}
	slurmOut, _ := os.ReadFile(filepath.Join(sj.dir, jobSlurmOut))
	sj.mu.Lock()
	cancelled := sj.cancelled
	slurmOut = thisAttempt(slurmOut, sj.staleOut)
	sj.mu.Unlock()
	if r := slurm.Reason(state, slurmOut, cancelled); r != "" {
		return -1, fail(reasonCode[r], errors.New(slurm.Ended(sj.id, r)))
	}
	wait := exitCodeWait()
	deadline := time.Now().Add(wait)
	for {
		b, err := os.ReadFile(filepath.Join(sj.dir, jobExitCode))
		if err == nil {
			n, perr := strconv.Atoi(strings.TrimSpace(string(b)))
			if perr != nil {
				return -1, failf(agentproto.CodeBadExitCode, "SLURM job %s wrote exit_code %q, not a number", sj.id, strings.TrimSpace(string(b)))
			}
			if n > 128 && n < 160 {
				sig := syscall.Signal(n - 128)
				if cancelled {
					// The agent's own cancel: scancel --full --signal=TERM
					// reaches job.sh too, whose wait for the training
					// process then says 143 when the process has already
					// exited by the time job.sh looks again.
					f := sj.stopped()
					f.signal = int(sig)
					return -1, f
				}
				return -1, &failure{code: agentproto.CodeKilledBySignal, signal: int(sig),
					err: errors.New(trainer.Exit{Code: -1, Signal: sig}.String())}
			}
			if cancelled {
				return n, sj.stopped()
			}
			return n, nil
		}
		if time.Now().After(deadline) {
			break
		}
		t.read()
		time.Sleep(250 * time.Millisecond)
	}
	if cancelled {
		return -1, sj.stopped()
	}
	if state == "" {
		state = "state unknown to scontrol"
	}
	return -1, fail(agentproto.CodeNoExitCode, errors.New(slurm.NoExitCode(sj.id, state, sj.dir, wait)))
}

// thisAttempt is what the last attempt of a requeued job wrote into
// slurm.out, given the file as it was when the requeue was seen. SLURM
// truncates the file when the job starts again (appends to it with
// --open-mode=append); a job cancelled while it waits to start again has
// only the earlier attempt's "DUE TO PREEMPTION", which is not its end.
func thisAttempt(out, stale []byte) []byte {
	if len(stale) > 0 && bytes.HasPrefix(out, stale) {
		return out[len(stale):]
	}
	return out
}

// reasonCode is the result's code of each reason the scheduler ended a
// job for (slurm.Reason).
var reasonCode = map[string]string{
	slurm.ReasonTimeLimit: agentproto.CodeSLURMTimeLimit,
	slurm.ReasonNodeFail:  agentproto.CodeSLURMNodeFail,
	slurm.ReasonPreempted: agentproto.CodeSLURMPreempted,
	slurm.ReasonOOM:       agentproto.CodeSLURMOutOfMemory,
	slurm.ReasonCancelled: agentproto.CodeSLURMCancelled,
	slurm.ReasonBootFail:  agentproto.CodeSLURMBootFail,
	slurm.ReasonDeadline:  agentproto.CodeSLURMDeadline,
}

// stopped is the result's error of a job the agent cancelled.
func (sj *slurmJob) stopped() *failure {
	sj.j.mu.Lock()
	why, code := sj.j.why, sj.j.whyCode
	sj.j.mu.Unlock()
	if why == "" {
		why, code = "cancel requested", agentproto.CodeCancelled
	}
	return &failure{code: code, err: errors.New(why + ": it cancelled SLURM job " + sj.id)}
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

// tailer reads events.jsonl as it grows: whole lines only, from where it
// stopped; a file that shrank (a requeued job starting again) is read
// from the start.
type tailer struct {
	path    string
	off     int64
	partial []byte
	// over is set while the rest of a line longer than events.MaxLine
	// is skipped: its first MaxLine bytes went on as log.
	over bool
	emit func(events.Event)
	raw  func(string)
	mu   sync.Mutex
}

func (t *tailer) read() {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, err := os.Open(t.path)
	if err != nil {
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return
	}
	if st.Size() < t.off {
		t.off, t.partial, t.over = 0, nil, false
	}
	if st.Size() == t.off {
		return
	}
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return
	}
	r := bufio.NewReaderSize(io.LimitReader(f, st.Size()-t.off), 64<<10)
	// What is held of a line is bounded by MaxLine and the buffer, however
	// long the line is.
	for {
		chunk, err := r.ReadSlice('\n')
		t.off += int64(len(chunk))
		if !t.over {
			t.partial = append(t.partial, chunk...)
			if len(t.partial) > events.MaxLine {
				t.line(t.partial)
				t.partial, t.over = nil, true
			}
		}
		switch {
		case err == nil:
			if !t.over {
				t.line(t.partial)
			}
			t.partial, t.over = t.partial[:0], false
		case errors.Is(err, bufio.ErrBufferFull):
		default:
			// Not a whole line yet: what is held waits for the next read.
			return
		}
	}
}

// flush hands on a last line that lacks its newline.
func (t *tailer) flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.partial) > 0 && !t.over {
		t.line(t.partial)
	}
	t.partial, t.over = nil, false
}

func (t *tailer) line(b []byte) {
	b = bytes.TrimRight(b, "\r\n")
	if len(bytes.TrimSpace(b)) == 0 {
		return
	}
	if e, err := events.Parse(b); err == nil {
		t.emit(e)
		return
	}
	if len(b) > 4096 {
		b = b[:4096]
	}
	t.raw(string(b))
}
