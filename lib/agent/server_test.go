package agent_test

// The agent against the real potato-server on loopback: a run started
// through the server's HTTP API (POST /admin/training/api/runs) on an
// agent backend, claimed by potato-agent --server, started by hand as a
// user would, from a directory of its own with relative paths.

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

const apiKey = "k3y-for-the-agent-tests"

// realServer is potato-server serving a project whose backend lab is of
// type agent, with the token potato-register issued for it.
type realServer struct {
	bin, url, token string
	dir             string // the project's
	stderr          *testcli.SyncBuffer
}

func startRealServer(t *testing.T) *realServer {
	t.Helper()
	bin := testcli.Binaries(t)
	dir := t.TempDir()
	cfg := testproject.Write(t, dir, 120, 100, "  backend: lab\n  backends:\n    lab:\n      type: agent\n")
	testproject.SetAPIKey(t, cfg, apiKey)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &realServer{bin: bin, url: "http://" + addr, dir: dir, stderr: &testcli.SyncBuffer{}}

	tokenFile := filepath.Join(t.TempDir(), "lab.token")
	out, err := exec.Command(filepath.Join(bin, "potato-register"), "lab", cfg, "--server", s.url, "--token-file", tokenFile).CombinedOutput()
	if err != nil {
		t.Fatalf("potato-register: %v\n%s", err, out)
	}
	tok, err := os.ReadFile(tokenFile)
	m := regexp.MustCompile(`^[0-9a-f]{64}$`).Find(bytes.TrimSpace(tok))
	if err != nil || m == nil {
		t.Fatalf("potato-register wrote no token to %s: %v %q\n%s", tokenFile, err, tok, out)
	}
	s.token = string(m)

	srv := exec.Command(filepath.Join(bin, "potato-server"), cfg, "--listen", addr)
	srv.Stderr = s.stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			srv.Process.Kill()
			<-done
		}
	})
	testproject.WaitFor(t, "potato-server to listen", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return s
}

// api makes a request of the server's HTTP API and decodes its answer.
func (s *realServer) api(t *testing.T, method, path, body string, v any) int {
	t.Helper()
	req, err := http.NewRequest(method, s.url+"/admin/training/api"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", apiKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode
}

type runDetail struct {
	RunID       string   `json:"run_id"`
	State       string   `json:"state"`
	Error       string   `json:"error"`
	ArtifactURI string   `json:"artifact_uri"`
	Log         []string `json:"log"`
}

// start starts a run of tfidf-logreg on lab through the API.
func (s *realServer) start(t *testing.T, params string) string {
	t.Helper()
	var r runDetail
	body := `{"trainer":"tfidf-logreg","schemas":["sentiment"],"backend":"lab","params":{` + params + `}}`
	if code := s.api(t, "POST", "/runs", body, &r); code != http.StatusCreated || !rundir.ValidID(r.RunID) {
		t.Fatalf("POST /runs: %d %+v\n%s", code, r, s.stderr)
	}
	return r.RunID
}

// finished waits for run id to end and returns it: its final state
// through the API, then its exit_code, the dispatch's last write, so that
// the test's directories are not removed under a dispatch still writing.
func (s *realServer) finished(t *testing.T, id string) runDetail {
	t.Helper()
	var d runDetail
	testproject.WaitFor(t, "run "+id+" to end", func() bool {
		s.api(t, "GET", "/runs/"+id, "", &d)
		return rundir.Finished(d.State)
	})
	testproject.WaitFor(t, "run "+id+"'s exit_code", func() bool {
		info, err := testproject.Root(s.dir).Read(id)
		return err == nil && info.Finished
	})
	return d
}

// The agent is started by hand in a directory of its own with
// --workdir agentwd and --token-file tok, both relative. Expected: it
// completes a run started through the API, exits 0, and its job's files
// are under ./agentwd/jobs/RUN, named by absolute paths.
func TestAgentRelativeWorkdirCompletesAnAPIRun(t *testing.T) {
	s := startRealServer(t)
	id := s.start(t, "")
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "tok"), []byte(s.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := exec.Command(filepath.Join(s.bin, "potato-agent"), "--server", s.url, "--backend", "lab",
		"--workdir", "agentwd", "--token-file", "tok", "--once")
	a.Dir = cwd
	a.Env = append(os.Environ(), "POTATO_TRAINING_TOKEN=")
	stderr := &testcli.SyncBuffer{}
	a.Stderr = stderr
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { a.Wait(); close(exited) }()
	t.Cleanup(func() { a.Process.Kill(); <-exited })
	select {
	case <-exited:
	case <-time.After(90 * time.Second):
		t.Fatalf("the agent did not exit\n%s", stderr)
	}
	d := s.finished(t, id)
	if code := a.ProcessState.ExitCode(); code != 0 || d.State != rundir.StateSuccess {
		t.Fatalf("agent exit %d, run %s (%s)\nagent:\n%s\nrun log:\n%s", code, d.State, d.Error, stderr, strings.Join(d.Log, "\n"))
	}
	job := filepath.Join(cwd, "agentwd", "jobs", id)
	if fi, err := os.Stat(filepath.Join(job, "artifacts", "predictions.jsonl")); err != nil || fi.Size() == 0 {
		t.Errorf("no predictions in the job's directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(job, "agentwd")); !os.IsNotExist(err) {
		t.Errorf("the job's directory holds a second agentwd: %v", err)
	}
	host, _ := os.Hostname()
	if want := host + ":" + filepath.Join(job, "artifacts"); d.ArtifactURI != want {
		t.Errorf("artifact_uri %q, want %q", d.ArtifactURI, want)
	}
	var spec struct {
		BundleDir string `json:"bundle_dir"`
		Workdir   string `json:"workdir"`
	}
	b, _ := os.ReadFile(filepath.Join(job, "spec.json"))
	if err := json.Unmarshal(b, &spec); err != nil || spec.BundleDir != filepath.Join(job, "bundle") || spec.Workdir != filepath.Join(job, "artifacts") {
		t.Errorf("spec.json names %+v (%v), want absolute paths under %s", spec, err, job)
	}
	if strings.Contains(stderr.String(), s.token) {
		t.Error("the agent's log shows the token")
	}
}
