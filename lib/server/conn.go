package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// How long a peer may take, and how many connections it may hold: the
// server faces networks it does not control, so a request that trickles
// in, or never ends, is dropped rather than kept (potato-server(1),
// LIMITS).
const (
	// headerTimeout bounds a request's headers, from its first byte.
	headerTimeout = 10 * time.Second
	// bodyTimeout bounds the body of every route but the agents' run
	// routes, from the end of its headers: a form, a run request, a claim
	// are a few kilobytes.
	bodyTimeout = 10 * time.Second
	// An upload to a run route (predictions, events, result) may last as
	// long as it keeps a minimum rate: each uploadChunk bytes read move
	// its deadline uploadWindow on, so a peer that sends less than
	// uploadChunk in uploadWindow is dropped.
	uploadChunk  = 64 << 10
	uploadWindow = 20 * time.Second
	// An answer may take as long as the peer keeps taking it: each
	// writeChunk bytes it accepts give the next writeWindow, counted
	// while a write waits on it (never while the server has nothing to
	// send), so a peer that takes less than writeChunk in writeWindow,
	// such as one that sends requests and never reads the answers, is
	// dropped.
	writeChunk  = 64 << 10
	writeWindow = 20 * time.Second
	// idleTimeout bounds a kept-alive connection between requests.
	idleTimeout = 20 * time.Second
	// maxHeaderBytes bounds a request's headers; a session cookie and an
	// API key are a few hundred bytes.
	maxHeaderBytes = 64 << 10
	// maxConns bounds the connections open at once and maxConnsPerHost
	// those of one peer address (an IPv6 peer's /64): past the latter a
	// new one is answered 503 and closed, so that one host cannot take
	// every place. When all maxConns are held, a new connection from an
	// address that holds fewer than the busiest address takes the place
	// of the busiest's connection idle longest; one from the busiest is
	// answered 503: a few hosts holding every place cannot keep another
	// out.
	maxConns        = 1024
	maxConnsPerHost = 256
)

// msgTooManyConns is the 503 of a peer over maxConnsPerHost, and
// msgServerFull of one from the busiest address while every place is
// held.
const (
	msgTooManyConns = "too many connections from your address"
	msgServerFull   = "the server holds as many connections as it may, and your address as many of them as any"
)

// limits are the bounds above; tests shorten them.
type limits struct {
	header, body, idle time.Duration
	uploadWindow       time.Duration
	uploadChunk        int64
	writeWindow        time.Duration
	writeChunk         int64
	conns, perHost     int
}

var defaultLimits = limits{header: headerTimeout, body: bodyTimeout, idle: idleTimeout,
	uploadWindow: uploadWindow, uploadChunk: uploadChunk, writeWindow: writeWindow, writeChunk: writeChunk,
	conns: maxConns, perHost: maxConnsPerHost}

// ListenAndServe listens on addr and serves until ctx ends.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln, with the bounds above, until ctx ends, watching the
// run directories and the config's admin_api_key meanwhile.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.init()
	s.watchKey()
	lim := s.limits
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: lim.header,
		IdleTimeout:       lim.idle,
		MaxHeaderBytes:    maxHeaderBytes,
	}
	go s.broker.run(ctx)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	limited := newLimitListener(ln, lim, s.logf)
	var err error
	if s.TLS != nil {
		srv.TLSConfig = s.TLS.Config()
		err = srv.ServeTLS(limited, "", "")
	} else {
		err = srv.Serve(limited)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// withDeadlines sets the read deadline of a request's body: bodyTimeout
// for the small routes, a minimum rate for the agents' uploads. Once the
// body is read the deadline is lifted, so that a handler that waits (a
// claim's long poll, potato-check) is not cut off by it. An HTTP/2
// answer gets the minimum rate of writeChunk per writeWindow as its
// stream's write deadline (streamWriter); the connection's own writes,
// over HTTP/1.1 and HTTP/2 alike, have it in limitConn.
func (s *Server) withDeadlines(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		lim := s.limits
		if r.ProtoMajor == 2 && lim.writeWindow > 0 {
			sw := &streamWriter{ResponseWriter: w, rc: rc, budget: writeBudget{window: lim.writeWindow, chunk: lim.writeChunk}}
			// What the handler leaves unsent goes once it returns: under
			// the deadline its writes have left.
			defer sw.end()
			w = sw
		}
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		b := &deadlineBody{ReadCloser: r.Body, rc: rc}
		if strings.HasPrefix(r.URL.Path, agentPrefix+"/runs/") {
			b.window, b.chunk = lim.uploadWindow, lim.uploadChunk
			b.extend()
		} else {
			_ = rc.SetReadDeadline(time.Now().Add(lim.body))
		}
		r.Body = b
		h.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline at the body's end and, for an
// upload, moves it on by window for every chunk bytes read.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	window  time.Duration
	chunk   int64
	credit  int64
	done    bool
	failure error
}

func (b *deadlineBody) extend() { _ = b.rc.SetReadDeadline(time.Now().Add(b.window)) }

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.window > 0 {
		b.credit += int64(n)
		if b.credit >= b.chunk {
			b.credit = 0
			b.extend()
		}
	}
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// writeBudget is the minimum rate of an answer: the writes of each chunk
// bytes may wait window in all for the peer to take them. Only the time
// spent in writes counts, so a server that has nothing to send (a
// claim's long poll, a page being made) spends none.
type writeBudget struct {
	window time.Duration
	chunk  int64
	credit int64         // bytes written since the last whole chunk
	spent  time.Duration // time spent in writes since then
}

// next returns how much of n bytes the next write may take, up to the
// end of the chunk, and its deadline.
func (b *writeBudget) next(start time.Time, n int64) (int64, time.Time) {
	return min(n, b.chunk-b.credit), start.Add(b.window - b.spent)
}

// done counts a write begun at start that wrote n bytes.
func (b *writeBudget) done(start time.Time, n int64) {
	b.spent += time.Since(start)
	if b.credit += n; b.credit >= b.chunk {
		b.credit, b.spent = 0, 0
	}
}

// streamWriter gives an HTTP/2 answer's writes its stream's write
// deadline by writeBudget: a peer that asks and never opens the
// flow-control window for the answer holds the stream, and its handler,
// for at most window. Between writes no deadline is set.
type streamWriter struct {
	http.ResponseWriter
	rc     *http.ResponseController
	mu     sync.Mutex
	budget writeBudget
}

func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *streamWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	var err error
	for len(p) > 0 && err == nil {
		start := time.Now()
		k, dl := w.budget.next(start, int64(len(p)))
		_ = w.rc.SetWriteDeadline(dl)
		var m int
		m, err = w.ResponseWriter.Write(p[:k])
		w.budget.done(start, int64(m))
		n, p = n+m, p[m:]
	}
	_ = w.rc.SetWriteDeadline(time.Time{})
	return n, err
}

// FlushError sends what is buffered, under the deadline the writes have
// left (http.ResponseController.Flush calls it).
func (w *streamWriter) FlushError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	start := time.Now()
	_, dl := w.budget.next(start, 0)
	_ = w.rc.SetWriteDeadline(dl)
	err := w.rc.Flush()
	w.budget.done(start, 0)
	_ = w.rc.SetWriteDeadline(time.Time{})
	return err
}

// end sets the deadline of what the server sends once the handler has
// returned: the rest of the answer and the end of the stream.
func (w *streamWriter) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, dl := w.budget.next(time.Now(), 0)
	_ = w.rc.SetWriteDeadline(dl)
}

// limitListener holds at most max connections at once and at most
// perHost from one address, and gives its connections the write
// deadlines of writeBudget. When all max places are held, a new
// connection from an address that holds fewer than the address holding
// the most takes the place of the latter's connection idle longest (it
// is closed); one from an address holding the most is answered 503.
type limitListener struct {
	net.Listener
	max, perHost int
	window       time.Duration
	chunk        int64
	logf         func(string, ...any)
	// refusing bounds the refusals being answered at once; past it a
	// refused connection is closed unanswered.
	refusing chan struct{}

	mu     sync.Mutex
	total  int
	byHost map[string]map[*limitConn]struct{}
	// What was refused or closed since the last log line, so that a
	// flood is one line a minute.
	refused, full, evicted int
	// The address of the last of each.
	lastRefused, lastFull, lastEvicted string
	lastNoted                          time.Time
}

func newLimitListener(ln net.Listener, lim limits, logf func(string, ...any)) *limitListener {
	return &limitListener{Listener: ln, max: lim.conns, perHost: lim.perHost, window: lim.writeWindow, chunk: lim.writeChunk,
		logf: logf, refusing: make(chan struct{}, 64), byHost: map[string]map[*limitConn]struct{}{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitConn{Conn: c, l: l, host: peerHost(c.RemoteAddr()), budget: writeBudget{window: l.window, chunk: l.chunk}}
		lc.touch()
		var victim *limitConn
		refusal := ""
		l.mu.Lock()
		held := len(l.byHost[lc.host])
		switch {
		case held >= l.perHost:
			refusal = msgTooManyConns
			l.refused++
			l.lastRefused = lc.host
		case l.total >= l.max:
			if victim = l.victim(held); victim == nil {
				refusal = msgServerFull
				l.full++
				l.lastFull = lc.host
			} else {
				l.remove(victim)
				l.evicted++
				l.lastEvicted = victim.host
			}
		}
		if refusal == "" {
			l.add(lc)
		}
		l.note()
		l.mu.Unlock()
		if victim != nil {
			victim.Conn.Close()
		}
		if refusal == "" {
			return lc, nil
		}
		select {
		case l.refusing <- struct{}{}:
			go func() {
				refuse(c, refusal)
				<-l.refusing
			}()
		default:
			c.Close()
		}
	}
}

// victim is the connection whose place a newcomer from an address that
// holds held connections takes: of the addresses that hold the most, if
// more than held, the connection idle longest. Called with mu held.
func (l *limitListener) victim(held int) *limitConn {
	most := 0
	for _, cs := range l.byHost {
		most = max(most, len(cs))
	}
	if most <= held {
		return nil
	}
	var v *limitConn
	for _, cs := range l.byHost {
		if len(cs) != most {
			continue
		}
		for c := range cs {
			if v == nil || c.active.Load() < v.active.Load() {
				v = c
			}
		}
	}
	return v
}

// add and remove count a connection in and out. Called with mu held.
func (l *limitListener) add(c *limitConn) {
	cs := l.byHost[c.host]
	if cs == nil {
		cs = map[*limitConn]struct{}{}
		l.byHost[c.host] = cs
	}
	cs[c] = struct{}{}
	l.total++
}

func (l *limitListener) remove(c *limitConn) {
	c.once.Do(func() {
		cs := l.byHost[c.host]
		delete(cs, c)
		if len(cs) == 0 {
			delete(l.byHost, c.host)
		}
		l.total--
	})
}

// note logs what was refused or closed, at most once a minute. Called
// with mu held.
func (l *limitListener) note() {
	if l.refused+l.full+l.evicted == 0 || time.Since(l.lastNoted) < time.Minute {
		return
	}
	var parts []string
	if l.refused > 0 {
		parts = append(parts, fmt.Sprintf("%d refused from addresses that held %d, the most one address may (the last: %s)", l.refused, l.perHost, l.lastRefused))
	}
	if l.full > 0 {
		parts = append(parts, fmt.Sprintf("%d refused from the addresses that held the most while all %d places were taken (the last: %s)", l.full, l.max, l.lastFull))
	}
	if l.evicted > 0 {
		parts = append(parts, fmt.Sprintf("%d closed, of the addresses that held the most, to make room for addresses that held fewer (the last: %s)", l.evicted, l.lastEvicted))
	}
	l.logf("connections: %s", strings.Join(parts, "; "))
	l.refused, l.full, l.evicted, l.lastNoted = 0, 0, 0, time.Now()
}

// refuse answers a connection refused with msg, 503, and closes it.
func refuse(c net.Conn, msg string) {
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 10\r\nConnection: close\r\n"+
		"Content-Length: "+strconv.Itoa(len(msg)+1)+"\r\n\r\n"+msg+"\n")
}

// peerHost is the address a connection counts against: its peer's IPv4
// address, or the /64 of its IPv6 address (addrKey).
func peerHost(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return addrKey(ta.IP)
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip != nil {
		return addrKey(ip)
	}
	return host
}

// limitConn is a connection of limitListener. Each write waits at most
// what its writeBudget leaves, so a peer that stops taking the answers is
// dropped; a write deadline set from outside (the TLS handshake's, a
// handler's) still holds when it is sooner.
type limitConn struct {
	net.Conn
	l    *limitListener
	host string
	once sync.Once
	// active is when bytes last went either way (Unix nanoseconds).
	active atomic.Int64

	wmu    sync.Mutex // one write at a time, and its budget
	budget writeBudget

	dmu   sync.Mutex
	outer time.Time // the write deadline set from outside, or zero
	armed time.Time // the deadline of the write under way, or zero
}

func (c *limitConn) touch() { c.active.Store(time.Now().UnixNano()) }

func (c *limitConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.touch()
	}
	return n, err
}

func (c *limitConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.budget.window <= 0 {
		n, err := c.Conn.Write(p)
		c.touch()
		return n, err
	}
	defer c.arm(time.Time{})
	n := 0
	for len(p) > 0 {
		start := time.Now()
		k, dl := c.budget.next(start, int64(len(p)))
		c.arm(dl)
		m, err := c.Conn.Write(p[:k])
		c.budget.done(start, int64(m))
		n, p = n+m, p[m:]
		if m > 0 {
			c.touch()
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// ReadFrom sends a file chunk by chunk with sendfile, each under the
// deadline of writeBudget (http.ServeContent sends a bundle so); any
// other source goes through Write.
func (c *limitConn) ReadFrom(r io.Reader) (int64, error) {
	src, left := r, int64(-1)
	lr, limited := r.(*io.LimitedReader)
	if limited {
		src, left = lr.R, lr.N
	}
	rf, ok := c.Conn.(io.ReaderFrom)
	if _, file := src.(*os.File); !ok || !file || c.budget.window <= 0 {
		return io.Copy(struct{ io.Writer }{c}, r)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	defer c.arm(time.Time{})
	var n int64
	var err error
	for left != 0 {
		start := time.Now()
		k, dl := c.budget.next(start, c.budget.chunk)
		if left > 0 {
			k = min(k, left)
		}
		c.arm(dl)
		var m int64
		m, err = rf.ReadFrom(&io.LimitedReader{R: src, N: k})
		c.budget.done(start, m)
		n += m
		if left > 0 {
			left -= m
		}
		if m > 0 {
			c.touch()
		}
		if err != nil || m < k {
			break
		}
	}
	if limited {
		lr.N = left
	}
	return n, err
}

// arm sets the deadline of the write under way (zero: none is), or the
// one set from outside when that is sooner.
func (c *limitConn) arm(dl time.Time) {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.armed = dl
	if dl.IsZero() {
		return // the next write sets its own
	}
	if !c.outer.IsZero() && c.outer.Before(dl) {
		dl = c.outer
	}
	_ = c.Conn.SetWriteDeadline(dl)
}

func (c *limitConn) SetWriteDeadline(t time.Time) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.outer = t
	if !c.armed.IsZero() && (t.IsZero() || c.armed.Before(t)) {
		t = c.armed
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *limitConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.l.mu.Lock()
	c.l.remove(c)
	c.l.mu.Unlock()
	return err
}
