package main

// Runs on an agent backend, end to end with the real binaries on
// loopback: potato-server, potato-dispatch started detached, and
// potato-agent polling the server with the backend's token.

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

type agentEnv struct {
	*testproject.Runs
	t      *testing.T
	addr   string
	token  string
	srv    *exec.Cmd
	srvLog *bytes.Buffer
}

// agentSetup writes a project whose default backend "lab" is of type agent,
// issues its token and starts potato-server on a free loopback port.
func agentSetup(t *testing.T, backend string) *agentEnv {
	e := &agentEnv{t: t, Runs: &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: t.TempDir()}}
	e.Config = testproject.Write(t, e.Dir, 120, 100, `  backend: lab
  backends:
    lab:
      type: agent
`+backend)
	tok, err := e.Root().IssueToken("lab", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.token = tok
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = l.Addr().String()
	l.Close()
	e.startServer()
	return e
}

func (e *agentEnv) startServer() {
	e.t.Helper()
	e.srvLog = &bytes.Buffer{}
	e.srv = exec.Command(filepath.Join(e.Bin, "potato-server"), e.Config, "--listen", e.addr)
	e.srv.Stderr = e.srvLog
	if err := e.srv.Start(); err != nil {
		e.t.Fatal(err)
	}
	srv := e.srv
	e.t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	testproject.WaitFor(e.t, "the server", func() bool {
		c, err := net.Dial("tcp", e.addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

func (e *agentEnv) stopServer() {
	e.srv.Process.Signal(syscall.SIGTERM)
	e.srv.Wait()
}

func (e *agentEnv) wait(id string) rundir.Info {
	e.t.Helper()
	return e.Wait(id, 90*time.Second)
}

type agentProc struct {
	cmd    *exec.Cmd
	stderr *testcli.SyncBuffer
}

// agent starts potato-agent polling the server, the token in its
// environment.
func (e *agentEnv) agent(token string, args ...string) *agentProc {
	e.t.Helper()
	work := e.t.TempDir()
	cmd := exec.Command(filepath.Join(e.Bin, "potato-agent"), append([]string{"--server", "http://" + e.addr,
		"--backend", "lab", "--workdir", work}, args...)...)
	cmd.Env = append(os.Environ(), "POTATO_TRAINING_TOKEN="+token)
	a := &agentProc{cmd: cmd, stderr: &testcli.SyncBuffer{}}
	cmd.Stderr = a.stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cmd.Process.Kill() })
	return a
}

func (e *agentEnv) dump(id string) string {
	return "run.log:\n" + e.File(id, "run.log") + "\nserver:\n" + e.srvLog.String()
}

func testAgentRunEndToEnd(t *testing.T) {
	e := agentSetup(t, "      heartbeat_timeout_s: 30\n")
	id := e.Detach("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	testproject.WaitFor(t, "the run to wait for an agent", func() bool { return e.Info(id).Step == "waiting for an agent on lab" })
	if st := e.Info(id).State; st != rundir.StateQueued {
		t.Errorf("state %s while waiting for an agent, want queued", st)
	}
	a := e.agent(e.token, "--once")
	info := e.wait(id)
	if info.State != rundir.StateSuccess || info.Heldout == nil || info.Writeback["n_written"] == 0 {
		t.Fatalf("state %s error %q\n%s\nagent:\n%s", info.State, info.Error, e.dump(id), a.stderr.String())
	}
	if info.RanOn != "lab (agent)" || info.ArtifactURI == "" {
		t.Errorf("ran_on %q artifact_uri %q", info.RanOn, info.ArtifactURI)
	}
	if !strings.Contains(e.File(id, "run.log"), "claimed the run") {
		t.Errorf("the run log does not say who claimed it\n%s", e.dump(id))
	}
	rec, err := e.Root().Agent("lab")
	if err != nil || rec.LastSeen == nil || rec.LastHost == "" {
		t.Errorf("last_seen not recorded: %+v %v", rec, err)
	}
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("agent --once: %v\n%s", err, a.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Error("agent --once did not exit after its job")
	}
}

// G6: without an agent the run stays queued, then fails after
// queue_timeout_s.
func testQueuedUntilQueueTimeout(t *testing.T) {
	e := agentSetup(t, "      queue_timeout_s: 2\n")
	id := e.Detach("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	info := e.wait(id)
	if info.State != rundir.StateError || !strings.Contains(info.Error, "no agent of backend lab claimed the run within 2 seconds") {
		t.Errorf("state %s error %q", info.State, info.Error)
	}
}

func testCancelWhileWaitingForAnAgent(t *testing.T) {
	e := agentSetup(t, "")
	id := e.Detach("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	testproject.WaitFor(t, "the run to wait for an agent", func() bool { return e.Info(id).Step == "waiting for an agent on lab" })
	if err := exec.Command(filepath.Join(e.Bin, "potato-dispatch"), "cancel", e.Config, id).Run(); err != nil {
		t.Fatal(err)
	}
	if info := e.wait(id); info.State != rundir.StateCancelled {
		t.Errorf("state %s error %q", info.State, info.Error)
	}
}

// An agent started with --once whose job is cancelled: its log says
// cancelled, and it exits 3, as potato-agent(1) gives for a cancelled job.
func testOnceAgentCancelled(t *testing.T) {
	e := agentSetup(t, "      heartbeat_timeout_s: 30\n")
	tr := testproject.Trainer(t, t.TempDir(), `echo '{"v":1,"event":"status","state":"fitting","step":"working"}'
trap 'exit 4' TERM
while :; do sleep 0.1; done`)
	id := e.Detach("--trainer", tr, "--schemas", "sentiment")
	a := e.agent(e.token, "--once", "--allow-exec", strings.TrimPrefix(tr, "exec:"))
	testproject.WaitFor(t, "the trainer", func() bool { return e.Info(id).Step == "working" })
	if err := exec.Command(filepath.Join(e.Bin, "potato-dispatch"), "cancel", e.Config, id).Run(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("agent --once did not exit after its job was cancelled\n%s", a.stderr.String())
	}
	log := a.stderr.String()
	if code := a.cmd.ProcessState.ExitCode(); code != 3 || !strings.Contains(log, "run "+id+": finished: cancelled") {
		t.Errorf("agent --once: exit %d, want 3 and the job logged cancelled\n%s", code, log)
	}
	if info := e.wait(id); info.State != rundir.StateCancelled {
		t.Errorf("state %s error %q", info.State, info.Error)
	}
}

// A wrong or replaced token gets 401 and nothing else.
func testWrongTokenGets401(t *testing.T) {
	e := agentSetup(t, "")
	old := e.token
	if _, err := e.Root().IssueToken("lab", time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{old, "", strings.Repeat("0", 64)} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+e.addr+"/api/training/agent/v1/claim",
			strings.NewReader(`{"backend":"lab","host":"x","workdir":"/w","version":"1"}`))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body.String(), "run") {
			t.Errorf("token %.8q: %d %s", tok, resp.StatusCode, body.String())
		}
	}
}

// Two agents poll one backend: one run, one claim.
func testTwoAgentsOneClaims(t *testing.T) {
	e := agentSetup(t, "      heartbeat_timeout_s: 30\n")
	a1 := e.agent(e.token, "--once")
	a2 := e.agent(e.token, "--once")
	id := e.Detach("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	info := e.wait(id)
	if info.State != rundir.StateSuccess {
		t.Fatalf("state %s error %q\n%s", info.State, info.Error, e.dump(id))
	}
	if n := strings.Count(e.File(id, "run.log"), "claimed the run"); n != 1 {
		t.Errorf("%d claims of one run\n%s", n, e.dump(id))
	}
	// One agent ran it and exits; the other still polls.
	exited := make(chan *agentProc, 2)
	for _, a := range []*agentProc{a1, a2} {
		go func() { a.cmd.Wait(); exited <- a }()
	}
	select {
	case a := <-exited:
		if !a.cmd.ProcessState.Success() {
			t.Errorf("the agent that ran the job: %v\n%s", a.cmd.ProcessState, a.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("neither agent exited after the job")
	}
	select {
	case a := <-exited:
		t.Errorf("both agents exited: %v\n%s", a.cmd.ProcessState, a.stderr.String())
	case <-time.After(2 * time.Second):
	}
}

// The server restarts while the run goes on: the run completes and its
// predictions arrive (the dispatch, not the server, holds the run).
func testServerRestartMidRun(t *testing.T) {
	e := agentSetup(t, "      heartbeat_timeout_s: 60\n")
	id := e.Detach("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	testproject.WaitFor(t, "the run to wait for an agent", func() bool { return e.Info(id).Step == "waiting for an agent on lab" })
	e.stopServer()
	a := e.agent(e.token, "--once")
	testproject.WaitFor(t, "the agent to find no server", func() bool {
		return strings.Contains(a.stderr.String(), "trying again until the server answers")
	})
	e.startServer()
	info := e.wait(id)
	if info.State != rundir.StateSuccess || info.Writeback["n_written"] == 0 {
		t.Errorf("state %s error %q\n%s\nagent:\n%s", info.State, info.Error, e.dump(id), a.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(e.Root().RunDir(id), rundir.PredictionsFile)); err != nil {
		t.Errorf("no predictions: %v", err)
	}
}

// G9 on the server's side: an agent that falls silent (stopped with
// SIGSTOP) fails the run with the exact text.
func testAgentSilentAgentFailsTheRun(t *testing.T) {
	e := agentSetup(t, "      heartbeat_timeout_s: 3\n")
	fit := testproject.NewEndless(t, testcli.SharedDir(t, 0o755), filepath.Join(e.Bin, "potato-agent"))
	id := e.Detach(fit.Args()...)
	a := e.agent(e.token, "--once", "--allow-exec", fit.Program())
	testproject.WaitFor(t, "the fit", func() bool { return e.Info(id).Progress != nil || e.Info(id).Finished })
	a.cmd.Process.Signal(syscall.SIGSTOP)
	defer a.cmd.Process.Signal(syscall.SIGCONT)
	info := e.wait(id)
	want := fmt.Sprintf("No word from the agent on lab for %d seconds", 3)
	if info.Error != want && !strings.Contains(info.Error, want) {
		t.Errorf("state %s error %q, want %q\n%s", info.State, info.Error, want, e.dump(id))
	}
}

// TestAgent runs the agent backend's tests, NAT included, one after the
// other, beside the other backends' groups.
func TestAgent(t *testing.T) {
	testcli.Short(t, "it starts potato-server and polling agents for the agent backend's group (about 25 s)")
	testcli.Group(t, []testcli.Case{
		{Name: "TestAgentRunEndToEnd", Run: testAgentRunEndToEnd},
		{Name: "TestLikertAgent", Run: testLikertAgent},
		{Name: "TestQueuedUntilQueueTimeout", Run: testQueuedUntilQueueTimeout},
		{Name: "TestCancelWhileWaitingForAnAgent", Run: testCancelWhileWaitingForAnAgent},
		{Name: "TestOnceAgentCancelled", Run: testOnceAgentCancelled},
		{Name: "TestWrongTokenGets401", Run: testWrongTokenGets401},
		{Name: "TestTwoAgentsOneClaims", Run: testTwoAgentsOneClaims},
		{Name: "TestServerRestartMidRun", Run: testServerRestartMidRun},
		{Name: "TestAgentSilentAgentFailsTheRun", Run: testAgentSilentAgentFailsTheRun},
		{Name: "TestBehindNAT", Run: testBehindNAT},
	})
}
