// Following a submitted SLURM job: events.jsonl relayed and the queue
// polled until the job has left it, then how it ended (M7): the
// scheduler's state and reason, and exit_code, waited for but never
// guessed.

package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"potato-training/lib/agentproto"
	"potato-training/lib/events"
	"potato-training/lib/slurm"
	"potato-training/lib/trainer"
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
