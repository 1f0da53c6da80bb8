package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"potato-training/lib/agentproto"
	"potato-training/lib/backend"
	"potato-training/lib/rundir"
)

const agentPrefix = agentproto.PathPrefix

// seenEvery bounds how often a backend's last_seen is written: a thousand
// agents polling must not mean a thousand writes a minute.
const seenEvery = 10 * time.Second

// serveAgent is the agent routes (SPEC G1-G7): a claim is checked against
// the backend's token here and handed to the oldest queued run of that
// backend whose dispatch listens; a run's other routes are proxied to its
// dispatch's socket, which checks the run's token (the bundle's bytes,
// once the dispatch has said yes, are sent from here: serveBundle).
func (s *Server) serveAgent(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, agentPrefix+"/")
	if rest == "claim" {
		s.claim(w, r)
		return
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] != "runs" || !rundir.ValidID(parts[1]) {
		agentproto.WriteError(w, http.StatusNotFound, "no such route")
		return
	}
	if bearer(r) == "" {
		w.Header().Set("WWW-Authenticate", "Bearer")
		agentproto.WriteError(w, http.StatusUnauthorized, "missing bearer token")
		return
	}
	sock := s.socketOf(parts[1])
	if sock == "" {
		agentproto.WriteError(w, http.StatusNotFound, "no such run, or its dispatch is not listening")
		return
	}
	if parts[2] == "bundle" && r.Method == http.MethodGet {
		s.serveBundle(sock, parts[1], w, r)
		return
	}
	proxyTo(sock).ServeHTTP(w, r)
}

func bearer(r *http.Request) string {
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// socketOf is the socket a run's dispatch serves, if it is there.
func (s *Server) socketOf(id string) string {
	info, err := s.Root.Read(id)
	// Only agent runs are reached through the server: an ssh or slurm
	// run's socket is for its own forwarded session.
	if err != nil || info.Finished || info.Gone || !takesTokens(info.BackendType) {
		return ""
	}
	return listening(s.Root, id, info)
}

// takesTokens is whether runs of backends of type typ, as a run's record
// names it, wait for an agent with the backend's token (the agent type).
func takesTokens(typ string) bool {
	d, ok := backend.Lookup(typ)
	return ok && d.Tokens
}

// listening is the socket of a run's dispatch, if it is there.
func listening(root *rundir.Root, id string, info rundir.Info) string {
	sock := info.AgentSocket
	if sock == "" {
		sock = filepath.Join(root.RunDir(id), rundir.SocketFile)
	}
	if st, err := os.Stat(sock); err != nil || st.Mode()&os.ModeSocket == 0 {
		return ""
	}
	return sock
}

func unixTransport(sock string) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives:     true,
		ResponseHeaderTimeout: 2 * time.Minute,
	}
}

// proxyTo forwards a request, body and Range included, to a dispatch.
func proxyTo(sock string) http.Handler {
	target := &url.URL{Scheme: "http", Host: "agent"}
	p := httputil.NewSingleHostReverseProxy(target)
	p.Transport = unixTransport(sock)
	p.FlushInterval = -1
	p.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		agentproto.WriteError(w, http.StatusBadGateway, "the run's dispatch did not answer")
	}
	return p
}

// claim checks the backend's token, then waits, at most LongPoll, for a
// run of that backend to hand to the agent.
func (s *Server) claim(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		agentproto.WriteError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed here")
		return
	}
	// The token is checked before a byte of the body is read: a peer
	// without one is answered at once and holds nothing.
	tok := bearer(r)
	backend := s.tokenBackend(tok)
	if backend == "" {
		refuseClaim(w)
		return
	}
	const maxClaim = 1 << 20
	if r.ContentLength > maxClaim { // refused unread
		agentproto.WriteError(w, http.StatusRequestEntityTooLarge, "the claim's body is over 1 MiB")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxClaim))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			agentproto.WriteError(w, http.StatusRequestEntityTooLarge, "the claim's body is over 1 MiB")
		} else {
			agentproto.WriteError(w, http.StatusBadRequest, "the claim's body is unreadable: "+err.Error())
		}
		return
	}
	var req agentproto.ClaimRequest
	if err := json.Unmarshal(body, &req); err != nil {
		agentproto.WriteError(w, http.StatusBadRequest, "the claim's body is not JSON: "+err.Error())
		return
	}
	if req.Backend != backend {
		refuseClaim(w)
		return
	}
	req.Host = cleanHost(req.Host)
	if clean, err := json.Marshal(req); err == nil {
		body = clean // the dispatch logs the host too
	}
	s.broker.seen(req.Backend, req.Host)
	ctx, cancel := context.WithTimeout(r.Context(), s.LongPoll)
	defer cancel()
	for {
		changed := s.broker.changed(req.Backend)
		// busy is closed when another claim's offer of a run ends: the
		// run may then be free again.
		var busy <-chan struct{}
		for _, id := range s.broker.candidates(req.Backend) {
			ok, wait := s.broker.offer(id)
			if !ok {
				if wait != nil {
					busy = wait
				}
				continue
			}
			resp, out, err := s.forwardClaim(ctx, id, tok, body)
			// A 204 means the dispatch gave the run out already, or will not.
			s.broker.offered(id, err == nil)
			if err != nil || resp == http.StatusNoContent {
				continue
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(resp)
			_, _ = w.Write(out)
			if resp == http.StatusOK {
				s.logf("run %s claimed by an agent of %s on %s", id, req.Backend, req.Host)
			}
			return
		}
		select {
		case <-changed:
		case <-busy:
		case <-ctx.Done():
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
}

// refuseClaim is the one answer to every refused token: a prober learns
// nothing.
func refuseClaim(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", "Bearer")
	agentproto.WriteError(w, http.StatusUnauthorized, "wrong token")
}

// tokenBackend is the agent backend whose registered token tok is, or "".
// Every agent backend is compared, in constant time each.
func (s *Server) tokenBackend(tok string) string {
	found := ""
	if tok == "" {
		return ""
	}
	for _, b := range s.Config.Training.Backends {
		if backend.Of(b).Tokens && s.Root.CheckToken(b.Name, tok) && found == "" {
			found = b.Name
		}
	}
	return found
}

// forwardClaim asks one run's dispatch for the run; 204 means it is taken.
func (s *Server) forwardClaim(ctx context.Context, id, tok string, body []byte) (int, []byte, error) {
	sock := s.socketOf(id)
	if sock == "" {
		return 0, nil, errors.New("not listening")
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, "http://agent"+agentPrefix+"/claim", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: unixTransport(sock)}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, nil, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		return 0, nil, errors.New(resp.Status)
	}
	return resp.StatusCode, out, nil
}

// broker keeps, for each backend, the runs an agent may claim, from a
// scan of the run directories on every change (fsnotify) and every
// second (a missed event), and wakes the claims waiting on a backend.
type broker struct {
	root *rundir.Root

	mu    sync.Mutex
	runs  map[string][]string // backend -> queued run ids, oldest first
	wake  map[string]chan struct{}
	taken map[string]time.Time // runs handed out, not offered again
	// offers holds the runs one claim is asking their dispatch for now,
	// each with a channel closed when it has the answer: a thousand
	// waiting claims woken by a new run make one request to its dispatch,
	// not a thousand.
	offers   map[string]chan struct{}
	lastSeen map[string]time.Time
	kick     chan struct{}
}

func newBroker(root *rundir.Root) *broker {
	return &broker{root: root, runs: map[string][]string{}, wake: map[string]chan struct{}{},
		taken: map[string]time.Time{}, offers: map[string]chan struct{}{}, lastSeen: map[string]time.Time{}, kick: make(chan struct{}, 1)}
}

func (b *broker) run(ctx context.Context) {
	runsDir := filepath.Join(b.root.Dir, "runs")
	var w *fsnotify.Watcher
	var events <-chan fsnotify.Event
	if fw, err := fsnotify.NewWatcher(); err == nil {
		w = fw
		defer w.Close()
		if w.Add(runsDir) == nil {
			events = w.Events
		}
		go func() {
			for range w.Errors {
			}
		}()
		// Each unfinished run's directory too: its socket appearing is
		// the moment the run can be handed out.
		if entries, err := os.ReadDir(runsDir); err == nil {
			for _, e := range entries {
				dir := filepath.Join(runsDir, e.Name())
				if _, err := os.Stat(filepath.Join(dir, rundir.ExitCodeFile)); e.IsDir() && err != nil {
					_ = w.Add(dir)
				}
			}
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	b.scan()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-events:
			dir, base := filepath.Dir(ev.Name), filepath.Base(ev.Name)
			switch {
			case dir == runsDir && ev.Has(fsnotify.Create):
				_ = w.Add(ev.Name) // a new run
			case dir != runsDir && base == rundir.ExitCodeFile:
				_ = w.Remove(dir) // over: nothing more to hand out
				continue
			case dir != runsDir && base != rundir.SocketFile:
				continue // run.json, the log, events: not the broker's concern
			}
			// A burst of events (a run being written) is one scan.
			time.Sleep(20 * time.Millisecond)
		case <-tick.C:
		case <-b.kick:
		}
		b.scan()
	}
}

// scan finds the queued runs whose dispatch serves a socket.
func (b *broker) scan() {
	entries, err := os.ReadDir(filepath.Join(b.root.Dir, "runs"))
	if err != nil {
		return
	}
	runs := map[string][]string{}
	for _, e := range entries {
		id := e.Name()
		dir := b.root.RunDir(id)
		if !e.IsDir() || !rundir.ValidID(id) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, rundir.ExitCodeFile)); err == nil {
			continue // over: the cheap test first
		}
		info, err := b.root.Read(id)
		if err != nil || info.Finished || info.Gone || !takesTokens(info.BackendType) || info.State != rundir.StateQueued {
			continue
		}
		// A run waiting its turn (B6) is queued too, with no socket yet:
		// it is listed once it listens, and that change wakes the claims.
		if listening(b.root, id, info) == "" {
			continue
		}
		runs[info.Backend] = append(runs[info.Backend], id) // ids sort by time
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, t := range b.taken {
		if time.Since(t) > time.Minute {
			delete(b.taken, id)
		}
	}
	for backend, ids := range runs {
		if !equal(b.runs[backend], ids) {
			b.signal(backend)
		}
	}
	b.runs = runs
}

func equal(a, c []string) bool {
	if len(a) != len(c) {
		return false
	}
	for i := range a {
		if a[i] != c[i] {
			return false
		}
	}
	return true
}

// signal wakes the claims waiting on backend; b.mu is held.
func (b *broker) signal(backend string) {
	if ch, ok := b.wake[backend]; ok {
		close(ch)
		delete(b.wake, backend)
	}
}

// changed is closed when backend's runs change.
func (b *broker) changed(backend string) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.wake[backend]
	if !ok {
		ch = make(chan struct{})
		b.wake[backend] = ch
	}
	return ch
}

func (b *broker) candidates(backend string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, id := range b.runs[backend] {
		if _, gone := b.taken[id]; !gone {
			out = append(out, id)
		}
	}
	return out
}

// offer reserves run id for the calling claim. While another claim's
// offer of it is under way, ok is false and busy is closed when it ends.
func (b *broker) offer(id string) (ok bool, busy <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, gone := b.taken[id]; gone {
		return false, nil
	}
	if ch, on := b.offers[id]; on {
		return false, ch
	}
	b.offers[id] = make(chan struct{})
	return true, nil
}

// offered ends an offer; given marks the run as given out.
func (b *broker) offered(id string, given bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if given {
		b.taken[id] = time.Now()
	}
	close(b.offers[id])
	delete(b.offers, id)
}

// seen records an agent's visit, at most once per seenEvery per backend.
func (b *broker) seen(backend, host string) {
	b.mu.Lock()
	last := b.lastSeen[backend]
	due := time.Since(last) >= seenEvery
	if due {
		b.lastSeen[backend] = time.Now()
	}
	b.mu.Unlock()
	if due {
		_ = b.root.AgentSeen(backend, host, time.Now())
	}
}

// cleanHost is an agent's host name as the server keeps and logs it: at
// most 255 bytes of printable ASCII, "?" for anything else.
func cleanHost(h string) string {
	if len(h) > 255 {
		h = h[:255]
	}
	b := []byte(h)
	for i, c := range b {
		if c < 0x21 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}
