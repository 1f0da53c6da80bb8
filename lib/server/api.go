package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
	"potato-training/lib/trainer/calibrate"
)

// apiPrefix is the root of the HTTP API (SPEC A2, A3).
const apiPrefix = "/admin/training/api"

// Bounds of the API's requests and of the programs it starts.
const (
	maxBody       = 1 << 20
	maxParams     = 100
	maxParamValue = 4096
	// startTimeout bounds potato-dispatch run --detach, which returns as
	// soon as the run is recorded.
	startTimeout = 60 * time.Second
	// retractTimeout bounds potato-dispatch retract, which waits at most
	// 5 s for Potato's store.
	retractTimeout = 60 * time.Second
	// checkTimeout bounds potato-check, which may wait on ssh.
	checkTimeout = 60 * time.Second
	// maxChecks is how many potato-check processes may run at once.
	maxChecks  = 4
	eventLines = 50
	logLines   = 100
)

// Texts of the API's refusals that users and tests match.
const (
	msgNoAPIKey     = "admin_api_key is not set in the config: the HTTP API is off until it is"
	msgMissingKey   = "missing X-API-Key header"
	msgWrongKey     = "wrong API key"
	msgSessionEnded = "the page's session has ended: sign in again"
	msgCrossOrigin  = "cross-origin request refused"
	msgNoBackend    = "no backend %q in the config: the backends are %s"
	msgExecTrainer  = "trainer %q names a program: the HTTP API starts only trainers known by name; run potato-dispatch run on the server to use a program"
	msgExecCheck    = "trainer %q names a program: the HTTP API checks only trainers known by name; run potato-check on the server to check a program"
)

// paramKey is what a trainer parameter's name may be: it cannot start
// with "-" (a flag) or hold "=" (the KEY=VALUE separator).
var paramKey = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$`)

// apiError is a refusal: the status and the message of {"error": ...}.
type apiError struct {
	code  int
	msg   string
	hints []string
	// retry, when set, is the Retry-After of a 429.
	retry time.Duration
}

func (e *apiError) Error() string { return e.msg }

func errorf(code int, format string, args ...any) *apiError {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

type api struct {
	s      *Server
	checks chan struct{}
}

// mountAPI adds the HTTP API under /admin/training/api.
func (s *Server) mountAPI(mux *http.ServeMux) {
	a := &api{s: s, checks: make(chan struct{}, maxChecks)}
	mux.Handle(apiPrefix+"/", a)
}

// ServeHTTP checks where a request comes from and who sends it, then
// routes it.
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := sameOrigin(r); err != nil {
		a.fail(w, err)
		return
	}
	if err := a.s.authorize(r); err != nil {
		a.fail(w, err)
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, apiPrefix+"/"), "/")
	route := func(allow string, h func(http.ResponseWriter, *http.Request, []string)) {
		if !slices.Contains(strings.Split(allow, ", "), r.Method) {
			w.Header().Set("Allow", allow)
			agentproto.WriteError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed here")
			return
		}
		h(w, r, parts)
	}
	switch {
	case len(parts) == 1 && parts[0] == "runs":
		route("GET, HEAD, POST", func(w http.ResponseWriter, r *http.Request, _ []string) {
			if r.Method == http.MethodPost {
				a.startRun(w, r)
			} else {
				a.listRuns(w, r)
			}
		})
	case len(parts) == 2 && parts[0] == "runs":
		route("GET, HEAD", a.getRun)
	case len(parts) == 3 && parts[0] == "runs" && parts[2] == "cancel":
		route("POST", a.cancelRun)
	case len(parts) == 3 && parts[0] == "runs" && parts[2] == "predictions":
		route("DELETE", a.retractRun)
	case len(parts) == 3 && parts[0] == "runs" && parts[2] == "hub":
		route("GET, HEAD, POST", a.hub)
	case len(parts) == 1 && parts[0] == "backends":
		route("GET, HEAD", a.listBackends)
	case len(parts) == 3 && parts[0] == "backends" && parts[2] == "check":
		route("GET, HEAD", a.checkBackend)
	case len(parts) == 1 && parts[0] == "report":
		route("GET, HEAD", a.acceptance)
	default:
		agentproto.WriteError(w, http.StatusNotFound, "no such route")
	}
}

func (a *api) fail(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		a.s.logf("api: %v", err)
		ae = &apiError{code: http.StatusInternalServerError, msg: err.Error()}
	}
	if ae.retry > 0 {
		retryAfter(w, ae.retry)
	}
	if len(ae.hints) == 0 {
		agentproto.WriteError(w, ae.code, ae.msg)
		return
	}
	agentproto.WriteJSON(w, ae.code, map[string]any{"error": ae.msg, "hints": ae.hints})
}

// authorize is the API's one gate: the X-API-Key header must be the
// config's admin_api_key, or the request comes from the page with a
// session and, unless it only reads, the session's CSRF token. A wrong
// key counts as a failed sign-in of its client, as the page's form does.
func (s *Server) authorize(r *http.Request) *apiError {
	if s.apiKey() == "" {
		return errorf(http.StatusForbidden, msgNoAPIKey)
	}
	got := r.Header.Get("X-API-Key")
	if got == "" {
		// The page's requests: a session, and for a change its CSRF
		// token.
		if sess := s.session(r, time.Now()); sess != "" {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				return nil
			}
			return s.checkCSRF(sess, r.Header.Get(csrfHeader))
		}
		if _, err := r.Cookie(cookieName(r)); err == nil {
			return errorf(http.StatusUnauthorized, msgSessionEnded)
		}
		return errorf(http.StatusUnauthorized, msgMissingKey)
	}
	client := clientAddr(r)
	if left := s.signins.begin(client); left > 0 {
		return &apiError{code: http.StatusTooManyRequests, msg: fmt.Sprintf(msgLockedOut, waitText(left)), retry: left}
	}
	ok := s.isAPIKey(got)
	delay, locked := s.signins.end(client, ok)
	if !ok {
		if left := s.signInFailed(r, fmt.Sprintf("api: %s %q", r.Method, r.URL.Path), delay, locked); left > 0 {
			return &apiError{code: http.StatusTooManyRequests, msg: fmt.Sprintf(msgLockedOut, waitText(left)), retry: left}
		}
		return errorf(http.StatusUnauthorized, msgWrongKey)
	}
	return nil
}

// isAPIKey compares got with the config's admin_api_key, hashes first, so
// that the comparison takes as long whatever the lengths.
func (s *Server) isAPIKey(got string) bool {
	key := s.apiKey()
	if key == "" {
		return false
	}
	g, k := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(key))
	return subtle.ConstantTimeCompare(g[:], k[:]) == 1
}

// scheme is how the client reached the server: "https" over TLS, behind
// a trusted proxy that ends TLS its X-Forwarded-Proto (withProxies removes
// the header from anyone else), else "http".
func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	if p := r.Header.Get("X-Forwarded-Proto"); p != "" {
		return p
	}
	return "http"
}

// sameOrigin refuses a state change sent by a page of another site: an
// Origin other than the server's own, or Sec-Fetch-Site: cross-site.
// Reads are left alone; the API sends no CORS headers, so another site
// cannot read their answers.
func sameOrigin(r *http.Request) *apiError {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return errorf(http.StatusForbidden, msgCrossOrigin)
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return errorf(http.StatusForbidden, msgCrossOrigin)
	}
	if !strings.EqualFold(u.Scheme, scheme(r)) {
		return errorf(http.StatusForbidden, msgCrossOrigin)
	}
	return nil
}

// startRequest is the body of POST /runs.
type startRequest struct {
	Trainer string            `json:"trainer"`
	Schemas []string          `json:"schemas"`
	Backend string            `json:"backend"`
	Params  map[string]string `json:"params"`
}

// startRun starts a run with potato-dispatch run --detach, which records
// it, prints its id and leaves it to a dispatch in a session of its own:
// the run is not the server's child and outlives it.
func (a *api) startRun(w http.ResponseWriter, r *http.Request) {
	req, err := decodeStart(w, r)
	if err != nil {
		a.fail(w, err)
		return
	}
	args, err := a.runArgs(req)
	if err != nil {
		a.fail(w, err)
		return
	}
	id, err := a.dispatch(r.Context(), args)
	if err != nil {
		a.fail(w, err)
		return
	}
	a.s.logf("run %s started through the API: trainer %s, schemas %s", id, req.Trainer, strings.Join(req.Schemas, ","))
	w.Header().Set("Location", apiPrefix+"/runs/"+id)
	agentproto.WriteJSON(w, http.StatusCreated, map[string]string{"run_id": id})
}

func decodeStart(w http.ResponseWriter, r *http.Request) (*startRequest, error) {
	if r.ContentLength > maxBody { // refused unread
		return nil, errorf(http.StatusRequestEntityTooLarge, "the body is over %d bytes", maxBody)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	var req startRequest
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errorf(http.StatusRequestEntityTooLarge, "the body is over %d bytes", maxBody)
		}
		return nil, errorf(http.StatusBadRequest, "the body is not a run request: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errorf(http.StatusBadRequest, "the body holds more than one JSON value")
	}
	return &req, nil
}

// runArgs checks a request against the config and turns it into
// potato-dispatch's arguments. Every value goes in its own --flag=VALUE
// argument, so none can be taken for a flag.
func (a *api) runArgs(req *startRequest) ([]string, error) {
	cfg := a.s.Config
	if req.Backend != "" {
		if _, ok := cfg.Backend(req.Backend); !ok {
			return nil, errorf(http.StatusConflict, msgNoBackend, req.Backend, strings.Join(cfg.BackendNames(), ", "))
		}
	}
	switch {
	case req.Trainer == "":
		return nil, errorf(http.StatusBadRequest, "no trainer given: for example \"trainer\": \"tfidf-logreg\"")
	case strings.HasPrefix(req.Trainer, "exec:"):
		return nil, errorf(http.StatusBadRequest, msgExecTrainer, req.Trainer)
	case strings.HasPrefix(req.Trainer, "-") || !printable(req.Trainer) || len(req.Trainer) > 200:
		return nil, errorf(http.StatusBadRequest, "unknown trainer %q", req.Trainer)
	case len(req.Schemas) == 0:
		return nil, errorf(http.StatusBadRequest, "no schema given: for example \"schemas\": [\"sentiment\"]")
	case len(req.Params) > maxParams:
		return nil, errorf(http.StatusBadRequest, "more than %d params", maxParams)
	}
	for _, name := range req.Schemas {
		if _, ok := cfg.Scheme(name); !ok || strings.Contains(name, ",") {
			return nil, errorf(http.StatusBadRequest, "schema %q is not in annotation_schemes of the config", name)
		}
	}
	args := []string{"run", a.s.ConfigPath, "--trainer=" + req.Trainer, "--schemas=" + strings.Join(req.Schemas, ",")}
	if req.Backend != "" {
		args = append(args, "--backend="+req.Backend)
	}
	keys := make([]string, 0, len(req.Params))
	for k := range req.Params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := req.Params[k]
		if !paramKey.MatchString(k) {
			return nil, errorf(http.StatusBadRequest, "param %q: a name is letters, digits, \"_\", \".\" and \"-\", and does not start with \"-\" or \".\"", k)
		}
		if k == calibrate.ParamStore || k == calibrate.ParamProject {
			// decision-calibrate's store and project name the SQLite file it
			// reads: the local backend sets them to the project's own.
			return nil, errorf(http.StatusBadRequest, "param %q is the toolkit's own, set to the project's store; the API does not take it", k)
		}
		if strings.ContainsRune(v, 0) || len(v) > maxParamValue {
			return nil, errorf(http.StatusBadRequest, "param %q: the value holds a NUL byte or is over %d bytes", k, maxParamValue)
		}
		args = append(args, "--param="+k+"="+v)
	}
	return append(args, "--trigger=api", "--detach"), nil
}

func printable(s string) bool {
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// dispatch runs potato-dispatch with args and returns the run id it
// prints. Its refusals (exit 2) become 400s carrying its message.
func (a *api) dispatch(ctx context.Context, args []string) (string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := command(ctx, a.s.Dispatch, args, &stdout, &stderr)
	err := cmd.Run()
	id := strings.TrimSpace(stdout.String())
	if err == nil && rundir.ValidID(id) {
		return id, nil
	}
	msg, hints := childMessage("potato-dispatch", stderr.String())
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return "", errorf(http.StatusInternalServerError, "potato-dispatch did not report a run id within %s", startTimeout)
	case errors.As(err, &ee) && ee.ExitCode() == 2:
		return "", &apiError{code: http.StatusBadRequest, msg: msg, hints: hints}
	case err != nil && msg != "":
		return "", &apiError{code: http.StatusInternalServerError, msg: msg, hints: hints}
	case err != nil:
		return "", errorf(http.StatusInternalServerError, "running potato-dispatch: %v", err)
	}
	return "", errorf(http.StatusInternalServerError, "potato-dispatch printed no run id")
}

// command makes a child that does not share the server's session, so a
// signal to the server's terminal or process group never reaches it, and
// that is killed with its group when ctx ends.
func command(ctx context.Context, prog string, args []string, stdout, stderr io.Writer) *exec.Cmd {
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// childMessage turns a child's "name: error:" and "name: hint:" lines
// into a message and hints.
func childMessage(name, stderr string) (string, []string) {
	var msg, hints []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		switch {
		case strings.HasPrefix(l, name+": hint: "):
			hints = append(hints, strings.TrimPrefix(l, name+": hint: "))
		case l != "":
			msg = append(msg, strings.TrimPrefix(l, name+": error: "))
		}
	}
	return strings.Join(msg, "\n"), hints
}

// apiRun is a run as the API shows it: run.json's record, corrected for
// a dispatch that is gone, and the run's place in the queue.
type apiRun struct {
	rundir.Record
	// QueuePosition is 1 for the next run to start; absent for a run not
	// waiting in the queue.
	QueuePosition int `json:"queue_position,omitempty"`
}

// apiRunDetail is GET /runs/<id>.
type apiRunDetail struct {
	apiRun
	Events []json.RawMessage `json:"events"`
	Log    []string          `json:"log"`
	// MetricEvents are all the run's metric events, which the page's
	// charts draw (metricEvents).
	MetricEvents []metricEvent `json:"metric_events"`
}

// runs lists the runs, newest first. A run waits in the queue when it is
// queued and has not started: a run of an agent backend is queued again
// while it waits for an agent, but it holds the queue meanwhile.
func (a *api) runs() ([]apiRun, error) {
	infos, err := a.s.runs.List(a.s.Root)
	if errors.Is(err, fs.ErrNotExist) {
		return []apiRun{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]apiRun, len(infos))
	pos := 0
	for i, info := range infos {
		run := apiRun{Record: info.Record}
		if !info.Finished && !info.Gone && info.State == rundir.StateQueued && info.StartedAt == nil {
			pos++
			run.QueuePosition = pos
		}
		out[len(infos)-1-i] = run
	}
	return out, nil
}

// listRuns is GET /runs, newest first; ?limit=N keeps the newest N, and
// with ?current=1 also the run executing and the next in the queue where
// they are older than those, so that a page that shows the newest runs
// still shows the run under way however many wait behind it.
func (a *api) listRuns(w http.ResponseWriter, r *http.Request) {
	limit := 0
	current := r.URL.Query().Get("current") == "1"
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			a.fail(w, errorf(http.StatusBadRequest, "limit %q is not a positive number of runs", v))
			return
		}
		limit = n
	}
	runs, err := a.runs()
	if err != nil {
		a.fail(w, err)
		return
	}
	w.Header().Set("X-Total-Count", strconv.Itoa(len(runs)))
	if limit > 0 && len(runs) > limit {
		kept := runs[:limit:limit]
		if current {
			for _, run := range runs[limit:] {
				if run.current() {
					kept = append(kept, run)
				}
			}
		}
		runs = kept
	}
	agentproto.WriteJSON(w, http.StatusOK, runs)
}

// current reports whether the run is the one under way: executing, or the
// next to start.
func (r apiRun) current() bool {
	if r.QueuePosition > 0 {
		return r.QueuePosition == 1
	}
	switch r.State {
	case rundir.StateSuccess, rundir.StateError, rundir.StateCancelled:
		return false
	}
	return true
}

// run finds one run among the runs, or answers 404.
func (a *api) run(id string) (apiRun, error) {
	if !rundir.ValidID(id) {
		return apiRun{}, errorf(http.StatusNotFound, "no run %q", id)
	}
	if _, err := os.Stat(filepath.Join(a.s.Root.RunDir(id), rundir.RecordFile)); errors.Is(err, fs.ErrNotExist) {
		return apiRun{}, errorf(http.StatusNotFound, "no run %s", id)
	}
	runs, err := a.runs()
	if err != nil {
		return apiRun{}, err
	}
	for _, run := range runs {
		if run.RunID == id {
			return run, nil
		}
	}
	// Listed runs are the readable ones: a record that cannot be read
	// says why.
	if _, err := a.s.Root.Read(id); err != nil {
		return apiRun{}, err
	}
	return apiRun{}, errorf(http.StatusNotFound, "no run %s", id)
}

func (a *api) getRun(w http.ResponseWriter, r *http.Request, parts []string) {
	run, err := a.run(parts[1])
	if err != nil {
		a.fail(w, err)
		return
	}
	dir := a.s.Root.RunDir(run.RunID)
	d := apiRunDetail{apiRun: run, Events: []json.RawMessage{}, Log: []string{}}
	lines, _ := rundir.TailLines(filepath.Join(dir, rundir.EventsFile), eventLines)
	for _, l := range lines {
		if json.Valid([]byte(l)) {
			d.Events = append(d.Events, json.RawMessage(l))
		}
	}
	if lines, _ := rundir.TailLines(filepath.Join(dir, rundir.LogFile), logLines); lines != nil {
		d.Log = lines
	}
	if d.MetricEvents, err = a.s.metrics.metricEvents(run.RunID, dir); err != nil {
		a.s.logf("run %s: its metric events: %v", run.RunID, err)
		d.MetricEvents = []metricEvent{}
	}
	agentproto.WriteJSON(w, http.StatusOK, d)
}

// cancelRun asks a run's dispatch to stop it, as potato-dispatch cancel
// does; the dispatch records the outcome.
func (a *api) cancelRun(w http.ResponseWriter, r *http.Request, parts []string) {
	id := parts[1]
	if !rundir.ValidID(id) {
		a.fail(w, errorf(http.StatusNotFound, "no run %q", id))
		return
	}
	info, err := a.s.Root.Read(id)
	if err != nil {
		if _, serr := os.Stat(filepath.Join(a.s.Root.RunDir(id), rundir.RecordFile)); errors.Is(serr, fs.ErrNotExist) {
			err = errorf(http.StatusNotFound, "no run %s", id)
		}
		a.fail(w, err)
		return
	}
	switch {
	case info.Finished:
		a.fail(w, errorf(http.StatusConflict, "run %s is finished already (%s)", id, info.State))
		return
	case info.Gone:
		a.fail(w, errorf(http.StatusConflict, "run %s: %s", id, rundir.GoneError))
		return
	}
	if err := a.s.Root.RequestCancel(id); err != nil {
		a.fail(w, err)
		return
	}
	a.s.logf("run %s: cancel requested through the API", id)
	agentproto.WriteJSON(w, http.StatusAccepted, map[string]string{"run_id": id, "state": info.State})
}

// retractRun deletes a finished run's prelabels from Potato's store with
// potato-dispatch retract, and answers {"retracted": n}, as Potato's
// DELETE .../runs/<id>/predictions does; the run stays.
func (a *api) retractRun(w http.ResponseWriter, r *http.Request, parts []string) {
	id := parts[1]
	if !rundir.ValidID(id) {
		a.fail(w, errorf(http.StatusNotFound, "no run %q", id))
		return
	}
	info, err := a.s.Root.Read(id)
	if err != nil {
		if _, serr := os.Stat(filepath.Join(a.s.Root.RunDir(id), rundir.RecordFile)); errors.Is(serr, fs.ErrNotExist) {
			err = errorf(http.StatusNotFound, "no run %s", id)
		}
		a.fail(w, err)
		return
	}
	if !info.Finished && !info.Gone {
		a.fail(w, errorf(http.StatusConflict, "run %s is %s: its dispatch writes its prelabels as it ends; cancel it, or retract them once it has ended", id, info.State))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), retractTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	// "--" ends the flags: neither the config's path nor the id can be
	// taken for one.
	err = command(ctx, a.s.Dispatch, []string{"retract", "--json", "--", a.s.ConfigPath, id}, &stdout, &stderr).Run()
	var out struct {
		Retracted *int64 `json:"retracted"`
	}
	if err == nil && json.Unmarshal(stdout.Bytes(), &out) == nil && out.Retracted != nil {
		a.s.logf("run %s: %d prelabels retracted through the API", id, *out.Retracted)
		agentproto.WriteJSON(w, http.StatusOK, map[string]int64{"retracted": *out.Retracted})
		return
	}
	msg, hints := childMessage("potato-dispatch", stderr.String())
	switch {
	case ctx.Err() != nil:
		msg = fmt.Sprintf("potato-dispatch retract did not finish within %s", retractTimeout)
	case msg == "" && err != nil:
		msg = fmt.Sprintf("potato-dispatch retract: %v", err)
	case msg == "":
		msg = "potato-dispatch retract printed no count"
	}
	a.fail(w, &apiError{code: http.StatusInternalServerError, msg: msg, hints: hints})
}

// apiBackend is one entry of GET /backends.
type apiBackend struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Host        string `json:"host"`
	Label       string `json:"label"`
	Description string `json:"description"`
	Default     bool   `json:"default"`
	// MenuLabel is the entry of the page's menu: Label, and for an agent
	// backend when its agent last polled.
	MenuLabel string `json:"menu_label"`
	// For agent backends: the token's registration and the last agent
	// seen, absent before either.
	TokenIssuedAt *time.Time `json:"token_issued_at,omitempty"`
	LastSeen      *time.Time `json:"last_seen,omitempty"`
	LastHost      string     `json:"last_host,omitempty"`
}

func (a *api) listBackends(w http.ResponseWriter, r *http.Request, _ []string) {
	agentproto.WriteJSON(w, http.StatusOK, a.s.backends(time.Now()))
}

// checkBackend runs potato-check NAME CONFIG --json, with --trainer when
// the query names a trainer known by name (a program, exec:PATH, is
// refused), and passes its report on as it is: a "no" (exit 1) is a
// report too.
func (a *api) checkBackend(w http.ResponseWriter, r *http.Request, parts []string) {
	name := parts[1]
	if _, ok := a.s.Config.Backend(name); !ok || name == "" {
		a.fail(w, errorf(http.StatusNotFound, msgNoBackend, name, strings.Join(a.s.Config.BackendNames(), ", ")))
		return
	}
	args := []string{"--json"}
	if t := r.URL.Query().Get("trainer"); t != "" {
		// potato-check of a program says whether its path exists and
		// runs on the server: not for an API key holder to probe.
		if trainer.IsExec(t) {
			a.fail(w, errorf(http.StatusBadRequest, msgExecCheck, t))
			return
		}
		if _, ok := trainer.Lookup(t); !ok {
			a.fail(w, errorf(http.StatusBadRequest, "unknown trainer %q: the trainers are %s", t, trainer.Choices()))
			return
		}
		args = append(args, "--trainer="+t)
	}
	select {
	case a.checks <- struct{}{}:
		defer func() { <-a.checks }()
	case <-r.Context().Done():
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	// "--" ends the flags: neither name nor the config's path can be
	// taken for one.
	err := command(ctx, a.s.Check, append(args, "--", name, a.s.ConfigPath), &stdout, &stderr).Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		a.fail(w, errorf(http.StatusGatewayTimeout, "potato-check %s did not finish within %s", name, checkTimeout))
		return
	case err == nil, errors.As(err, &ee) && ee.ExitCode() == 1:
		if json.Valid(stdout.Bytes()) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(stdout.Bytes())
			return
		}
	}
	msg, hints := childMessage("potato-check", stderr.String())
	if msg == "" {
		msg = fmt.Sprintf("potato-check %s gave no report: %v", name, err)
	}
	a.fail(w, &apiError{code: http.StatusInternalServerError, msg: msg, hints: hints})
}
