package agent_test

// The exit statuses of potato-agent(1) (EXIT STATUS), each caused for
// real: a polling agent against the fault-injecting server of
// polling_test.go, an agent started with --socket against the protocol's
// handler on a unix socket, as a dispatch serves it.

import (
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/agentproto"
	"potato-training/lib/bundle"
	"potato-training/lib/dispatch"
	"potato-training/lib/events"
	"potato-training/lib/trainer"
)

// A training process that fails (a parameter the trainer refuses, exit
// status 2). Expected: the result says 2, and --once exits 1 naming it.
func TestOnceExitsOneWhenTheTrainingFails(t *testing.T) {
	s := newPollServer(t, map[string]string{"epochs": "many"})
	addr, _ := s.serve("127.0.0.1:0")
	a := startAgent(t, addr, t.TempDir(), tokenEnv(s), "--once")
	code := a.wait(t)
	res := s.result()
	if res == nil || res.ExitCode != events.ExitBadSpec {
		t.Fatalf("result %+v\n%s", res, a.stderr)
	}
	const want = `run ` + pollRunID + `: the training process failed (exit status 2): param epochs="many" is not a whole number`
	if code != 1 || !a.says(want) {
		t.Errorf("exit %d, want 1 and %q\n%s", code, want, a.stderr)
	}
}

// The server refuses the predictions, then the result, for good (404:
// it no longer knows the run). Expected: exit 1 each time, and the log
// says what was refused.
func TestOnceExitsOneWhenTheServerRefuses(t *testing.T) {
	for _, route := range []string{"predictions", "result"} {
		t.Run(route, func(t *testing.T) {
			s := newPollServer(t, nil)
			addr, _ := s.serve("127.0.0.1:0")
			s.setFault(func(r string) fault {
				if r == route {
					return answer404
				}
				return pass
			})
			work := t.TempDir()
			a := startAgent(t, addr, work, tokenEnv(s), "--once")
			code := a.wait(t)
			if want := "the server refused the " + route; code != 1 || !a.says(want) {
				t.Errorf("exit %d, want 1 and %q\n%s", code, want, a.stderr)
			}
			if route == "predictions" {
				if res := s.result(); res == nil || res.ExitCode != 0 {
					t.Errorf("the result did not follow the refused predictions: %+v", res)
				}
			}
			if _, err := os.Stat(filepath.Join(work, "spool", pollRunID)); !os.IsNotExist(err) {
				t.Errorf("the refused item stays in the spool: %v", err)
			}
		})
	}
}

// The server asks for the cancel of the job of an agent started with
// --once, then refuses its result (404: the run ended at the server once
// the grace was over, as a dispatch does). Expected: exit 3, the job's
// own outcome, and the refusal in the log; before, exit 1, as for a
// failure.
func TestOnceCancelledThenRefused(t *testing.T) {
	s := newPollServer(t, nil)
	// A trainer that ends on SIGTERM with the exit code for a cancel (4),
	// with an event every 0.2 s, which the agent posts soon after.
	tr := testproject.Trainer(t, t.TempDir(), `trap 'exit 4' TERM
while :; do echo '{"v":1,"event":"status","state":"fitting","step":"working"}'; sleep 0.2; done`)
	s.claim.Spec.Trainer, s.claim.Spec.Params = tr, map[string]string{}
	addr, _ := s.serve("127.0.0.1:0")
	s.setFault(func(r string) fault {
		if r == "result" {
			return answer404
		}
		return pass
	})
	a := startAgent(t, addr, t.TempDir(), tokenEnv(s), "--once", "--allow-exec", strings.TrimPrefix(tr, "exec:"))
	testproject.WaitFor(t, "the trainer", func() bool { return s.trainerPID() != 0 })
	s.mu.Lock()
	s.cancel = true
	s.mu.Unlock()
	if code := a.wait(t); code != 3 || !a.says("the server refused the result") || !a.says("finished: cancelled") {
		t.Errorf("exit %d, want 3, the refusal and the job cancelled in the log\n%s", code, a.stderr)
	}
}

// SIGTERM to an agent started with --once while its job trains.
// Expected: the training process is stopped, the result saying so reaches
// the server, and the agent exits 1: its job did not finish. SIGTERM to
// one waiting for a job is exit 0.
func TestOnceSignalled(t *testing.T) {
	s := newPollServer(t, nil)
	allow := s.endless()
	addr, _ := s.serve("127.0.0.1:0")
	a := startAgent(t, addr, t.TempDir(), tokenEnv(s), append(allow, "--once")...)
	testproject.WaitFor(t, "the training to run", func() bool { return s.hasEvent(events.KindProgress, "") })
	a.cmd.Process.Signal(syscall.SIGTERM)
	code := a.wait(t)
	res := s.result()
	if res == nil || res.ExitCode != -1 || !strings.Contains(res.Error, "the agent was stopped: it stopped the training process") || res.Code != agentproto.CodeAgentStopped {
		t.Fatalf("result %+v\n%s", res, a.stderr)
	}
	if code != 1 {
		t.Errorf("exit %d, want 1\n%s", code, a.stderr)
	}
	if pid := s.trainerPID(); pid <= 0 || syscall.Kill(pid, 0) == nil {
		t.Errorf("the training process %d lives on", pid)
	}

	idle := newPollServer(t, nil)
	idle.claims = 0
	addr, _ = idle.serve("127.0.0.1:0")
	b := startAgent(t, addr, t.TempDir(), tokenEnv(idle), "--once")
	testproject.WaitFor(t, "the agent to claim", func() bool { return idle.seen("claim") > 0 })
	b.cmd.Process.Signal(syscall.SIGTERM)
	if code := b.wait(t); code != 0 {
		t.Errorf("stopped while waiting for a job: exit %d, want 0\n%s", code, b.stderr)
	}
}

// Usage errors are exit 2, before any request.
func TestAgentUsageErrors(t *testing.T) {
	bin := testcli.Binaries(t)
	cwd := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--once"}, "give --server URL (or --socket PATH)"},
		// A polling agent without a backend would have every claim refused.
		{[]string{"--server", "http://127.0.0.1:1", "--once"}, "give --backend NAME, the agent backend of model_training.backends that this agent serves"},
		{[]string{"--socket", filepath.Join(t.TempDir(), "none.sock"), "--once"}, "--socket: no token on standard input"},
		// A relative path is named absolute, as the agent reads it.
		{[]string{"--server", "http://127.0.0.1:1", "--slurm-config", "missing.json"}, "--slurm-config: open " + filepath.Join(cwd, "missing.json")},
		// The token would cross the network in the clear: refused, before
		// any connection.
		{[]string{"--server", "http://annotate.example.org:8000", "--backend", "lab"}, "plain http:// would carry the token unencrypted to annotate.example.org; use https:// (--ca-file for a private CA), or --insecure-http"},
		{[]string{"--server", "https://127.0.0.1:1", "--ca-file", "missing.pem", "--backend", "lab"}, "CA file: open " + filepath.Join(cwd, "missing.pem")},
	} {
		cmd := exec.Command(filepath.Join(bin, "potato-agent"), c.args...)
		cmd.Dir = cwd
		cmd.Env = append(os.Environ(), "POTATO_TRAINING_TOKEN="+strings.Repeat("ab", 32))
		cmd.Stdin = strings.NewReader("")
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), c.want) {
			t.Errorf("potato-agent %q: exit %d, want 2 and %q\n%s", c.args, code, c.want, out)
		}
	}
}

// socketRun is one run served on a unix socket, as a dispatch serves its
// agent through the ssh reverse forward, and the token it accepts.
type socketRun struct {
	*oneRun
	sock, token string
}

func serveSocketRun(t *testing.T, trainerName string, params map[string]string) *socketRun {
	t.Helper()
	dir := t.TempDir()
	cfg, err := dispatch.LoadConfig(testproject.Write(t, dir, 120, 100, ""))
	if err != nil {
		t.Fatal(err)
	}
	m, err := bundle.Build(cfg, filepath.Join(dir, "bundle"), []string{"sentiment"})
	if err != nil {
		t.Fatal(err)
	}
	sum, n, err := bundle.PackFile(filepath.Join(dir, "bundle"), filepath.Join(dir, "bundle.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if params == nil {
		params = map[string]string{}
	}
	const runID = "20261202-140000-cafe"
	r := &socketRun{token: strings.Repeat("5a", 32), oneRun: &oneRun{dir: dir, done: make(chan struct{}), claim: &agentproto.Claim{
		RunID: runID, GraceSeconds: 2, HeartbeatTimeoutS: 60, MaxPredictionsMB: 16,
		Bundle: agentproto.BundleInfo{Bytes: n, SHA256: sum},
		Spec:   trainer.Spec{V: 1, RunID: runID, Trainer: trainerName, Schemas: m.Schemas, BundleDir: "x", Workdir: "x", Params: params},
	}}}
	l, sock, err := agentproto.ListenUnix(filepath.Join(t.TempDir(), "run.sock"))
	if err != nil {
		t.Fatal(err)
	}
	r.sock = sock
	srv := agentproto.Serve(l, agentproto.NewHandler(r.oneRun, agentproto.HandlerOptions{TokenSHA256: sha256.Sum256([]byte(r.token))}))
	t.Cleanup(func() { srv.Close() })
	return r
}

// startSocketAgent starts potato-agent --socket --once in cwd, writing
// token on its standard input and keeping it open, as ssh does.
func startSocketAgent(t *testing.T, cwd, sock, token string, args ...string) *pollAgent {
	t.Helper()
	bin := testcli.Binaries(t)
	args = append([]string{"--socket", sock, "--once", "--backend", "gpu"}, args...)
	a := &pollAgent{cmd: exec.Command(filepath.Join(bin, "potato-agent"), args...), stderr: &testcli.SyncBuffer{}, exited: make(chan struct{})}
	a.cmd.Dir = cwd
	a.cmd.Stderr = a.stderr
	stdin, err := a.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte(token + "\n"))
	a.stdin = stdin
	go func() {
		a.err = a.cmd.Wait()
		stdin.Close()
		close(a.exited)
	}()
	t.Cleanup(func() {
		a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.exited:
		case <-time.After(30 * time.Second):
			a.cmd.Process.Kill()
			<-a.exited
		}
	})
	return a
}

// An agent started with --socket, from a directory of its own, with a
// relative --workdir and an exec: trainer named by a relative path, as a
// dispatch starts it. Expected: the program found from where the agent
// was started, not from the job's directory it runs in; exit 0 when it
// succeeds, 1 when it fails, 1 when the claim is refused.
func TestSocketAgentRelativePathsAndExitCodes(t *testing.T) {
	for _, c := range []struct {
		name, body string
		exit, code int
	}{
		{"succeeds", testproject.ResultLines, 0, 0},
		{"fails", `echo '{"v":1,"event":"error","code":"fit_failed","message":"the trainer broke"}'; exit 3`, 1, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			cwd := t.TempDir()
			os.Mkdir(filepath.Join(cwd, "bin"), 0o755)
			testproject.Trainer(t, filepath.Join(cwd, "bin"), c.body)
			r := serveSocketRun(t, "exec:bin/trainer.sh", nil)
			a := startSocketAgent(t, cwd, r.sock, r.token, "--workdir", "wd")
			code := a.wait(t)
			r.mu.Lock()
			res := r.result
			r.mu.Unlock()
			// The training process's own exit, success or not, has no code.
			if res == nil || res.ExitCode != c.code || res.Code != "" || res.Failed() {
				t.Fatalf("result %+v\n%s", res, a.stderr)
			}
			job := filepath.Join(cwd, "wd", "jobs", r.claim.RunID)
			host, _ := os.Hostname()
			if want := "ssh://" + host + filepath.Join(job, "artifacts"); res.ArtifactURI != want {
				t.Errorf("artifact_uri %q, want %q", res.ArtifactURI, want)
			}
			if code != c.exit {
				t.Errorf("exit %d, want %d\n%s", code, c.exit, a.stderr)
			}
			if c.exit != 0 && !a.says("the training process failed (exit status 3): the trainer broke") {
				t.Errorf("the agent does not say why it failed\n%s", a.stderr)
			}
		})
	}
	t.Run("refused token", func(t *testing.T) {
		r := serveSocketRun(t, "tfidf-logreg", nil)
		a := startSocketAgent(t, t.TempDir(), r.sock, strings.Repeat("00", 32))
		if code := a.wait(t); code != 1 || !a.says("claim: ") {
			t.Errorf("exit %d, want 1\n%s", code, a.stderr)
		}
	})
}

// --python names the interpreter by a relative path, from the directory
// the agent was started in. Expected: the Python trainer starts (it
// refuses a bad parameter before it needs torch: exit 2, bad_spec), where
// a path taken from the job's directory would not exist.
func TestPollingRelativePython(t *testing.T) {
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		if python, err = exec.LookPath("python3"); err != nil {
			t.Skip("no python3 on this machine")
		}
	}
	cwd := t.TempDir()
	os.Mkdir(filepath.Join(cwd, "py"), 0o755)
	if err := os.Symlink(python, filepath.Join(cwd, "py", "python3")); err != nil {
		t.Fatal(err)
	}
	s := newPollServer(t, map[string]string{"lora": "maybe"})
	s.claim.Spec.Trainer = "hf-text-classification"
	addr, _ := s.serve("127.0.0.1:0")
	a := startAgentIn(t, cwd, addr, "wd", tokenEnv(s), "--once", "--python", "py/python3")
	code := a.wait(t)
	res := s.result()
	said := false
	s.mu.Lock()
	for _, e := range s.events {
		said = said || e.Kind == events.KindError && e.String("code") == events.CodeBadSpec && strings.Contains(e.String("message"), "lora")
	}
	s.mu.Unlock()
	if res == nil || res.ExitCode != events.ExitBadSpec || !said {
		t.Fatalf("result %+v\n%s", res, a.stderr)
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if _, err := os.Stat(filepath.Join(cwd, "wd", "trainers")); err != nil {
		t.Errorf("the trainer's script is not under ./wd/trainers: %v", err)
	}
}
