package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/trainer"
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
