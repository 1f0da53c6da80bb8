package agent_test

// The result's code of each way a job of potato-agent(1) fails, caused
// for real against an agent started with --socket, as a dispatch starts
// it.

import (
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"potato-training/internal/testproject"
	"potato-training/lib/agentproto"
)

// socketResult runs one job of an exec: trainer of body through an agent
// started with --socket --once, changed first by prepare, and returns its
// result. lose, when set, is called once the training process has
// started, with the agent's standard input, whose end is the end of its
// ssh session.
func socketResult(t *testing.T, trainerName, body string, prepare func(*socketRun), lose func(io.Closer)) (*agentproto.Result, *pollAgent) {
	t.Helper()
	cwd := t.TempDir()
	if body != "" {
		trainerName = testproject.Trainer(t, cwd, body)
	}
	r := serveSocketRun(t, trainerName, nil)
	if prepare != nil {
		prepare(r)
	}
	a := startSocketAgent(t, cwd, r.sock, r.token, "--workdir", filepath.Join(cwd, "wd"))
	if lose != nil {
		testproject.WaitFor(t, "the training process to start", func() bool { return r.logHas("training process ") })
		lose(a.stdin)
	}
	if code := a.wait(t); code != 1 {
		t.Errorf("exit %d, want 1\n%s", code, a.stderr)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.result == nil {
		t.Fatalf("no result\n%s", a.stderr)
	}
	return r.result, a
}

// Each failure of a job: the result's code, its signal, and what the
// backends decide from them.
func TestResultCodes(t *testing.T) {
	for _, c := range []struct {
		name, trainer, body string
		prepare             func(*socketRun)
		lose                func(io.Closer)
		code                string
		signal              syscall.Signal
		killedBy            string
		error               string
	}{
		{name: "SIGKILL", body: "kill -KILL $$", code: agentproto.CodeKilledBySignal, signal: syscall.SIGKILL,
			killedBy: "killed by SIGKILL", error: "killed by SIGKILL"},
		{name: "SIGTERM", body: "kill -TERM $$", code: agentproto.CodeKilledBySignal, signal: syscall.SIGTERM,
			killedBy: "killed by SIGTERM", error: "killed by SIGTERM"},
		{name: "no program", trainer: "exec:bin/none", code: agentproto.CodeStartFailed,
			error: "cannot start the training process: "},
		{name: "bad bundle", body: testproject.ResultLines, code: agentproto.CodeBundleFailed,
			prepare: func(r *socketRun) { r.claim.Bundle.SHA256 = strings.Repeat("0", 64) }, error: "the bundle: "},
		{name: "lost session", body: "sleep 300", lose: func(stdin io.Closer) { stdin.Close() },
			code: agentproto.CodeLostSession, signal: syscall.SIGTERM, error: "the agent's ssh session ended: it stopped the training process (killed by SIGTERM)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, a := socketResult(t, c.trainer, c.body, c.prepare, c.lose)
			if res.Code != c.code || res.Signal != int(c.signal) || !strings.HasPrefix(res.Error, c.error) {
				t.Errorf("result %+v, want code %q, signal %d, error %q\n%s", res, c.code, c.signal, c.error, a.stderr)
			}
			if !res.Failed() || res.KilledBy() != c.killedBy || res.Killed() != (c.signal == syscall.SIGKILL) || res.JobFailure() {
				t.Errorf("result %+v: failed %v, killed %v, killed by %q, job failure %v", res, res.Failed(), res.Killed(), res.KilledBy(), res.JobFailure())
			}
		})
	}
}

// A polling agent refuses an exec: trainer, unless its --allow-exec
// names the program. Expected: exit status 2 in the result, with code
// exec_refused, without the option and with one that names another
// program.
func TestResultCodeExecRefused(t *testing.T) {
	other := testproject.NewEndless(t, t.TempDir(), "").Program()
	for _, args := range [][]string{nil, {"--allow-exec", other}} {
		s := newPollServer(t, nil)
		s.claim.Spec.Trainer = "exec:/bin/true"
		addr, _ := s.serve("127.0.0.1:0")
		a := startAgent(t, addr, t.TempDir(), tokenEnv(s), append([]string{"--once"}, args...)...)
		if code := a.wait(t); code != 1 {
			t.Errorf("%q: exit %d, want 1\n%s", args, code, a.stderr)
		}
		res := s.result()
		if res == nil || res.ExitCode != 2 || res.Code != agentproto.CodeExecRefused || !strings.Contains(res.Error, "runs only the toolkit's trainers and the programs its --allow-exec names") {
			t.Fatalf("%q: result %+v\n%s", args, res, a.stderr)
		}
	}
}
