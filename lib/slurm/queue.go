package slurm

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SqueueArgs ask squeue for one job, one line, fields split by '|':
// id, state, reason, nodes, time used, time limit. A job that has left
// the queue prints nothing.
func SqueueArgs(id string) []string {
	return []string{"-h", "-j", id, "-o", "%i|%T|%r|%N|%M|%l"}
}

// Queued is a job as squeue lists it.
type Queued struct {
	ID, State, Reason, Nodes, Used, Limit string
}

// ParseSqueue reads the output of SqueueArgs; ok is false when the job is
// not in the queue any more.
func ParseSqueue(out []byte, id string) (q Queued, ok bool, err error) {
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) < 6 {
			return q, false, fmt.Errorf("squeue printed %q, not the fields asked for", line)
		}
		// A job array or a requeued job may show more than one line; ours
		// is the line with our id.
		if jid, _, _ := strings.Cut(f[0], "_"); jid != id {
			continue
		}
		return Queued{ID: f[0], State: NormalState(f[1]), Reason: f[2], Nodes: f[3], Used: f[4], Limit: f[5]}, true, nil
	}
	return q, false, nil
}

// InvalidJob reports whether a squeue or scontrol error says the job is
// unknown (finished longer ago than MinJobAge, or never there).
func InvalidJob(stderr []byte) bool {
	return strings.Contains(string(stderr), "Invalid job id")
}

// Describe is a queue state as the run log writes it:
// "PENDING (Priority)", "RUNNING on node07".
func (q Queued) Describe() string {
	switch {
	case q.State == StateRunning && q.Nodes != "":
		return "RUNNING on " + q.Nodes
	case q.Reason != "" && q.Reason != "None" && q.Reason != "(null)":
		return q.State + " (" + q.Reason + ")"
	}
	return q.State
}

// States of a job, as squeue -o %T and scontrol's JobState write them.
const (
	StatePending     = "PENDING"
	StateRunning     = "RUNNING"
	StateCompleting  = "COMPLETING"
	StateCompleted   = "COMPLETED"
	StateFailed      = "FAILED"
	StateCancelled   = "CANCELLED"
	StateTimeout     = "TIMEOUT"
	StateNodeFail    = "NODE_FAIL"
	StatePreempted   = "PREEMPTED"
	StateOutOfMemory = "OUT_OF_MEMORY"
	StateBootFail    = "BOOT_FAIL"
	StateDeadline    = "DEADLINE"
)

// NormalState drops what SLURM adds to a state: "CANCELLED by 1000" is
// CANCELLED, and a trailing "+" (sacct's mark of more to say) goes.
func NormalState(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, ' '); i >= 0 {
		s = s[:i]
	}
	return strings.ToUpper(strings.TrimRight(s, "+"))
}

// Active reports whether a job in state s may still run or run again.
func Active(s string) bool {
	switch s {
	case StatePending, StateRunning, StateCompleting, "CONFIGURING", "SUSPENDED", "REQUEUED",
		"REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED":
		return true
	}
	return false
}

// Job is what scontrol show job says of a job.
type Job struct {
	ID       string
	State    string
	Reason   string
	Restarts int
	// ExitCode and Signal are the two halves of ExitCode=N:S.
	ExitCode int
	Signal   int
	NodeList string
	RunTime  string
	Fields   map[string]string
}

// ScontrolArgs ask scontrol for one job.
func ScontrolArgs(id string) []string { return []string{"show", "job", id} }

// ParseScontrol reads scontrol show job: Key=Value pairs split by white
// space over several lines. A value that holds spaces (a command line, a
// comment) continues until the next word that has an '='.
func ParseScontrol(out []byte) (Job, error) {
	fields := map[string]string{}
	last := ""
	for _, w := range strings.Fields(string(out)) {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" || strings.ContainsAny(k, "/,") {
			if last != "" {
				fields[last] += " " + w
			}
			continue
		}
		fields[k] = v
		last = k
	}
	j := Job{Fields: fields, ID: fields["JobId"], State: NormalState(fields["JobState"]), Reason: fields["Reason"],
		NodeList: fields["NodeList"], RunTime: fields["RunTime"]}
	if j.ID == "" || j.State == "" {
		return j, fmt.Errorf("scontrol printed no JobId and JobState")
	}
	j.Restarts, _ = strconv.Atoi(fields["Restarts"])
	if code, sig, ok := strings.Cut(fields["ExitCode"], ":"); ok {
		j.ExitCode, _ = strconv.Atoi(code)
		j.Signal, _ = strconv.Atoi(sig)
	}
	return j, nil
}

// Reasons a job ended before its training process finished (M7), as
// F9's sentence ends.
const (
	ReasonTimeLimit = "it reached its time limit"
	ReasonNodeFail  = "its node failed"
	ReasonPreempted = "it was preempted"
	ReasonOOM       = "it ran out of memory (raise mem)"
	ReasonCancelled = "it was cancelled from outside (scancel)"
	ReasonBootFail  = "its node failed to boot"
	ReasonDeadline  = "it reached its deadline"
)

// EndedPrefix starts every message of a job the scheduler ended.
const EndedPrefix = "SLURM job "

// Ended is F9: "SLURM job 4242 ended before the worker finished: it
// reached its time limit".
func Ended(id, reason string) string {
	return EndedPrefix + id + " ended before the worker finished: " + reason
}

// IsEnded reports whether msg is one of Ended's.
func IsEnded(msg string) bool {
	return strings.HasPrefix(msg, EndedPrefix) && strings.Contains(msg, " ended before the worker finished: ")
}

// NoExitCode is the failure of a job that left the queue without writing
// exit_code: its success is never guessed.
func NoExitCode(id, state, dir string, waited time.Duration) string {
	return fmt.Sprintf("%s%s left the queue (%s) but wrote no exit_code in %s within %s", EndedPrefix, id, state, dir, waited)
}

// Reason is why the scheduler ended a job, from its final state and the
// lines SLURM wrote into slurm.out; "" when the scheduler did not end it
// (it completed or failed by itself). cancelledByUs is set when the agent
// asked for the cancel: then CANCELLED (and COMPLETED) is no fault.
func Reason(state string, slurmOut []byte, cancelledByUs bool) string {
	out := string(slurmOut)
	switch NormalState(state) {
	case StateTimeout:
		return ReasonTimeLimit
	case StateNodeFail:
		return ReasonNodeFail
	case StatePreempted:
		return ReasonPreempted
	case StateOutOfMemory:
		return ReasonOOM
	case StateBootFail:
		return ReasonBootFail
	case StateDeadline:
		return ReasonDeadline
	case StateCancelled:
		if r := reasonFromOutput(out); r != "" && r != ReasonCancelled {
			return r
		}
		if cancelledByUs {
			return ""
		}
		return ReasonCancelled
	case StateCompleted, StateFailed:
		// The job's own end: exit_code and the events say the rest.
		return ""
	}
	// A state scontrol no longer knows (the job is older than MinJobAge):
	// what SLURM wrote into the job's output may still say.
	if r := reasonFromOutput(out); r != "" && !(cancelledByUs && r == ReasonCancelled) {
		return r
	}
	return ""
}

// reasonFromOutput reads slurmstepd's lines in slurm.out:
// "*** JOB 20 ON vm CANCELLED AT 2026-12-02T15:06:14 DUE TO TIME LIMIT ***".
func reasonFromOutput(out string) string {
	r := ""
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(line, "oom_kill event") || strings.Contains(line, "OOM Killed") || strings.Contains(line, "oom-kill"):
			r = ReasonOOM
		case !strings.Contains(line, "*** JOB ") && !strings.Contains(line, "*** STEP "):
		case strings.Contains(line, "DUE TO TIME LIMIT"):
			r = ReasonTimeLimit
		case strings.Contains(line, "DUE TO NODE FAILURE"):
			r = ReasonNodeFail
		case strings.Contains(line, "DUE TO PREEMPTION"):
			r = ReasonPreempted
		case strings.Contains(line, "CANCELLED AT"):
			if r == "" {
				r = ReasonCancelled
			}
		}
	}
	return r
}
