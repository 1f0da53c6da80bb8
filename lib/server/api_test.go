package server

// The HTTP API against Server.Handler on a loopback test server, with the
// real potato-dispatch and potato-check built from cmd/.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
	"potato-training/lib/validate"
)

const testKey = "k3y-for-tests-only"

type apiEnv struct {
	t   *testing.T
	bin string
	cfg string
	s   *Server
	ts  *httptest.Server
}

func TestMain(m *testing.M) { os.Exit(testcli.Main(m)) }

// newAPI writes a project whose config has admin_api_key set to key
// (none when empty) and whose model_training block ends with extra, and
// serves its API.
func newAPI(t *testing.T, key, extra string) *apiEnv {
	t.Helper()
	e := &apiEnv{t: t, bin: testcli.Binaries(t)}
	dir := t.TempDir()
	e.cfg = testproject.Write(t, dir, 120, 100, extra)
	if key != "" {
		testproject.SetAPIKey(t, e.cfg, key)
	}
	cfg, report, err := validate.File(e.cfg)
	if err != nil || len(report.Errors) > 0 {
		t.Fatalf("config: %v %+v", err, report.Errors)
	}
	root, err := rundir.Open(cfg.TrainingDir())
	if err != nil {
		t.Fatal(err)
	}
	e.s = &Server{ConfigPath: e.cfg, Config: cfg, Root: root,
		Dispatch: filepath.Join(e.bin, "potato-dispatch"), Check: filepath.Join(e.bin, "potato-check"),
		Logf: t.Logf}
	e.ts = httptest.NewServer(e.s.Handler())
	// A wrong key's answer is not delayed in tests: the delays are
	// TestSignInLimit's, on its own clock.
	e.s.signins.sleep = func(context.Context, time.Duration) {}
	t.Cleanup(e.ts.Close)
	t.Cleanup(e.cancelAll)
	return e
}

// cancelAll leaves no dispatch behind a test.
func (e *apiEnv) cancelAll() {
	infos, _ := e.s.Root.List()
	for _, i := range infos {
		if !i.Finished && !i.Gone {
			_ = e.s.Root.RequestCancel(i.RunID)
			for n := 0; n < 200 && !e.info(i.RunID).Finished && !e.info(i.RunID).Gone; n++ {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
}

func (e *apiEnv) info(id string) rundir.Info {
	i, _ := e.s.Root.Read(id)
	return i
}

type answer struct {
	code int
	hdr  http.Header
	body []byte
}

func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("answer %d is not JSON: %v\n%s", a.code, err, a.body)
	}
}

func (a answer) errorText(t *testing.T) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	a.decode(t, &e)
	if e.Error == "" {
		t.Fatalf("answer %d has no error: %s", a.code, a.body)
	}
	return e.Error
}

// do sends a request with the test key, unless headers set X-API-Key
// (to "" for none).
func (e *apiEnv) do(method, path, body string, headers ...string) answer {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.ts.URL+apiPrefix+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("X-API-Key", testKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, hdr: resp.Header, body: b}
}

func (e *apiEnv) start(body string) string {
	e.t.Helper()
	a := e.do("POST", "/runs", body)
	if a.code != http.StatusCreated {
		e.t.Fatalf("POST /runs %s: %d %s", body, a.code, a.body)
	}
	var r struct {
		RunID string `json:"run_id"`
	}
	a.decode(e.t, &r)
	if !rundir.ValidID(r.RunID) || a.hdr.Get("Location") != apiPrefix+"/runs/"+r.RunID {
		e.t.Fatalf("POST /runs: run_id %q, Location %q", r.RunID, a.hdr.Get("Location"))
	}
	return r.RunID
}

func (e *apiEnv) detail(id string) apiRunDetail {
	e.t.Helper()
	a := e.do("GET", "/runs/"+id, "")
	if a.code != http.StatusOK {
		e.t.Fatalf("GET /runs/%s: %d %s", id, a.code, a.body)
	}
	var d apiRunDetail
	a.decode(e.t, &d)
	return d
}

func (e *apiEnv) waitState(id string, want string) apiRunDetail {
	e.t.Helper()
	var d apiRunDetail
	testproject.WaitFor(e.t, "run "+id+" to be "+want, func() bool {
		d = e.detail(id)
		return rundir.Finished(d.State) || d.State == want
	})
	if d.State != want {
		e.t.Fatalf("run %s is %s (%s), want %s\nlog:\n%s", id, d.State, d.Error, want, strings.Join(d.Log, "\n"))
	}
	return d
}

func TestAPIKey(t *testing.T) {
	e := newAPI(t, testKey, "")
	for _, c := range []struct {
		key, path string
		code      int
		text      string
	}{
		{"", "/runs", 401, msgMissingKey},
		{"wrong", "/runs", 401, msgWrongKey},
		{testKey + "x", "/backends", 401, msgWrongKey},
		{"wrong", "/nowhere", 401, msgWrongKey},
		{testKey, "/runs", 200, ""},
		{testKey, "/nowhere", 404, "no such route"},
	} {
		a := e.do("GET", c.path, "", "X-API-Key", c.key)
		if a.code != c.code {
			t.Errorf("key %q %s: %d %s, want %d", c.key, c.path, a.code, a.body, c.code)
			continue
		}
		if c.text != "" {
			if got := a.errorText(t); got != c.text {
				t.Errorf("key %q %s: error %q, want %q", c.key, c.path, got, c.text)
			}
		}
	}
	if a := e.do("POST", "/runs", `{}`, "X-API-Key", "wrong"); a.code != 401 {
		t.Errorf("POST with a wrong key: %d %s", a.code, a.body)
	}
	if n, _ := os.ReadDir(filepath.Join(e.s.Root.Dir, "runs")); len(n) != 0 {
		t.Errorf("a refused request left %d run directories", len(n))
	}
}

func TestAPIWithoutKeyConfigured(t *testing.T) {
	e := newAPI(t, "", "")
	for _, key := range []string{"", "anything"} {
		a := e.do("GET", "/runs", "", "X-API-Key", key)
		if a.code != http.StatusForbidden || !strings.Contains(a.errorText(t), "admin_api_key is not set") {
			t.Errorf("key %q with no admin_api_key: %d %s", key, a.code, a.body)
		}
	}
}

func TestAPICrossOrigin(t *testing.T) {
	e := newAPI(t, testKey, "")
	body := `{"trainer":"tfidf-logreg","schemas":["nope"]}`
	for _, h := range [][]string{
		{"Origin", "http://evil.example"},
		{"Origin", "null"},
		{"Origin", strings.Replace(e.ts.URL, "http:", "https:", 1)},
		{"Sec-Fetch-Site", "cross-site"},
	} {
		a := e.do("POST", "/runs", body, h...)
		if a.code != http.StatusForbidden || a.errorText(t) != msgCrossOrigin {
			t.Errorf("%s: %s: %d %s, want 403", h[0], h[1], a.code, a.body)
		}
		if a.hdr.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%s: %s: a CORS header was sent", h[0], h[1])
		}
	}
	// The server's own origin, and a same-origin fetch, pass the gate (and
	// are refused for the unknown schema).
	for _, h := range [][]string{{"Origin", e.ts.URL}, {"Sec-Fetch-Site", "same-origin"}} {
		if a := e.do("POST", "/runs", body, h...); a.code != http.StatusBadRequest {
			t.Errorf("%s: %s: %d %s, want 400", h[0], h[1], a.code, a.body)
		}
	}
	// Reads are not state changes.
	if a := e.do("GET", "/runs", "", "Origin", "http://evil.example"); a.code != 200 {
		t.Errorf("cross-origin GET: %d %s", a.code, a.body)
	}
}

func TestAPIStartRun(t *testing.T) {
	e := newAPI(t, testKey, "")
	id := e.start(`{"trainer":"tfidf-logreg","schemas":["sentiment"],"backend":"local","params":{"max_features":"500"}}`)
	a := e.do("GET", "/runs", "")
	var runs []apiRun
	a.decode(t, &runs)
	if a.code != 200 || len(runs) != 1 || runs[0].RunID != id || runs[0].Trigger != "api" || runs[0].Params["max_features"] != "500" {
		t.Fatalf("GET /runs: %d %s", a.code, a.body)
	}
	d := e.waitState(id, rundir.StateSuccess)
	if d.RanOn != "local (this machine)" || d.Heldout == nil || len(d.Log) == 0 || len(d.Events) == 0 {
		t.Errorf("run %s: ran_on %q heldout %v, %d log lines, %d events", id, d.RanOn, d.Heldout, len(d.Log), len(d.Events))
	}
	for _, ev := range d.Events {
		var m map[string]any
		if json.Unmarshal(ev, &m) != nil || m["v"] != 1.0 {
			t.Errorf("event %s is not a v1 event", ev)
		}
	}

	second := e.start(`{"trainer":"tfidf-logreg","schemas":["sentiment"]}`)
	e.waitState(second, rundir.StateSuccess)
	e.do("GET", "/runs", "").decode(t, &runs)
	if len(runs) != 2 || runs[0].RunID != second || runs[1].RunID != id {
		t.Errorf("GET /runs is not newest first: %+v", runs)
	}
}

// The refusals: nothing is recorded for any of them.
func TestAPIStartRefused(t *testing.T) {
	e := newAPI(t, testKey, "")
	for _, c := range []struct {
		body string
		code int
		text string
	}{
		{`{"trainer":"tfidf-logreg","schemas":["sentiment"],"backend":"gpu-server"}`, 409, `no backend "gpu-server" in the config: the backends are local`},
		{`{"trainer":"tfidf-logreg","schemas":["sentiment"]`, 400, "the body is not a run request"},
		{``, 400, "the body is not a run request"},
		{`{"trainer":"tfidf-logreg","schemas":["sentiment"]} {}`, 400, "more than one JSON value"},
		{`{"trainer":"tfidf-logreg","schemas":["sentiment"],"gpu":1}`, 400, `unknown field "gpu"`},
		{`{"trainer":"tfidf-logreg","schemas":["sentiment"],"params":{"n":1}}`, 400, "the body is not a run request"},
		{`{"trainer":"tfidf-logreg","schemas":["mood"]}`, 400, `schema "mood" is not in annotation_schemes`},
		{`{"trainer":"tfidf-logreg","schemas":[]}`, 400, "no schema given"},
		{`{"schemas":["sentiment"]}`, 400, "no trainer given"},
		{`{"trainer":"tfidf-logreg","schemas":["sentiment"],"params":{"--backend":"x"}}`, 400, `param "--backend"`},
		{`{"trainer":"tfidf-logreg","schemas":["sentiment"],"params":{"-x":"1"}}`, 400, `param "-x"`},
		{`{"trainer":"tfidf-logreg","schemas":["sentiment"],"params":{"a=b":"1"}}`, 400, `param "a=b"`},
		{`{"trainer":"--detach","schemas":["sentiment"]}`, 400, `unknown trainer "--detach"`},
		{`{"trainer":"exec:/bin/sh","schemas":["sentiment"]}`, 400, `trainer "exec:/bin/sh" names a program`},
		// decision-calibrate's own params name the SQLite file it reads:
		// an API caller could point it at any file the server may read.
		{`{"trainer":"decision-calibrate","schemas":["sentiment"],"params":{"store":"/etc/other/project.sqlite"}}`, 400, `param "store" is the toolkit's own`},
		{`{"trainer":"decision-calibrate","schemas":["sentiment"],"params":{"project":"Other Project","run_id":"x"}}`, 400, `param "project" is the toolkit's own`},
		// Refused by potato-dispatch itself (exit 2).
		{`{"trainer":"no-such-trainer","schemas":["sentiment"]}`, 400, `unknown trainer "no-such-trainer"`},
	} {
		a := e.do("POST", "/runs", c.body)
		if a.code != c.code || !strings.Contains(a.errorText(t), c.text) {
			t.Errorf("POST /runs %s: %d %s, want %d %q", c.body, a.code, a.body, c.code, c.text)
		}
	}
	if n, _ := os.ReadDir(filepath.Join(e.s.Root.Dir, "runs")); len(n) != 0 {
		t.Errorf("refused requests left %d run directories", len(n))
	}
}

func TestAPIMethodsAndUnknownRuns(t *testing.T) {
	e := newAPI(t, testKey, "")
	for _, c := range []struct{ method, path, allow string }{
		{"DELETE", "/runs", "GET, HEAD, POST"},
		{"POST", "/runs/20261202-135501-7f3a", "GET, HEAD"},
		{"GET", "/runs/20261202-135501-7f3a/cancel", "POST"},
		{"PUT", "/backends", "GET, HEAD"},
		{"POST", "/backends/local/check", "GET, HEAD"},
	} {
		a := e.do(c.method, c.path, "")
		if a.code != http.StatusMethodNotAllowed || a.hdr.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d Allow %q, want 405 Allow %q", c.method, c.path, a.code, a.hdr.Get("Allow"), c.allow)
		}
		a.errorText(t)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/runs/20261202-135501-7f3a"},
		{"GET", "/runs/..%2f..%2fetc"},
		{"GET", "/runs/not-an-id"},
		{"POST", "/runs/20261202-135501-7f3a/cancel"},
		{"POST", "/runs/not-an-id/cancel"},
		{"GET", "/backends/nope/check"},
		{"GET", "/backends//check"},
	} {
		if a := e.do(c.method, c.path, ""); a.code != http.StatusNotFound {
			t.Errorf("%s %s: %d %s, want 404", c.method, c.path, a.code, a.body)
		} else {
			a.errorText(t)
		}
	}
}

// A run waits in the queue behind a long one; both are cancelled through
// the API, and a finished run cannot be cancelled again.
func TestAPICancel(t *testing.T) {
	e := newAPI(t, testKey, "")
	// The long run is started on the server's command line: the API does
	// not start exec: trainers.
	long := testproject.Trainer(e.t, t.TempDir(), "echo '{\"v\":1,\"event\":\"status\",\"state\":\"running\",\"step\":\"sleeping\"}'\nsleep 60\n"+testproject.ResultLines)
	out, err := exec.Command(filepath.Join(e.bin, "potato-dispatch"), "run", e.cfg, "--trainer", long, "--schemas", "sentiment", "--detach").Output()
	if err != nil {
		t.Fatal(err)
	}
	longID := strings.TrimSpace(string(out))
	e.waitState(longID, rundir.StateRunning)

	queued := e.start(`{"trainer":"tfidf-logreg","schemas":["sentiment"]}`)
	var runs []apiRun
	testproject.WaitFor(t, "the queued run", func() bool {
		e.do("GET", "/runs", "").decode(t, &runs)
		return len(runs) == 2 && runs[0].State == rundir.StateQueued
	})
	if runs[0].RunID != queued || runs[0].QueuePosition != 1 || runs[1].QueuePosition != 0 {
		t.Errorf("queue positions: %+v", runs)
	}
	// ?limit keeps the newest runs; X-Total-Count says how many there are.
	a := e.do("GET", "/runs?limit=1", "")
	var newest []apiRun
	a.decode(t, &newest)
	if a.code != 200 || len(newest) != 1 || newest[0].RunID != queued || newest[0].QueuePosition != 1 || a.hdr.Get("X-Total-Count") != "2" {
		t.Errorf("GET /runs?limit=1: %d %s %s", a.code, a.hdr.Get("X-Total-Count"), a.body)
	}
	// With current=1 the executing run comes too, after the newest, when it
	// is older than they are: the page never loses the run under way.
	a = e.do("GET", "/runs?limit=1&current=1", "")
	var withCurrent []apiRun
	a.decode(t, &withCurrent)
	if a.code != 200 || len(withCurrent) != 2 || withCurrent[0].RunID != queued || withCurrent[1].RunID != longID ||
		a.hdr.Get("X-Total-Count") != "2" {
		t.Errorf("GET /runs?limit=1&current=1: %d %s %s", a.code, a.hdr.Get("X-Total-Count"), a.body)
	}
	if a := e.do("GET", "/runs?limit=0", ""); a.code != http.StatusBadRequest {
		t.Errorf("GET /runs?limit=0: %d %s", a.code, a.body)
	}
	if d := e.detail(queued); d.QueuePosition != 1 {
		t.Errorf("GET /runs/%s: queue_position %d, want 1", queued, d.QueuePosition)
	}
	// Its dispatch is not the server's child and has a session of its own.
	if d := e.detail(queued); d.PID != 0 {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.PID))
		if err != nil {
			t.Fatalf("the dispatch of run %s: %v", queued, err)
		}
		self, err := os.ReadFile("/proc/self/stat")
		if err != nil {
			t.Fatal(err)
		}
		// "pid (comm) state ppid pgrp session ...": the fields after comm.
		fields := func(b []byte) []string { return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])) }
		f, me := fields(stat), fields(self)
		if f[1] == strconv.Itoa(os.Getpid()) || f[3] == me[3] {
			t.Errorf("the dispatch of run %s: ppid %s session %s; the server: pid %d session %s", queued, f[1], f[3], os.Getpid(), me[3])
		}
	}

	for _, id := range []string{queued, longID} {
		a := e.do("POST", "/runs/"+id+"/cancel", "", "Origin", e.ts.URL)
		if a.code != http.StatusAccepted {
			t.Fatalf("cancel %s: %d %s", id, a.code, a.body)
		}
		d := e.waitState(id, rundir.StateCancelled)
		if d.ExitCode == nil || *d.ExitCode != 3 {
			t.Errorf("run %s: exit_code %v, want 3", id, d.ExitCode)
		}
	}
	a = e.do("POST", "/runs/"+longID+"/cancel", "")
	if a.code != http.StatusConflict || !strings.Contains(a.errorText(t), "finished already (cancelled)") {
		t.Errorf("cancel of a finished run: %d %s", a.code, a.body)
	}
}

func TestAPIBackends(t *testing.T) {
	e := newAPI(t, testKey, `  backend: gpu-server
  backends:
    gpu-server:
      type: ssh
      host: gpu.example.org
      description: the lab's A100s
    lab-workstation:
      type: agent
    fresh:
      type: agent
`)
	seen := time.Now().Add(-2 * time.Minute).UTC().Truncate(time.Second)
	if _, err := e.s.Root.IssueToken("lab-workstation", seen.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Root.AgentSeen("lab-workstation", "ws-01", seen); err != nil {
		t.Fatal(err)
	}
	a := e.do("GET", "/backends", "")
	var got []apiBackend
	a.decode(t, &got)
	if a.code != 200 || len(got) != 4 {
		t.Fatalf("GET /backends: %d %s", a.code, a.body)
	}
	want := []struct{ name, typ, host, label string }{
		{"local", "local", "", "local (this machine)"},
		{"gpu-server", "ssh", "gpu.example.org", "gpu-server (ssh to gpu.example.org)"},
		{"lab-workstation", "agent", "", "lab-workstation (agent)"},
		{"fresh", "agent", "", "fresh (agent)"},
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.name || g.Type != w.typ || g.Host != w.host || g.Label != w.label || g.Default != (w.name == "gpu-server") {
			t.Errorf("backend %d: %+v, want %+v", i, g, w)
		}
	}
	if got[1].Description != "the lab's A100s" {
		t.Errorf("description %q", got[1].Description)
	}
	if g := got[2]; g.LastSeen == nil || !g.LastSeen.Equal(seen) || g.LastHost != "ws-01" || g.TokenIssuedAt == nil {
		t.Errorf("agent backend: %s", a.body)
	}
	if g := got[3]; g.LastSeen != nil || g.TokenIssuedAt != nil || bytes.Contains(a.body, []byte("token_sha256")) {
		t.Errorf("agent backend with no token: %s", a.body)
	}

	// The check judges the trainer the query names.
	a = e.do("GET", "/backends/local/check?trainer=tfidf-logreg", "")
	var rep struct {
		Backend string `json:"backend"`
		OK      bool   `json:"ok"`
		Summary string `json:"summary"`
		Trainer string `json:"trainer"`
	}
	a.decode(t, &rep)
	if a.code != 200 || !rep.OK || rep.Backend != "local" || rep.Trainer != "tfidf-logreg" {
		t.Errorf("check local: %d %s", a.code, a.body)
	}
	if a = e.do("GET", "/backends/local/check?trainer=nope", ""); a.code != 400 || !bytes.Contains(a.body, []byte(`unknown trainer \"nope\"`)) {
		t.Errorf("check for an unknown trainer: %d %s", a.code, a.body)
	}
	// A program is refused before potato-check runs, as the start route
	// refuses it: the answer is the same for a path that exists and one
	// that does not, so an API key does not tell which files the server
	// has.
	var refused []string
	for _, path := range []string{"/bin/sh", "/no/such/program"} {
		a = e.do("GET", "/backends/local/check?trainer="+url.QueryEscape("exec:"+path), "")
		msg := a.errorText(t)
		if a.code != 400 || msg != fmt.Sprintf(msgExecCheck, "exec:"+path) {
			t.Errorf("check of exec:%s: %d %s", path, a.code, a.body)
		}
		refused = append(refused, strings.Replace(string(a.body), path, "PATH", 1))
	}
	if refused[0] != refused[1] {
		t.Errorf("the check tells a path that exists from one that does not:\n%s\n%s", refused[0], refused[1])
	}
	// A "no" is a report too: the agent backend has no token.
	a = e.do("GET", "/backends/fresh/check", "")
	a.decode(t, &rep)
	if a.code != 200 || rep.OK || rep.Backend != "fresh" {
		t.Errorf("check fresh: %d %s", a.code, a.body)
	}
}
