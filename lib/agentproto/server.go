package agentproto

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
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"potato-training/lib/atomicfile"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
)

// Run is the server side of one run (or of a server that hands out runs),
// implemented by the caller. Methods may be called concurrently. An error
// of type *StatusError is answered with its code and message; any other
// error with 500 and its message.
type Run interface {
	// Claim hands out a run, or blocks until it has one or ctx ends; nil
	// and no error (or ctx's error once ctx has ended) is answered 204.
	// Whether the answer reached the agent cannot be known here: a claim
	// whose agent never got it ends by the heartbeat timeout (SPEC S11).
	Claim(ctx context.Context, req ClaimRequest) (*Claim, error)
	// BundlePath names the run's bundle.tar.gz.
	BundlePath(runID string) (string, error)
	// Events receives every POST of events, empty ones (heartbeats)
	// included: evs are the v1 events, badLines the lines that are not
	// (the process's own output, kept as log). The Reply says whether to
	// cancel.
	Events(runID string, evs []events.Event, badLines []string) (Reply, error)
	// Predictions receives the predictions file. r ends with an error
	// when the body is cut (the client went away, or it is over the
	// limit); Predictions must then keep nothing, so it writes a
	// temporary file and renames it only after a clean EOF, as StoreFile
	// does.
	Predictions(runID string, r io.Reader) error
	// Result receives how the run ended.
	Result(runID string, res Result) error
}

// HandlerOptions configures NewHandler.
type HandlerOptions struct {
	// TokenSHA256 is the sha256 of the one token accepted. The zero
	// value accepts no token.
	TokenSHA256 [32]byte
	// Authorize, when set, decides instead of TokenSHA256. It must
	// compare in constant time.
	Authorize func(token string) bool
	// AuthorizeClaim, when set, accepts more tokens for the claim alone
	// (an agent backend's token, which is good for taking a run, while
	// the run's routes want the run's own token). It must compare in
	// constant time.
	AuthorizeClaim func(token string) bool
	// MaxPredictionsMB bounds a predictions upload (default 512).
	MaxPredictionsMB int
	// LongPoll is how long a claim waits (default 25 s).
	LongPoll time.Duration
}

// NewHandler serves the protocol's routes for run. Every request must
// carry "Authorization: Bearer <token>".
func NewHandler(run Run, opt HandlerOptions) http.Handler {
	if opt.LongPoll <= 0 {
		opt.LongPoll = DefaultLongPoll
	}
	if opt.MaxPredictionsMB <= 0 {
		opt.MaxPredictionsMB = DefaultMaxPredictionsMB
	}
	return &handler{run: run, opt: opt}
}

type handler struct {
	run Run
	opt HandlerOptions
}

// route is one of the run routes: the methods it takes and its server.
type route struct {
	methods []string
	serve   func(h *handler, w http.ResponseWriter, r *http.Request, id string)
}

var runRoutes = map[string]route{
	"bundle":      {[]string{http.MethodGet, http.MethodHead}, (*handler).bundle},
	"events":      {[]string{http.MethodPost}, (*handler).events},
	"predictions": {[]string{http.MethodPut}, (*handler).predictions},
	"result":      {[]string{http.MethodPost}, (*handler).result},
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if msg := h.authorize(r, r.URL.Path == PathPrefix+"/claim"); msg != "" {
		w.Header().Set("WWW-Authenticate", "Bearer")
		WriteError(w, http.StatusUnauthorized, msg)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, PathPrefix+"/")
	if !ok {
		WriteError(w, http.StatusNotFound, "no such route")
		return
	}
	if rest == "claim" {
		if allowed(w, r, http.MethodPost) {
			h.claim(w, r)
		}
		return
	}
	// The path is matched as it was sent, segment by segment, and the id
	// must be a plain name: "runs/../x/bundle" has four segments and
	// matches nothing, "runs/../bundle" has an invalid id.
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] != "runs" {
		WriteError(w, http.StatusNotFound, "no such route")
		return
	}
	rt, ok := runRoutes[parts[2]]
	if !ok {
		WriteError(w, http.StatusNotFound, "no such route")
		return
	}
	if !allowed(w, r, rt.methods...) {
		return
	}
	if !rundir.ValidID(parts[1]) {
		WriteError(w, http.StatusBadRequest, "invalid run id: 8 to 64 letters, digits, - and _")
		return
	}
	rt.serve(h, w, r, parts[1])
}

// authorize returns "" for a request with an accepted token, else the
// reason to refuse it. The token itself is never part of an answer.
func (h *handler) authorize(r *http.Request, claim bool) string {
	auth := r.Header.Get("Authorization")
	scheme, tok, _ := strings.Cut(auth, " ")
	tok = strings.TrimSpace(tok)
	if !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "missing bearer token"
	}
	if claim && h.opt.AuthorizeClaim != nil && h.opt.AuthorizeClaim(tok) {
		return ""
	}
	if h.opt.Authorize != nil {
		if h.opt.Authorize(tok) {
			return ""
		}
		return "wrong token"
	}
	sum := sha256.Sum256([]byte(tok))
	var zero [32]byte
	if h.opt.TokenSHA256 == zero || subtle.ConstantTimeCompare(sum[:], h.opt.TokenSHA256[:]) != 1 {
		return "wrong token"
	}
	return ""
}

// allowed answers 405 unless r's method is one of methods.
func allowed(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	WriteError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed here", r.Method))
	return false
}

func (h *handler) claim(w http.ResponseWriter, r *http.Request) {
	var req ClaimRequest
	if code, err := decodeJSON(w, r, &req); err != nil {
		WriteError(w, code, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opt.LongPoll)
	defer cancel()
	c, err := h.run.Claim(ctx, req)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		c, err = nil, nil
	}
	if err != nil {
		writeRunError(w, err)
		return
	}
	if c == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	out := *c
	if out.MaxPredictionsMB <= 0 {
		out.MaxPredictionsMB = h.opt.MaxPredictionsMB
	}
	if out.GraceSeconds <= 0 {
		out.GraceSeconds = DefaultGraceSeconds
	}
	if out.HeartbeatTimeoutS <= 0 {
		out.HeartbeatTimeoutS = DefaultHeartbeatTimeoutS
	}
	WriteJSON(w, http.StatusOK, out)
}

// bundle serves the tar.gz with http.ServeContent, which answers Range
// and If-Range. The ETag changes when the file does, so a resumed
// download of a replaced bundle gets the whole new file, not a splice.
func (h *handler) bundle(w http.ResponseWriter, r *http.Request, id string) {
	path, err := h.run.BundlePath(id)
	if err != nil {
		writeRunError(w, err)
		return
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		WriteError(w, http.StatusNotFound, "the run has no bundle")
		return
	}
	if err != nil {
		WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		WriteError(w, http.StatusInternalServerError, "the bundle is not a regular file")
		return
	}
	ServeBundle(w, r, f, fi)
}

// BundleETag is the ETag of a bundle file: its size and modification time.
func BundleETag(fi os.FileInfo) string {
	return fmt.Sprintf(`"%x-%x"`, fi.Size(), fi.ModTime().UnixNano())
}

// ServeBundle answers a request for the bundle f, whose FileInfo is fi,
// Range and If-Range included. Both the dispatch and potato-server, which
// sends the bundle once the dispatch has said yes to the request, answer
// with it, and so alike.
func ServeBundle(w http.ResponseWriter, r *http.Request, f *os.File, fi os.FileInfo) {
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("ETag", BundleETag(fi))
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

func (h *handler) events(w http.ResponseWriter, r *http.Request, id string) {
	tooLarge := fmt.Sprintf("more than %d bytes of events in one request", MaxEventsBody)
	if r.ContentLength > MaxEventsBody { // refused unread
		WriteError(w, http.StatusRequestEntityTooLarge, tooLarge)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxEventsBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			WriteError(w, http.StatusRequestEntityTooLarge, tooLarge)
			return
		}
		WriteError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	evs, bad := ParseLines(body)
	reply, err := h.run.Events(id, evs, bad)
	if err != nil {
		writeRunError(w, err)
		return
	}
	if !reply.Cancel {
		reply.GraceSeconds = 0
	} else if reply.GraceSeconds <= 0 {
		reply.GraceSeconds = DefaultGraceSeconds
	}
	WriteJSON(w, http.StatusOK, reply)
}

// ParseLines splits a JSON Lines body into v1 events and the other
// non-blank lines, which are kept as they are (less a trailing CR).
func ParseLines(body []byte) (evs []events.Event, bad []string) {
	for len(body) > 0 {
		var line []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			line, body = body, nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if ev, err := events.Parse(line); err == nil {
			evs = append(evs, ev)
		} else {
			bad = append(bad, string(line))
		}
	}
	return evs, bad
}

// boundedBody tells why reading a request body failed: over the limit
// (413), or cut for another reason (400), whatever the Run made of it.
type boundedBody struct {
	r        io.Reader
	tooLarge bool
	readErr  error
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			b.tooLarge = true
		} else if b.readErr == nil {
			b.readErr = err
		}
	}
	return n, err
}

func (h *handler) predictions(w http.ResponseWriter, r *http.Request, id string) {
	limit := int64(h.opt.MaxPredictionsMB) << 20
	tooLarge := fmt.Sprintf("the predictions file is over the server's limit of %d MB (max_predictions_mb)", h.opt.MaxPredictionsMB)
	// A declared length over the limit is refused before the body is
	// read; with "Expect: 100-continue" the client never sends it.
	if r.ContentLength > limit {
		WriteError(w, http.StatusRequestEntityTooLarge, tooLarge)
		return
	}
	body := &boundedBody{r: http.MaxBytesReader(w, r.Body, limit)}
	err := h.run.Predictions(id, body)
	switch {
	case body.tooLarge:
		WriteError(w, http.StatusRequestEntityTooLarge, tooLarge)
	case err != nil && body.readErr != nil:
		WriteError(w, http.StatusBadRequest, "reading the body: "+body.readErr.Error())
	case err != nil:
		writeRunError(w, err)
	default:
		WriteJSON(w, http.StatusOK, struct{}{})
	}
}

func (h *handler) result(w http.ResponseWriter, r *http.Request, id string) {
	var res Result
	if code, err := decodeJSON(w, r, &res); err != nil {
		WriteError(w, code, err.Error())
		return
	}
	if err := h.run.Result(id, res); err != nil {
		writeRunError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, struct{}{})
}

// decodeJSON reads a small JSON body into v; an empty body leaves v as
// it is. It returns the status to answer with when it fails.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) (int, error) {
	if r.ContentLength > maxJSONBody { // refused unread
		return http.StatusRequestEntityTooLarge, fmt.Errorf("body over %d bytes", maxJSONBody)
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return http.StatusRequestEntityTooLarge, fmt.Errorf("body over %d bytes", maxJSONBody)
		}
		return http.StatusBadRequest, fmt.Errorf("reading the body: %w", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return 0, nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return http.StatusBadRequest, fmt.Errorf("bad JSON body: %w", err)
	}
	return 0, nil
}

func writeRunError(w http.ResponseWriter, err error) {
	var se *StatusError
	if errors.As(err, &se) && se.Code >= 400 && se.Code <= 599 {
		WriteError(w, se.Code, se.Msg)
		return
	}
	WriteError(w, http.StatusInternalServerError, err.Error())
}

// WriteError answers {"error": msg} with status code: the error body of
// the protocol and of potato-server's API.
func WriteError(w http.ResponseWriter, code int, msg string) {
	WriteJSON(w, code, errorBody{Error: msg})
}

// WriteJSON answers v as JSON, on one line, with status code: the one
// JSON answer of the protocol and of potato-server's API.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"unencodable answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

// StoreFile writes r to path by atomicfile.Write: a cut body leaves
// nothing at path. It is what a Run's Predictions needs.
func StoreFile(path string, r io.Reader) error {
	return atomicfile.Write(path, 0o644, func(w io.Writer) error {
		_, err := io.Copy(w, r)
		return err
	})
}

// Serve serves h on l in a new goroutine and returns the server, for the
// caller to Shutdown or Close (which also closes l). It sets no write
// timeout: a bundle download may take long; a claim's long poll is bounded
// by the handler.
func Serve(l net.Listener, h http.Handler) *http.Server {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	go srv.Serve(l)
	return srv
}
