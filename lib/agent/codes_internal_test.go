package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"potato-training/lib/agentproto"
	"potato-training/lib/slurm"
)

// result takes the code of the failure an error wraps; an error without
// one is the generic failure, no error no code.
func TestResultTakesTheCode(t *testing.T) {
	for _, c := range []struct {
		err          error
		code, reason string
		signal       int
	}{
		{nil, "", "", 0},
		{errors.New("disk full"), agentproto.CodeFailed, "disk full", 0},
		{fmt.Errorf("uploading: %w", fail(agentproto.CodeUploadRefused, errors.New("413"))), agentproto.CodeUploadRefused, "uploading: 413", 0},
		{&failure{code: agentproto.CodeKilledBySignal, signal: 9, err: errors.New("killed by SIGKILL")}, agentproto.CodeKilledBySignal, "killed by SIGKILL", 9},
	} {
		res := result(1, "uri", c.err)
		if res.Code != c.code || res.Error != c.reason || res.Signal != c.signal || res.ExitCode != 1 || res.ArtifactURI != "uri" {
			t.Errorf("result(%v) = %+v, want code %q, error %q, signal %d", c.err, res, c.code, c.reason, c.signal)
		}
	}
}

// Every reason the scheduler ends a job for has its code, and each is a
// job failure (the SLURM backend fails the run with it).
func TestEveryReasonHasACode(t *testing.T) {
	for _, r := range []string{slurm.ReasonTimeLimit, slurm.ReasonNodeFail, slurm.ReasonPreempted, slurm.ReasonOOM,
		slurm.ReasonCancelled, slurm.ReasonBootFail, slurm.ReasonDeadline} {
		code, ok := reasonCode[r]
		if !ok || !(agentproto.Result{Code: code}).JobFailure() {
			t.Errorf("reason %q: code %q", r, code)
		}
	}
}

// A SLURM job the agent cancelled: the code is the stop's, cancelled when
// nothing said why.
func TestStoppedCode(t *testing.T) {
	for _, c := range []struct{ why, code, want string }{
		{"", "", agentproto.CodeCancelled},
		{LostSession, agentproto.CodeLostSession, agentproto.CodeLostSession},
		{"the agent was stopped", agentproto.CodeAgentStopped, agentproto.CodeAgentStopped},
	} {
		sj := &slurmJob{j: &job{why: c.why, whyCode: c.code}, id: "42"}
		res := result(-1, "", sj.stopped())
		if res.Code != c.want || res.JobFailure() {
			t.Errorf("stopped by %q: %+v, want code %q", c.why, res, c.want)
		}
	}
}

// A SLURM job the agent cancelled whose exit_code says a signal ended it
// (143: scancel --full --signal=TERM reached job.sh as well, whose wait
// for the training process was interrupted): the stop's code and reason,
// with the signal, not a training process killed by SIGTERM on its own.
func TestStoppedJobExitCodeOfASignal(t *testing.T) {
	for _, c := range []struct {
		cancelled bool
		code      string
		error     string
	}{
		{true, agentproto.CodeLostSession, "the agent's ssh session ended: it cancelled SLURM job 42"},
		{false, agentproto.CodeKilledBySignal, "killed by SIGTERM"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, jobExitCode), []byte("143\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// No scheduler on PATH: scontrol says nothing, exit_code decides.
		sj := &slurmJob{j: &job{why: LostSession, whyCode: agentproto.CodeLostSession}, id: "42", dir: dir,
			env: []string{"PATH=" + t.TempDir()}, cancelled: c.cancelled}
		code, err := sj.ended(context.Background(), &tailer{path: filepath.Join(dir, jobEvents)})
		res := result(code, "", err)
		if code != -1 || res.Code != c.code || res.Error != c.error || res.Signal != 15 {
			t.Errorf("cancelled %v: exit %d, %+v, want code %q, error %q, signal 15", c.cancelled, code, res, c.code, c.error)
		}
	}
}
