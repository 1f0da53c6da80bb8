package agentproto

import (
	"syscall"

	"potato-training/lib/events"
	"potato-training/lib/trainer"
)

// The codes of a Result, as potato-agent(1) lists them. A result whose
// Error is set and whose Code is empty (an agent that sends none) is
// CodeFailed.
const (
	// CodeFailed: the agent could not run the job (a file of the job it
	// could not write).
	CodeFailed = "failed"
	// CodeExecRefused: the job names a program of the machine as its
	// trainer (exec:PATH) and this agent runs only the toolkit's.
	CodeExecRefused = "exec_refused"
	// CodeBundleFailed: the bundle could not be downloaded, or did not
	// match the claim's digest, or could not be unpacked.
	CodeBundleFailed = "bundle_failed"
	// CodeStartFailed: the training process could not be started.
	CodeStartFailed = "start_failed"
	// CodeKilledBySignal: a signal killed the training process, which the
	// agent had not asked to stop; Signal says which.
	CodeKilledBySignal = "killed_by_signal"
	// CodeCancelled: the server asked for the cancel (FORMATS.md's code).
	CodeCancelled = events.CodeCancelled
	// CodeLostSession: the agent's ssh session ended, and the agent
	// stopped the job.
	CodeLostSession = "lost_session"
	// CodeAgentStopped: a signal stopped the agent, which stopped the job.
	CodeAgentStopped = "agent_stopped"
	// CodeUnreachable: the server could not be reached for the agent's
	// limit (SPEC G9), and the agent stopped the job.
	CodeUnreachable = "unreachable"
	// CodeUploadFailed: the predictions could not be uploaded.
	CodeUploadFailed = "upload_failed"
	// CodeUploadRefused: the server refused the predictions with 413
	// (over max_predictions_mb).
	CodeUploadRefused = "upload_refused"
	// CodeSubmitFailed: sbatch did not take the job.
	CodeSubmitFailed = "submit_failed"

	// The scheduler ended the job before the training process finished
	// (SPEC M7, F9), one code per reason.
	CodeSLURMTimeLimit   = "slurm_time_limit"
	CodeSLURMNodeFail    = "slurm_node_fail"
	CodeSLURMPreempted   = "slurm_preempted"
	CodeSLURMOutOfMemory = "slurm_out_of_memory"
	CodeSLURMCancelled   = "slurm_cancelled"
	CodeSLURMBootFail    = "slurm_boot_fail"
	CodeSLURMDeadline    = "slurm_deadline"
	// CodeNoExitCode: the job left the queue without writing exit_code.
	CodeNoExitCode = "no_exit_code"
	// CodeBadExitCode: the job's exit_code is not a number.
	CodeBadExitCode = "bad_exit_code"
)

// Codes are every code a Result may carry.
var Codes = []string{
	CodeFailed, CodeExecRefused, CodeBundleFailed, CodeStartFailed, CodeKilledBySignal,
	CodeCancelled, CodeLostSession, CodeAgentStopped, CodeUnreachable, CodeUploadFailed,
	CodeUploadRefused, CodeSubmitFailed,
	CodeSLURMTimeLimit, CodeSLURMNodeFail, CodeSLURMPreempted, CodeSLURMOutOfMemory,
	CodeSLURMCancelled, CodeSLURMBootFail, CodeSLURMDeadline, CodeNoExitCode, CodeBadExitCode,
}

// Outcome is the result's code: "" for a job that ended as its training
// process's exit status says, CodeFailed for an error without a code.
func (r Result) Outcome() string {
	if r.Code == "" && r.Error != "" {
		return CodeFailed
	}
	return r.Code
}

// Failed reports whether the job did not end as its training process's
// exit status says.
func (r Result) Failed() bool { return r.Outcome() != "" }

// Killed reports whether SIGKILL killed the training process (an out of
// memory kill, on every backend), whether or not the agent had asked it to
// stop.
func (r Result) Killed() bool { return r.Signal == int(syscall.SIGKILL) }

// KilledBy is "killed by SIGKILL" when Killed, "killed by SIGTERM" (or
// another signal) for a training process that a signal killed without the
// agent asking it to stop, else "".
func (r Result) KilledBy() string {
	if r.Signal == 0 || !r.Killed() && r.Code != CodeKilledBySignal {
		return ""
	}
	return trainer.Exit{Code: -1, Signal: syscall.Signal(r.Signal)}.String()
}

// JobFailure reports whether the job, not the training process, decides
// the run's failure: the scheduler ended it, or it left no exit_code that
// can be read.
func (r Result) JobFailure() bool {
	switch r.Code {
	case CodeSLURMTimeLimit, CodeSLURMNodeFail, CodeSLURMPreempted, CodeSLURMOutOfMemory,
		CodeSLURMCancelled, CodeSLURMBootFail, CodeSLURMDeadline, CodeNoExitCode, CodeBadExitCode:
		return true
	}
	return false
}
