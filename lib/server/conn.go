package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
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
	// idleTimeout bounds a kept-alive connection between requests.
	idleTimeout = 20 * time.Second
	// maxHeaderBytes bounds a request's headers; a session cookie and an
	// API key are a few hundred bytes.
	maxHeaderBytes = 64 << 10
	// maxConns bounds the connections open at once; past it new ones
	// wait in the kernel's queue until one closes. maxConnsPerHost bounds
	// those of one peer address: past it a new one is answered 503 and
	// closed, so that one host cannot take every place.
	maxConns        = 1024
	maxConnsPerHost = 256
)

// msgTooManyConns is the 503 of a peer over maxConnsPerHost.
const msgTooManyConns = "too many connections from your address"

// limits are the bounds above; tests shorten them.
type limits struct {
	header, body, idle time.Duration
	uploadWindow       time.Duration
	uploadChunk        int64
	conns, perHost     int
}

var defaultLimits = limits{header: headerTimeout, body: bodyTimeout, idle: idleTimeout,
	uploadWindow: uploadWindow, uploadChunk: uploadChunk, conns: maxConns, perHost: maxConnsPerHost}

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
	limited := newLimitListener(ln, lim.conns, lim.perHost, s.logf)
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
// claim's long poll, potato-check) is not cut off by it.
func (s *Server) withDeadlines(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		lim := s.limits
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

// limitListener holds at most max connections at once and at most
// perHost from one address.
type limitListener struct {
	net.Listener
	slots   chan struct{}
	perHost int
	logf    func(string, ...any)

	mu     sync.Mutex
	byHost map[string]int
	// refused counts the connections refused since the last log line, so
	// that a flood is one line a minute.
	refused   int
	lastNoted time.Time
}

func newLimitListener(ln net.Listener, max, perHost int, logf func(string, ...any)) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, max), perHost: perHost, logf: logf, byHost: map[string]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		l.slots <- struct{}{}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		host := peerHost(c.RemoteAddr())
		l.mu.Lock()
		over := l.byHost[host] >= l.perHost
		if !over {
			l.byHost[host]++
		} else {
			l.refused++
			if time.Since(l.lastNoted) >= time.Minute {
				l.logf("%s holds %d connections, the most one address may: %d more refused", host, l.perHost, l.refused)
				l.refused, l.lastNoted = 0, time.Now()
			}
		}
		l.mu.Unlock()
		if over {
			go refuse(c)
			<-l.slots
			continue
		}
		return &limitConn{Conn: c, l: l, host: host}, nil
	}
}

// refuse answers a connection over its host's bound and closes it.
func refuse(c net.Conn) {
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 10\r\nConnection: close\r\n"+
		"Content-Length: "+strconv.Itoa(len(msgTooManyConns)+1)+"\r\n\r\n"+msgTooManyConns+"\n")
}

func peerHost(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

type limitConn struct {
	net.Conn
	l    *limitListener
	host string
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.byHost[c.host]--; c.l.byHost[c.host] <= 0 {
			delete(c.l.byHost, c.host)
		}
		c.l.mu.Unlock()
		<-c.l.slots
	})
	return err
}
