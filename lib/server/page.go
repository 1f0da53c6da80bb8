package server

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"potato-training/lib/backend"
	_ "potato-training/lib/backend/all" // the registry, read below
	"potato-training/lib/config"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
)

// pagePath is the Training page (SPEC A1); its sign-in, run pages and
// files are under it.
const pagePath = "/admin/training"

// Default polling of the page's script: every pagePoll while a run is
// queued or executing, every pageIdlePoll otherwise.
const (
	pagePoll     = 2 * time.Second
	pageIdlePoll = 10 * time.Second
	maxForm      = 64 << 10
)

// contentSecurity lets the page run only its own script and style.
const contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

//go:embed assets
var assets embed.FS

var pages = template.Must(template.ParseFS(assets, "assets/*.html"))

// pageData is what the templates show.
type pageData struct {
	Title, Project, CSRF, Error string
	PollMS, IdlePollMS          int64
	Backends                    []apiBackend
	Trainers                    []pageChoice
	Schemas                     []pageChoice
	RunID                       string
}

// pageChoice is one trainer or schema of the start form: a schema's
// kind, a trainer's kinds (those it learns, space-separated), by which the
// page offers only the trainers that learn every ticked schema.
type pageChoice struct {
	Name, Kind, Kinds string
	Default           bool
	Checked           bool
}

// mountPage adds the page, its sign-in and its files.
func (s *Server) mountPage(mux *http.ServeMux) {
	static, _ := fs.Sub(assets, "assets")
	files := http.StripPrefix(pagePath+"/static/", http.FileServerFS(static))
	mux.HandleFunc(pagePath, s.trainingPage)
	mux.HandleFunc(pagePath+"/", func(w http.ResponseWriter, r *http.Request) {
		rest := strings.TrimPrefix(r.URL.Path, pagePath+"/")
		switch {
		case rest == "":
			http.Redirect(w, r, pagePath, http.StatusSeeOther)
		case rest == "login":
			s.signIn(w, r)
		case rest == "logout":
			s.signOut(w, r)
		case strings.HasPrefix(rest, "runs/"):
			s.runPage(w, r, strings.TrimPrefix(rest, "runs/"))
		case rest == "static/training.js" || rest == "static/style.css":
			w.Header().Set("Cache-Control", "no-cache")
			files.ServeHTTP(w, r)
		default:
			s.pageError(w, http.StatusNotFound, "There is no page "+r.URL.Path+".")
		}
	})
}

// render writes a template whole, or an error page: never half a page.
func (s *Server) render(w http.ResponseWriter, code int, name string, d pageData) {
	d.Project = s.Config.TaskName
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, d); err != nil {
		s.logf("page: %s: %v", name, err)
		http.Error(w, "The page could not be made: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", contentSecurity)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

// pageError is an error as a page the reader can act on.
func (s *Server) pageError(w http.ResponseWriter, code int, msg string) {
	s.render(w, code, "error.html", pageData{Title: http.StatusText(code), Error: msg})
}

// signedIn returns the request's session, or sends the reader to the
// sign-in form and returns "".
func (s *Server) signedIn(w http.ResponseWriter, r *http.Request) string {
	sess := s.session(r, time.Now())
	if sess == "" {
		http.Redirect(w, r, pagePath+"/login", http.StatusSeeOther)
	}
	return sess
}

func allowMethods(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	if slices.Contains(methods, r.Method) {
		return true
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	http.Error(w, "method "+r.Method+" not allowed here", http.StatusMethodNotAllowed)
	return false
}

// signIn shows the form (GET) or checks the key it sent (POST).
func (s *Server) signIn(w http.ResponseWriter, r *http.Request) {
	if !allowMethods(w, r, http.MethodGet, http.MethodHead, http.MethodPost) {
		return
	}
	d := pageData{Title: "Sign in"}
	if s.apiKey() == "" {
		d.Error = msgNoAPIKey
		s.render(w, http.StatusForbidden, "login.html", d)
		return
	}
	if r.Method != http.MethodPost {
		s.render(w, http.StatusOK, "login.html", d)
		return
	}
	if err := sameOrigin(r); err != nil {
		d.Error = err.msg
		s.render(w, err.code, "login.html", d)
		return
	}
	client := clientAddr(r)
	locked := func(left time.Duration) {
		retryAfter(w, left)
		d.Error = fmt.Sprintf(msgLockedOut, waitText(left))
		s.render(w, http.StatusTooManyRequests, "login.html", d)
	}
	// A client locked out already is refused before its form is read;
	// the lockout is judged again once it is, before the key is compared.
	if left := s.signins.lockedOut(client); left > 0 {
		locked(left)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		d.Error = "the form could not be read: " + err.Error()
		s.render(w, http.StatusBadRequest, "login.html", d)
		return
	}
	if left := s.signins.begin(client); left > 0 {
		locked(left)
		return
	}
	ok := s.isAPIKey(r.PostFormValue("key"))
	delay, lock := s.signins.end(client, ok)
	if !ok {
		if left := s.signInFailed(r, "page: sign-in", delay, lock); left > 0 {
			locked(left)
			return
		}
		d.Error = msgWrongKey
		s.render(w, http.StatusUnauthorized, "login.html", d)
		return
	}
	setSessionCookie(w, r, s.newSession(time.Now()), int(sessionTTL/time.Second))
	s.logf("page: signed in from %s (%s)", client, r.RemoteAddr)
	http.Redirect(w, r, pagePath, http.StatusSeeOther)
}

// signOut ends the session: in this browser, and on the server, which
// refuses its cookie from then on wherever it comes from.
func (s *Server) signOut(w http.ResponseWriter, r *http.Request) {
	if !allowMethods(w, r, http.MethodPost) {
		return
	}
	if sess := s.session(r, time.Now()); sess != "" {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := s.checkCSRF(sess, r.PostFormValue(csrfField)); err != nil {
			s.pageError(w, err.code, err.msg)
			return
		}
		if err := s.endSession(sess); err != nil {
			s.logf("page: sign-out: %v", err)
		}
		s.logf("page: signed out from %s (%s)", clientAddr(r), r.RemoteAddr)
	}
	setSessionCookie(w, r, "", -1)
	http.Redirect(w, r, pagePath+"/login", http.StatusSeeOther)
}

// trainingPage is /admin/training: the menu, the start form, the
// current run and the runs; the script fills in the runs.
func (s *Server) trainingPage(w http.ResponseWriter, r *http.Request) {
	if !allowMethods(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	sess := s.signedIn(w, r)
	if sess == "" {
		return
	}
	s.render(w, http.StatusOK, "training.html", pageData{
		Title: "Training: " + s.Config.TaskName, CSRF: s.csrfToken(sess),
		PollMS: s.PagePoll.Milliseconds(), IdlePollMS: s.PageIdlePoll.Milliseconds(),
		Backends: s.backends(time.Now()), Trainers: s.trainers(), Schemas: s.schemas(),
	})
}

// runPage is one run: its record, log, last events and write-back.
func (s *Server) runPage(w http.ResponseWriter, r *http.Request, id string) {
	if !allowMethods(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	sess := s.signedIn(w, r)
	if sess == "" {
		return
	}
	if !rundir.ValidID(id) {
		s.pageError(w, http.StatusNotFound, fmt.Sprintf("There is no run %q.", id))
		return
	}
	if _, err := os.Stat(filepath.Join(s.Root.RunDir(id), rundir.RecordFile)); errors.Is(err, fs.ErrNotExist) {
		s.pageError(w, http.StatusNotFound, "There is no run "+id+".")
		return
	}
	s.render(w, http.StatusOK, "run.html", pageData{
		Title: "Run " + id, CSRF: s.csrfToken(sess), RunID: id, PollMS: s.PagePoll.Milliseconds(),
	})
}

// trainers are the start form's trainers: the ones this version can
// run, auto_retrain's first.
func (s *Server) trainers() []pageChoice {
	def := s.Config.Training.AutoRetrain.Trainer
	if def == "" {
		def = "tfidf-logreg"
	}
	var out []pageChoice
	for name, info := range trainer.Trainers {
		if info.Available {
			out = append(out, pageChoice{Name: name, Kinds: strings.Join(info.Kinds, " "), Default: name == def})
		}
	}
	slices.SortFunc(out, func(a, b pageChoice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// schemas are the config's schemas; those auto_retrain trains (else
// those written back, else the first) are ticked.
func (s *Server) schemas() []pageChoice {
	ticked := s.Config.Training.AutoRetrain.Schemas
	if len(ticked) == 0 {
		ticked = s.Config.Training.Writeback.Schemas
	}
	var out []pageChoice
	for i, sc := range s.Config.Schemes {
		on := slices.Contains(ticked, sc.Name) || len(ticked) == 0 && i == 0
		out = append(out, pageChoice{Name: sc.Name, Kind: string(sc.Kind), Checked: on})
	}
	return out
}

// backends lists the backends as the menu and GET /backends show them.
func (s *Server) backends(now time.Time) []apiBackend {
	cfg := s.Config
	def := cfg.Training.Backend
	if def == "" {
		def = config.LocalBackend.Name
	}
	out := []apiBackend{}
	for _, b := range append([]*config.Backend{config.LocalBackend}, cfg.Training.Backends...) {
		d := backend.Of(b)
		e := apiBackend{Name: b.Name, Type: b.Type, Host: b.Host, Label: d.Label(b), Description: b.Description, Default: b.Name == def}
		e.MenuLabel = e.Label
		if d.Tokens {
			rec, err := s.Root.Agent(b.Name)
			switch {
			case err == nil:
				e.TokenIssuedAt, e.LastSeen, e.LastHost = &rec.IssuedAt, rec.LastSeen, rec.LastHost
				seen := "never seen"
				if rec.LastSeen != nil {
					seen = "last seen " + ago(now.Sub(*rec.LastSeen))
				}
				e.MenuLabel = fmt.Sprintf("%s (%s, %s)", b.Name, b.Type, seen)
			case errors.Is(err, rundir.ErrNoToken):
				e.MenuLabel = fmt.Sprintf("%s (%s, not registered)", b.Name, b.Type)
			default:
				s.logf("backend %s: %v", b.Name, err)
			}
		}
		out = append(out, e)
	}
	return out
}

// ago says how long ago, as a menu would: "40 s ago", "2 min ago".
func ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s ago", max(0, int(d/time.Second)))
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%d days ago", int(d/(24*time.Hour)))
}
