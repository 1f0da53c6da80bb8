package agent_test

// The polling agent (potato-agent --server URL, SPEC G1-G9) against a
// link and a server that come and go. The server is the protocol's own
// handler (lib/agentproto) serving one run over loopback TCP; in front of
// it, in the same listener, is a fault injector written for these tests:
// it answers 503, drops connections, cuts the bundle or answers 413 when a
// test says so. The agent is the built potato-agent, training with the
// built-in tfidf-logreg on a bundle made by lib/bundle.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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

const pollRunID = "20261202-130000-beef"

// fault is what the injector does with a request.
type fault int

const (
	pass      fault = iota
	answer503       // 503 Service Unavailable
	hangUp          // the connection is closed without an answer
	answer413       // 413, as a proxy with a body limit answers
	answer404       // 404, as a server that no longer knows the run answers
)

// pollServer is one run served to a polling agent, behind the fault
// injector.
type pollServer struct {
	t      *testing.T
	dir    string
	token  string
	claim  *agentproto.Claim
	bundle int64 // the bundle's size
	h      http.Handler

	mu       sync.Mutex
	claims   int // how many claims may still be handed out
	events   []events.Event
	preds    int // predictions files stored
	results  []agentproto.Result
	attempts map[string]int // requests seen, by route ("claim", "events", ...)
	bundleTx int64          // bundle bytes sent, all requests together
	ranges   []string       // Range of each bundle request
	cutAt    int64          // cut the next bundle answer after this many bytes
	fault    func(route string) fault
	cancel   bool // the answer to every post of events asks for the cancel
	done     chan struct{}
}

func newPollServer(t *testing.T, params map[string]string) *pollServer {
	return newPollServerN(t, params, 120)
}

// newPollServerN serves a project of items items.
func newPollServerN(t *testing.T, params map[string]string, items int) *pollServer {
	t.Helper()
	dir := t.TempDir()
	cfg, err := dispatch.LoadConfig(testproject.Write(t, dir, items, 100, ""))
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
	s := &pollServer{t: t, dir: dir, token: strings.Repeat("cd", 32), bundle: n, claims: 1,
		attempts: map[string]int{}, done: make(chan struct{}),
		claim: &agentproto.Claim{RunID: pollRunID, RunToken: strings.Repeat("ef", 32), GraceSeconds: 2,
			HeartbeatTimeoutS: 60, MaxPredictionsMB: 16, Bundle: agentproto.BundleInfo{Bytes: n, SHA256: sum},
			Spec: trainer.Spec{V: 1, RunID: pollRunID, Trainer: "tfidf-logreg", Schemas: m.Schemas, BundleDir: "x", Workdir: "x", Params: params}}}
	s.h = agentproto.NewHandler(s, agentproto.HandlerOptions{Authorize: func(tok string) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return tok == s.token || tok == s.claim.RunToken
	}, LongPoll: 2 * time.Second})
	return s
}

// endless makes the job's trainer one that fits until it is stopped
// (testproject.Endless), whatever the machine's speed, and returns the
// agent's arguments that allow it.
func (s *pollServer) endless() []string {
	fit := testproject.NewEndless(s.t, s.t.TempDir(), "")
	s.claim.Spec.Trainer = fit.Trainer
	s.claim.Spec.Params = map[string]string{}
	return []string{"--allow-exec", fit.Program()}
}

// serve listens on addr ("127.0.0.1:0" for any port) and returns the
// address and a function that stops the listener: the server is down.
func (s *pollServer) serve(addr string) (string, func()) {
	s.t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		s.t.Fatal(err)
	}
	srv := agentproto.Serve(l, s)
	s.t.Cleanup(func() { srv.Close() })
	return l.Addr().String(), func() { srv.Close() }
}

func (s *pollServer) setFault(f func(route string) fault) {
	s.mu.Lock()
	s.fault = f
	s.mu.Unlock()
}

func (s *pollServer) seen(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts[route]
}

// ServeHTTP is the fault injector in front of the protocol's handler.
func (s *pollServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	s.mu.Lock()
	s.attempts[route]++
	f := pass
	if s.fault != nil {
		f = s.fault(route)
	}
	var cut int64 = -1
	if route == "bundle" && f == pass {
		s.ranges = append(s.ranges, r.Header.Get("Range"))
		cut, s.cutAt = s.cutAt, 0
		if cut == 0 {
			cut = -1
		}
	}
	s.mu.Unlock()
	switch f {
	case answer503:
		http.Error(w, `{"error":"the server is restarting"}`, http.StatusServiceUnavailable)
		return
	case hangUp:
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	case answer413:
		io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		http.Error(w, "<html>413 Request Entity Too Large</html>", http.StatusRequestEntityTooLarge)
		return
	case answer404:
		io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":"no run `+pollRunID+`"}`+"\n")
		return
	}
	if route == "bundle" {
		w = &countingWriter{ResponseWriter: w, s: s, left: cut}
	}
	s.h.ServeHTTP(w, r)
}

// countingWriter counts the bundle bytes sent and, when left >= 0, drops
// the connection after that many, as a broken link does.
type countingWriter struct {
	http.ResponseWriter
	s    *pollServer
	left int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	cut := c.left >= 0 && int64(len(p)) > c.left
	if cut {
		p = p[:c.left]
	}
	n, err := c.ResponseWriter.Write(p)
	c.s.mu.Lock()
	c.s.bundleTx += int64(n)
	c.s.mu.Unlock()
	if c.left >= 0 {
		c.left -= int64(n)
	}
	if !cut {
		return n, err
	}
	c.ResponseWriter.(http.Flusher).Flush()
	if conn, _, err := http.NewResponseController(c.ResponseWriter).Hijack(); err == nil {
		conn.Close()
	}
	return n, errors.New("the link broke")
}

// The agentproto.Run half.

func (s *pollServer) Claim(ctx context.Context, req agentproto.ClaimRequest) (*agentproto.Claim, error) {
	s.mu.Lock()
	if s.claims > 0 && req.Backend == "lab" {
		s.claims--
		s.mu.Unlock()
		return s.claim, nil
	}
	s.mu.Unlock()
	<-ctx.Done()
	return nil, nil
}

func (s *pollServer) BundlePath(string) (string, error) {
	return filepath.Join(s.dir, "bundle.tar.gz"), nil
}

func (s *pollServer) Events(_ string, evs []events.Event, _ []string) (agentproto.Reply, error) {
	s.mu.Lock()
	s.events = append(s.events, evs...)
	cancel := s.cancel
	s.mu.Unlock()
	return agentproto.Reply{Cancel: cancel}, nil
}

func (s *pollServer) Predictions(_ string, body io.Reader) error {
	if err := agentproto.StoreFile(filepath.Join(s.dir, "predictions.jsonl"), body); err != nil {
		return err
	}
	s.mu.Lock()
	s.preds++
	s.mu.Unlock()
	return nil
}

func (s *pollServer) Result(_ string, res agentproto.Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.results = append(s.results, res)
	if len(s.results) > 1 {
		return &agentproto.StatusError{Code: http.StatusConflict, Msg: "the result is in already"}
	}
	close(s.done)
	return nil
}

func (s *pollServer) result() *agentproto.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.results) == 0 {
		return nil
	}
	return &s.results[0]
}

// hasEvent reports whether an event of kind whose msg or step holds text
// reached the server.
func (s *pollServer) hasEvent(kind, text string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.events {
		if e.Kind == kind && (strings.Contains(e.String("msg"), text) || strings.Contains(e.String("step"), text) || text == "") {
			return true
		}
	}
	return false
}

// pollAgent is a running potato-agent --server.
type pollAgent struct {
	cmd    *exec.Cmd
	stderr *testcli.SyncBuffer
	exited chan struct{}
	err    error
	// stdin is a --socket agent's standard input, whose end is the end of
	// its ssh session (startSocketAgent).
	stdin io.WriteCloser
}

func startAgent(t *testing.T, addr, workdir string, env []string, args ...string) *pollAgent {
	t.Helper()
	return startAgentIn(t, "", addr, workdir, env, args...)
}

// startAgentIn starts the agent in the directory cwd ("": the test's).
func startAgentIn(t *testing.T, cwd, addr, workdir string, env []string, args ...string) *pollAgent {
	t.Helper()
	bin := testcli.Binaries(t)
	args = append([]string{"--server", "http://" + addr, "--backend", "lab", "--workdir", workdir}, args...)
	a := &pollAgent{cmd: exec.Command(filepath.Join(bin, "potato-agent"), args...), stderr: &testcli.SyncBuffer{}, exited: make(chan struct{})}
	a.cmd.Dir = cwd
	a.cmd.Env = append(os.Environ(), env...)
	a.cmd.Stderr = a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		a.err = a.cmd.Wait()
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

// wait waits for the agent to exit and returns its exit code.
func (a *pollAgent) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-a.exited:
	case <-time.After(90 * time.Second):
		t.Fatalf("the agent did not exit\n%s", a.stderr)
	}
	return a.cmd.ProcessState.ExitCode()
}

func (a *pollAgent) says(text string) bool { return strings.Contains(a.stderr.String(), text) }

func tokenEnv(s *pollServer) []string { return []string{"POTATO_TRAINING_TOKEN=" + s.token} }

func TestPollingTokenFileMode(t *testing.T) {
	s := newPollServer(t, nil)
	addr, _ := s.serve("127.0.0.1:0")
	dir := t.TempDir()
	tf := filepath.Join(dir, "token")
	os.WriteFile(tf, []byte(s.token+"\n"), 0o644)
	os.Chmod(tf, 0o644)
	// The fault: a token file others can read. Expected: exit 2, the file
	// and its mode named, no claim made, the token not shown.
	a := startAgent(t, addr, t.TempDir(), []string{"POTATO_TRAINING_TOKEN="}, "--token-file", tf, "--once")
	if code := a.wait(t); code != 2 || !a.says("readable or writable by group or others (mode 0644): run chmod 600") {
		t.Errorf("exit %d, want 2 and the mode named\n%s", code, a.stderr)
	}
	if strings.Contains(a.stderr.String(), s.token) {
		t.Error("the message shows the token")
	}
	// An empty token file, and no token at all.
	os.WriteFile(tf, []byte("\n"), 0o600)
	os.Chmod(tf, 0o600)
	a = startAgent(t, addr, t.TempDir(), []string{"POTATO_TRAINING_TOKEN="}, "--token-file", tf, "--once")
	if code := a.wait(t); code != 2 || !a.says("is empty") {
		t.Errorf("empty token file: exit %d\n%s", code, a.stderr)
	}
	a = startAgent(t, addr, t.TempDir(), []string{"POTATO_TRAINING_TOKEN="}, "--once")
	if code := a.wait(t); code != 2 || !a.says("no token") {
		t.Errorf("no token: exit %d\n%s", code, a.stderr)
	}
	if n := s.seen("claim"); n != 0 {
		t.Errorf("%d claims made with a refused token file", n)
	}
	// Mode 0600 is accepted.
	os.WriteFile(tf, []byte(s.token+"\n"), 0o600)
	a = startAgent(t, addr, t.TempDir(), []string{"POTATO_TRAINING_TOKEN="}, "--token-file", tf, "--once")
	if code := a.wait(t); code != 0 || s.result() == nil {
		t.Errorf("a 0600 token file: exit %d, result %v\n%s", code, s.result(), a.stderr)
	}
}

// The fault: a replaced token (registered again). Expected: exit 1 with
// the words to register again, after one claim, not a stream of them.
func TestPollingRefusedToken(t *testing.T) {
	s := newPollServer(t, nil)
	addr, _ := s.serve("127.0.0.1:0")
	old := strings.Repeat("0a", 32)
	a := startAgent(t, addr, t.TempDir(), []string{"POTATO_TRAINING_TOKEN=" + old}, "--once")
	if code := a.wait(t); code != 1 || !a.says("the server refused the token for backend lab: register again") {
		t.Errorf("exit %d\n%s", code, a.stderr)
	}
	if n := s.seen("claim"); n != 1 {
		t.Errorf("%d claims, want 1", n)
	}
	if strings.Contains(a.stderr.String(), old) {
		t.Error("the message shows the token")
	}
}

// The backend's token is replaced (registered again) while a run trains.
// Expected: the run ends normally, its requests carrying the run's own
// token; only the next claim is refused.
func TestPollingTokenReplacedDuringRun(t *testing.T) {
	s := newPollServer(t, nil)
	addr, _ := s.serve("127.0.0.1:0")
	env := tokenEnv(s)
	s.setFault(func(route string) fault {
		if route == "bundle" {
			s.token = strings.Repeat("99", 32)
		}
		return pass
	})
	a := startAgent(t, addr, t.TempDir(), env)
	select {
	case <-s.done:
	case <-time.After(90 * time.Second):
		t.Fatalf("no result\n%s", a.stderr)
	}
	if code := a.wait(t); code != 1 || !a.says("the server refused the token for backend lab") {
		t.Errorf("exit %d\n%s", code, a.stderr)
	}
	if res := s.result(); res.ExitCode != 0 || res.Error != "" {
		t.Errorf("result %+v", res)
	}
}

// The fault: no server at the agent's start. Expected: the agent waits,
// says so once, and claims the job once the server is up.
func TestPollingServerDownAtStart(t *testing.T) {
	s := newPollServer(t, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	work := t.TempDir()
	a := startAgent(t, addr, work, tokenEnv(s), "--once")
	testproject.WaitFor(t, "the agent to notice the server is down", func() bool { return a.says("claiming a job: ") })
	select {
	case <-a.exited:
		t.Fatalf("the agent gave up\n%s", a.stderr)
	default:
	}
	s.serve(addr)
	if code := a.wait(t); code != 0 {
		t.Fatalf("exit %d\n%s", code, a.stderr)
	}
	res := s.result()
	host, _ := os.Hostname()
	if res == nil || res.ExitCode != 0 || res.Error != "" {
		t.Fatalf("result %+v\n%s", res, a.stderr)
	}
	// G8: HOST:DIR.
	if want := host + ":" + filepath.Join(work, "jobs", pollRunID, "artifacts"); res.ArtifactURI != want {
		t.Errorf("artifact_uri %q, want %q", res.ArtifactURI, want)
	}
	if n := strings.Count(a.stderr.String(), "trying again until the server answers"); n != 1 || !a.says("the server answers again") {
		t.Errorf("the outage is logged %d times, want once, and its end\n%s", n, a.stderr)
	}
}

// The fault: the server goes away while the job runs, from the end of
// the bundle's download until the agent has tried to send its result;
// events get 503, the predictions and the result a dropped connection.
// Expected: every event, the predictions and the result arrive once it
// is back; nothing is lost.
func TestPollingOutageDuringJob(t *testing.T) {
	s := newPollServer(t, nil)
	addr, _ := s.serve("127.0.0.1:0")
	work := t.TempDir()
	// The outage starts once the agent has the bundle in its cache (not
	// when the last byte is sent: the agent hears the server until its
	// download ends) and lasts until the job has ended (its result is
	// spooled) and a few more posts were refused.
	refusedAfter := 0
	downloaded := func() bool {
		m, _ := filepath.Glob(filepath.Join(work, "bundles", "*.tar.gz"))
		return len(m) > 0
	}
	s.setFault(func(route string) fault {
		switch {
		case refusedAfter >= 3 || !downloaded() || route == "claim" || route == "bundle":
			return pass
		case route == "events":
			if _, err := os.Stat(filepath.Join(work, "spool", pollRunID, "item.json")); err == nil {
				refusedAfter++
			}
			return answer503
		}
		return hangUp
	})
	a := startAgent(t, addr, work, tokenEnv(s), "--once")
	if code := a.wait(t); code != 0 {
		t.Fatalf("exit %d\n%s", code, a.stderr)
	}
	if res := s.result(); res == nil || res.ExitCode != 0 || res.Error != "" {
		t.Fatalf("result %+v", res)
	}
	for _, want := range []struct{ kind, text string }{
		{events.KindStatus, "downloading the bundle"},
		{events.KindLog, "training process"},
		{events.KindResult, ""},
	} {
		if !s.hasEvent(want.kind, want.text) {
			t.Errorf("no %s event %q reached the server", want.kind, want.text)
		}
	}
	sent, _ := os.ReadFile(filepath.Join(work, "jobs", pollRunID, "artifacts", "predictions.jsonl"))
	got, err := os.ReadFile(filepath.Join(s.dir, "predictions.jsonl"))
	if err != nil || len(sent) == 0 || !bytes.Equal(sent, got) {
		t.Errorf("the predictions did not arrive whole (%d bytes sent, %d stored, %v)", len(sent), len(got), err)
	}
	if n := strings.Count(a.stderr.String(), "trying again until the server answers"); n != 1 {
		t.Errorf("the outage is logged %d times, want once\n%s", n, a.stderr)
	}
	if _, err := os.Stat(filepath.Join(work, "spool", pollRunID)); !os.IsNotExist(err) {
		t.Errorf("the spool still holds the run: %v", err)
	}
}

// The fault: the agent is killed after its job ended, while the server
// answers 503 to the predictions and the result. Expected: both are in
// the spool, and an agent started again sends them before anything else.
func TestPollingSpoolSurvivesRestart(t *testing.T) {
	s := newPollServer(t, nil)
	addr, _ := s.serve("127.0.0.1:0")
	s.setFault(func(route string) fault {
		if route == "predictions" || route == "result" {
			return answer503
		}
		return pass
	})
	work := t.TempDir()
	spool := filepath.Join(work, "spool", pollRunID)
	a := startAgent(t, addr, work, tokenEnv(s), "--once")
	testproject.WaitFor(t, "the agent to try the result", func() bool {
		_, err := os.Stat(filepath.Join(spool, "item.json"))
		return err == nil && s.seen("predictions") > 0
	})
	a.cmd.Process.Kill()
	a.wait(t)
	fi, err := os.Stat(filepath.Join(spool, "item.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("item.json: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(spool, "predictions.jsonl")); err != nil {
		t.Fatalf("the spooled predictions: %v", err)
	}
	if s.result() != nil {
		t.Fatal("the result arrived through the fault")
	}

	s.setFault(nil)
	b := startAgent(t, addr, work, tokenEnv(s), "--once")
	select {
	case <-s.done:
	case <-time.After(90 * time.Second):
		t.Fatalf("no result after the restart\n%s", b.stderr)
	}
	if res := s.result(); res.ExitCode != 0 || res.Error != "" || !strings.HasSuffix(res.ArtifactURI, filepath.Join(pollRunID, "artifacts")) {
		t.Errorf("result %+v", res)
	}
	want, _ := os.ReadFile(filepath.Join(work, "jobs", pollRunID, "artifacts", "predictions.jsonl"))
	got, err := os.ReadFile(filepath.Join(s.dir, "predictions.jsonl"))
	if err != nil || len(want) == 0 || !bytes.Equal(want, got) {
		t.Errorf("the spooled predictions did not arrive (%v)", err)
	}
	testproject.WaitFor(t, "the spool to empty", func() bool {
		_, err := os.Stat(spool)
		return os.IsNotExist(err)
	})
	if !b.says("sending what it still owes the server") {
		t.Errorf("the restarted agent does not say it resends\n%s", b.stderr)
	}
}

// The fault: a proxy in front of the server refuses the predictions with
// 413. Expected: the agent's log and the result's error say how large
// they are and the server's limit; the predictions are not sent again.
func TestPollingPredictionsTooLarge(t *testing.T) {
	s := newPollServer(t, nil)
	addr, _ := s.serve("127.0.0.1:0")
	s.setFault(func(route string) fault {
		if route == "predictions" {
			return answer413
		}
		return pass
	})
	work := t.TempDir()
	a := startAgent(t, addr, work, tokenEnv(s), "--once")
	code := a.wait(t)
	res := s.result()
	const want = "MB) are over the server's max_predictions_mb (16 MB)"
	if res == nil || !strings.Contains(res.Error, want) || !a.says(want) || res.Code != agentproto.CodeUploadRefused {
		t.Fatalf("exit %d, result %+v\n%s", code, res, a.stderr)
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if n := s.seen("predictions"); n != 1 {
		t.Errorf("the predictions were sent %d times, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(work, "jobs", pollRunID, "artifacts", "predictions.jsonl")); err != nil {
		t.Errorf("the predictions are not kept on the agent's machine: %v", err)
	}
}

// The fault: every connection dropped while the job trains, longer than
// the (shortened) unreachable limit. Expected: the agent stops the
// training process itself and says why; the result stays in the spool
// and an agent started again once the server is back sends it.
func TestPollingUnreachableStopsTheJob(t *testing.T) {
	s := newPollServer(t, nil)
	allow := s.endless()
	addr, _ := s.serve("127.0.0.1:0")
	work := t.TempDir()
	env := append(tokenEnv(s), "POTATO_TRAINING_UNREACHABLE_S=2")
	a := startAgent(t, addr, work, env, append(allow, "--once")...)
	testproject.WaitFor(t, "the training to run", func() bool { return s.hasEvent(events.KindProgress, "") })
	s.setFault(func(string) fault { return hangUp })
	if code := a.wait(t); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{
		"the server could not be reached for 2 seconds: stopping the training process",
		"the result is kept in " + filepath.Join(work, "spool", pollRunID),
	} {
		if !a.says(want) {
			t.Errorf("the agent does not say %q\n%s", want, a.stderr)
		}
	}
	s.setFault(nil)
	b := startAgent(t, addr, work, env, "--once")
	select {
	case <-s.done:
	case <-time.After(90 * time.Second):
		t.Fatalf("no result after the restart\n%s", b.stderr)
	}
	res := s.result()
	if res.ExitCode != -1 || !strings.Contains(res.Error, "the server could not be reached for 2 seconds: it stopped the training process") || res.Code != agentproto.CodeUnreachable {
		t.Errorf("result %+v", res)
	}
}

// The fault: the link breaks in the middle of the bundle. Expected: the
// download resumes with a Range request, re-sending no byte already
// received.
func TestPollingBundleResumes(t *testing.T) {
	s := newPollServerN(t, nil, 20000)
	s.cutAt = s.bundle / 2
	addr, _ := s.serve("127.0.0.1:0")
	a := startAgent(t, addr, t.TempDir(), tokenEnv(s), "--once")
	if code := a.wait(t); code != 0 {
		t.Fatalf("exit %d\n%s", code, a.stderr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	resent := s.bundleTx - s.bundle
	t.Logf("bundle of %d bytes cut after %d; %d bytes sent in all, %d re-sent, requests %q", s.bundle, s.bundle/2, s.bundleTx, resent, s.ranges)
	if want := fmt.Sprintf("bytes=%d-", s.bundle/2); len(s.ranges) != 2 || s.ranges[1] != want {
		t.Errorf("requests %q, want a second one for %s", s.ranges, want)
	}
	if resent != 0 {
		t.Errorf("%d bytes re-sent", resent)
	}
	if testing.Verbose() {
		t.Logf("the agent's log:\n%s", a.stderr)
	}
}

// A job claimed again after its agent was killed finds its bundle in the
// cache: it is not downloaded again.
func TestPollingBundleCachedByDigest(t *testing.T) {
	s := newPollServer(t, nil)
	allow := s.endless()
	s.claims = 2
	addr, _ := s.serve("127.0.0.1:0")
	work := t.TempDir()
	a := startAgent(t, addr, work, tokenEnv(s), append(allow, "--once")...)
	testproject.WaitFor(t, "the training to run", func() bool { return s.hasEvent(events.KindProgress, "") })
	a.cmd.Process.Kill()
	a.wait(t)
	// The killed agent's training process lives on, in its own group.
	if pid := s.trainerPID(); pid > 0 {
		syscall.Kill(-pid, syscall.SIGKILL)
	}
	s.mu.Lock()
	sent := s.bundleTx
	s.mu.Unlock()
	b := startAgent(t, addr, work, tokenEnv(s), append(allow, "--once")...)
	testproject.WaitFor(t, "the job to run again", func() bool { return b.says("cached by digest") })
	b.cmd.Process.Signal(syscall.SIGTERM)
	b.wait(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bundleTx != sent || s.attempts["bundle"] != 1 {
		t.Errorf("the bundle was downloaded again: %d bytes, %d requests", s.bundleTx-sent, s.attempts["bundle"])
	}
	if strings.Contains(b.stderr.String(), s.token) {
		t.Error("the log shows the token")
	}
}

// trainerPID is the training process's pid, from the agent's log event.
func (s *pollServer) trainerPID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.events {
		var pid int
		if _, err := fmt.Sscanf(e.String("msg"), "potato-agent: training process %d started", &pid); err == nil {
			return pid
		}
	}
	return 0
}
