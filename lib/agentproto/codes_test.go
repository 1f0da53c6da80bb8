package agentproto

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// What the backends decide from a result's code and signal.
func TestResultDecisions(t *testing.T) {
	for _, c := range []struct {
		res        Result
		failed     bool
		killed     bool
		killedBy   string
		jobFailure bool
	}{
		{Result{}, false, false, "", false},
		{Result{ExitCode: 3}, false, false, "", false},
		// An agent that sends no code: the generic failure.
		{Result{ExitCode: -1, Error: "something"}, true, false, "", false},
		{Result{ExitCode: -1, Error: "killed by SIGKILL", Code: CodeKilledBySignal, Signal: int(syscall.SIGKILL)}, true, true, "killed by SIGKILL", false},
		{Result{ExitCode: -1, Error: "killed by SIGTERM", Code: CodeKilledBySignal, Signal: int(syscall.SIGTERM)}, true, false, "killed by SIGTERM", false},
		// Stopped by the agent: killed only when SIGKILL ended it.
		{Result{ExitCode: -1, Code: CodeLostSession, Signal: int(syscall.SIGTERM)}, true, false, "", false},
		{Result{ExitCode: -1, Code: CodeAgentStopped, Signal: int(syscall.SIGKILL)}, true, true, "killed by SIGKILL", false},
		{Result{ExitCode: -1, Code: CodeSLURMTimeLimit}, true, false, "", true},
		{Result{ExitCode: -1, Code: CodeNoExitCode}, true, false, "", true},
		{Result{ExitCode: -1, Code: CodeBadExitCode}, true, false, "", true},
		{Result{ExitCode: 0, Code: CodeUploadRefused}, true, false, "", false},
	} {
		r := c.res
		if r.Failed() != c.failed || r.Killed() != c.killed || r.KilledBy() != c.killedBy || r.JobFailure() != c.jobFailure {
			t.Errorf("%+v: failed %v, killed %v, killed by %q, job failure %v", r, r.Failed(), r.Killed(), r.KilledBy(), r.JobFailure())
		}
	}
	if (Result{Error: "x"}).Outcome() != CodeFailed {
		t.Error("an error without a code is not the generic failure")
	}
}

// A result without a code is the JSON it always was; codes are unique.
func TestResultJSON(t *testing.T) {
	b, _ := json.Marshal(Result{ExitCode: 0, ArtifactURI: "ssh://h/d"})
	if string(b) != `{"exit_code":0,"artifact_uri":"ssh://h/d","error":""}` {
		t.Errorf("%s", b)
	}
	b, _ = json.Marshal(Result{ExitCode: -1, Error: "killed by SIGKILL", Code: CodeKilledBySignal, Signal: 9})
	if string(b) != `{"exit_code":-1,"artifact_uri":"","error":"killed by SIGKILL","code":"killed_by_signal","signal":9}` {
		t.Errorf("%s", b)
	}
	seen := map[string]bool{}
	for _, c := range Codes {
		if c == "" || seen[c] {
			t.Errorf("code %q twice or empty", c)
		}
		seen[c] = true
	}
	if !slices.Contains(Codes, CodeCancelled) {
		t.Error("no cancelled")
	}
}

// potato-agent(1) lists every code (the scheduler's as slurm_REASON).
func TestCodesInTheManPage(t *testing.T) {
	b, err := os.ReadFile("../../man/potato-agent.1")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, c := range Codes {
		if reason, ok := strings.CutPrefix(c, "slurm_"); ok {
			c = reason
		}
		if !strings.Contains(page, "Ql "+c+"\n") && !strings.Contains(page, "Ql "+c+" ,\n") {
			t.Errorf("potato-agent(1) does not list %q", c)
		}
	}
}
