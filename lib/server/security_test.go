package server

// Attacks on a potato-server serving on loopback as potato-server does
// (Server.Serve on a TCP listener): raw sockets, staged requests and
// hostile peers, each as docs/reliability.md ("Security") lists it.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/agentproto"
	"potato-training/lib/config"
	"potato-training/lib/rundir"
	"potato-training/lib/validate"
)

// dropBound is how long a test waits for the server to drop a slow or
// half-sent request: the bar of issue 27 is 30 s, and the server's own
// deadlines (conn.go) are 10 s for headers and small bodies, 20 s idle.
const dropBound = 30 * time.Second

// logBook keeps a server's log lines.
type logBook struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (b *logBook) logf(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, fmt.Sprintf(format, args...))
	b.t.Logf(format, args...)
}

func (b *logBook) count(substr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, l := range b.lines {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

// liveServer is a project whose config has an admin_api_key and an agent
// backend "lab", served on 127.0.0.1 by Server.Serve.
type liveServer struct {
	t    *testing.T
	cfg  string
	tok  string // lab's agent token
	root *rundir.Root
	addr string
	s    *Server
	log  *logBook
	stop func()
	// certs, when set, is the certificate the server serves HTTPS with.
	certs *Certs
}

func newLiveServer(t *testing.T, lim *limits) *liveServer {
	t.Helper()
	return newLiveServerWith(t, lim, "", nil)
}

// newLiveServerWith is newLiveServer whose model_training block ends with
// extra, served over TLS when certs is set.
func newLiveServerWith(t *testing.T, lim *limits, extra string, certs *Certs) *liveServer {
	t.Helper()
	path, _, root, tok := agentProject(t, extra)
	testproject.SetAPIKey(t, path, testKey)
	l := &liveServer{t: t, cfg: path, tok: tok, root: root, log: &logBook{t: t}, certs: certs}
	l.start(lim)
	t.Cleanup(func() {
		if l.stop != nil {
			l.stop()
		}
	})
	return l
}

// start serves the project, on a new Server, as a restart would.
func (l *liveServer) start(lim *limits) {
	cfg, _, err := validate.File(l.cfg)
	if err != nil {
		l.t.Fatal(err)
	}
	l.s = &Server{ConfigPath: l.cfg, Config: cfg, Root: l.root, LongPoll: 2 * time.Second, Logf: l.log.logf, TLS: l.certs}
	if lim != nil {
		l.s.limits = *lim
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		l.t.Fatal(err)
	}
	l.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.s.Serve(ctx, ln) }()
	l.stop = func() {
		cancel()
		if err := <-done; err != nil {
			l.t.Errorf("Serve: %v", err)
		}
		l.stop = nil
	}
}

func (l *liveServer) restart() {
	l.stop()
	l.start(nil)
}

// rawConn is an attacker's connection: it writes what it likes, when it
// likes.
type rawConn struct {
	t *testing.T
	net.Conn
	br *bufio.Reader
}

func dialFrom(t *testing.T, from, addr string) (*rawConn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, Conn: c, br: bufio.NewReader(c)}, nil
}

func (l *liveServer) dial() *rawConn {
	l.t.Helper()
	c, err := dialFrom(l.t, "", l.addr)
	if err != nil {
		l.t.Fatal(err)
	}
	return c
}

func (c *rawConn) send(s string) {
	if _, err := io.WriteString(c.Conn, s); err != nil {
		c.t.Errorf("send: %v", err)
	}
}

// answer reads one answer, its body whole.
func (c *rawConn) answer() (*http.Response, string, error) {
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, "", err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), nil
}

// dropped waits at most bound for the server to close the connection,
// reading (and discarding) whatever it answers first. It returns how long
// the wait was, and an error when the connection was still open.
func (c *rawConn) dropped(bound time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(bound))
	_, err := io.Copy(io.Discard, c.br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return time.Since(start), fmt.Errorf("still open after %s", bound)
	}
	return time.Since(start), nil // EOF or a reset: closed by the server
}

func (l *liveServer) request(method, path string, headers ...string) string {
	h := ""
	for _, x := range headers {
		h += x + "\r\n"
	}
	return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n%s", method, path, l.addr, h)
}

func formPost(l *liveServer, path, body string, headers ...string) string {
	return l.request("POST", path, append(headers, "Content-Type: application/x-www-form-urlencoded",
		fmt.Sprintf("Content-Length: %d", len(body)))...) + "\r\n"
}

// TestStagedSignInRace is the staged sign-in of issue 27: 40 connections
// send their headers and the first bytes of their form while the
// client's failures are 0, then finish the forms, 39 with wrong keys and
// the last, once the others are answered, with the right one. At most
// maxFailures keys are compared (one log line each), the rest are refused
// for lockout, and the right key gets 429 and no session.
func TestStagedSignInRace(t *testing.T) {
	t.Parallel()
	l := newLiveServer(t, nil)
	const n = 40
	conns := make([]*rawConn, n)
	rests := make([]string, n)
	for i := range conns {
		key := fmt.Sprintf("guess-%02d", i)
		if i == n-1 {
			key = testKey
		}
		body := url.Values{"key": {key}}.Encode()
		conns[i] = l.dial()
		conns[i].send(formPost(l, pagePath+"/login", body) + body[:4])
		rests[i] = body[4:]
	}
	// Staging: every handler has its headers, and waits for its body.
	time.Sleep(time.Second)
	codes := make([]int, n-1)
	var wg sync.WaitGroup
	for i := 0; i < n-1; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns[i].send(rests[i])
			resp, _, err := conns[i].answer()
			if err != nil {
				t.Errorf("wrong key %d: %v", i, err)
				return
			}
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	got := map[int]int{}
	for _, c := range codes {
		got[c]++
	}
	if got[http.StatusUnauthorized] != maxFailures-1 || got[http.StatusTooManyRequests] != n-maxFailures {
		t.Errorf("answers to the wrong keys %v, want %d 401 and %d 429", got, maxFailures-1, n-maxFailures)
	}
	if c := l.log.count("page: sign-in: wrong API key from"); c != maxFailures {
		t.Errorf("%d wrong keys compared, want %d", c, maxFailures)
	}
	last := conns[n-1]
	last.send(rests[n-1])
	resp, body, err := last.answer()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || len(resp.Cookies()) != 0 || !strings.Contains(body, "too many failed sign-ins") {
		t.Errorf("the right key, staged: %d, cookies %v; want 429 and no session", resp.StatusCode, resp.Cookies())
	}
}

// TestStagedAPIKeyRace sends 40 wrong X-API-Key headers at once: the
// requests wait with their headers all but sent, then the last line of
// each goes out together. At most maxFailures keys are compared, and the
// right key is refused afterwards.
func TestStagedAPIKeyRace(t *testing.T) {
	t.Parallel()
	l := newLiveServer(t, nil)
	const n = 40
	conns := make([]*rawConn, n)
	for i := range conns {
		conns[i] = l.dial()
		conns[i].send(l.request("GET", apiPrefix+"/runs", fmt.Sprintf("X-API-Key: guess-%02d", i)))
	}
	time.Sleep(time.Second)
	codes := make([]int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			conns[i].send("\r\n")
			resp, _, err := conns[i].answer()
			if err != nil {
				t.Errorf("wrong key %d: %v", i, err)
				return
			}
			codes[i] = resp.StatusCode
		}()
	}
	close(start)
	wg.Wait()
	got := map[int]int{}
	for _, c := range codes {
		got[c]++
	}
	if got[http.StatusUnauthorized] != maxFailures-1 || got[http.StatusTooManyRequests] != n-maxFailures+1 {
		t.Errorf("answers %v, want %d 401 and %d 429", got, maxFailures-1, n-maxFailures+1)
	}
	if c := l.log.count("wrong API key from"); c != maxFailures {
		t.Errorf("%d wrong keys compared, want %d", c, maxFailures)
	}
	c := l.dial()
	c.send(l.request("GET", apiPrefix+"/runs", "X-API-Key: "+testKey, "Connection: close") + "\r\n")
	if resp, _, err := c.answer(); err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the right key after the staged guesses: %v %v, want 429", resp, err)
	}
}

// TestSlowRequestsDropped holds connections open the ways issue 27 found
// them held for more than 60 s: a sign-in with headers only, claims whose
// body is half sent or trickles in (with the agent's token and with a
// wrong one), headers that trickle in, and an idle kept-alive connection.
// Each is dropped within dropBound. A claim with a wrong token is
// answered 401 before any of its body is sent, and a hundred of them hold
// no body on the server.
func TestSlowRequestsDropped(t *testing.T) {
	testcli.Short(t, "it waits out the server's 20 s read deadline")
	t.Parallel()
	l := newLiveServer(t, nil)
	claim := func(tok string) string {
		return l.request("POST", agentPrefix+"/claim", "Authorization: Bearer "+tok,
			"Content-Type: application/json", "Content-Length: 1000") + "\r\n" + `{"backend":"lab",`
	}
	trickle := func(c *rawConn, s string) {
		for i := 0; i < len(s); i++ {
			if _, err := c.Write([]byte{s[i]}); err != nil {
				return
			}
			time.Sleep(time.Second)
		}
	}
	cases := []struct {
		name string
		do   func(c *rawConn)
	}{
		{"sign-in with headers only", func(c *rawConn) {
			c.send(l.request("POST", pagePath+"/login", "Content-Type: application/x-www-form-urlencoded", "Content-Length: 40") + "\r\n")
		}},
		{"claim half sent, agent's token", func(c *rawConn) { c.send(claim(l.tok)) }},
		{"claim half sent, wrong token", func(c *rawConn) {
			c.send(claim("0123456789abcdef"))
			resp, body, err := c.answer()
			if err != nil || resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("a half-sent claim with a wrong token: %v %q %v, want 401 at once", resp, body, err)
			}
		}},
		{"claim trickling in", func(c *rawConn) {
			c.send(claim(l.tok))
			go trickle(c, strings.Repeat(" ", 60))
		}},
		{"headers trickling in", func(c *rawConn) {
			go trickle(c, l.request("GET", pagePath+"/login", strings.Repeat("X-Slow: y", 10)))
		}},
		{"idle keep-alive", func(c *rawConn) {
			c.send(l.request("GET", pagePath+"/login") + "\r\n")
			if resp, _, err := c.answer(); err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("the sign-in form: %v %v", resp, err)
			}
		}},
	}
	var wg sync.WaitGroup
	for _, tc := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := l.dial()
			tc.do(c)
			if took, err := c.dropped(dropBound); err != nil {
				t.Errorf("%s: %v", tc.name, err)
			} else {
				t.Logf("%s: dropped after %s", tc.name, took.Round(100*time.Millisecond))
			}
		}()
	}
	// A hundred half-sent claims with wrong tokens, each declaring 1 MiB:
	// each is refused before its body is read.
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := l.dial()
			c.send(l.request("POST", agentPrefix+"/claim", "Authorization: Bearer wrong-"+fmt.Sprint(i),
				"Content-Type: application/json", fmt.Sprintf("Content-Length: %d", 1<<20)) + "\r\n")
			resp, _, err := c.answer()
			if err != nil || resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("claim %d with a wrong token and no body yet: %v %v, want 401", i, resp, err)
			}
		}()
	}
	wg.Wait()
}

// TestUploadAtMinimumRate: an agent's predictions upload that lasts longer
// than the small routes' body deadline goes through while it keeps the
// minimum rate; one that stalls is dropped.
func TestUploadAtMinimumRate(t *testing.T) {
	testcli.Short(t, "it uploads at the minimum rate for 20 s")
	t.Parallel()
	l := newLiveServer(t, nil)
	run, err := l.root.Create(rundir.Record{Backend: "lab", BackendType: config.TypeAgent, Trainer: "x", State: rundir.StateRunning})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	ln, sock, err := agentproto.ListenUnix(run.Path(rundir.SocketFile))
	if err != nil {
		t.Fatal(err)
	}
	// The run's dispatch: it reads the whole upload and says how much.
	srv := agentproto.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%d", n)
	}))
	defer srv.Close()
	if err := run.Update(func(r *rundir.Record) { r.AgentSocket = sock }); err != nil {
		t.Fatal(err)
	}
	path := agentPrefix + "/runs/" + run.ID + "/predictions"
	const chunks = 8 // one chunk every 2 s: 14 s, over bodyTimeout
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		c := l.dial()
		c.send(l.request("PUT", path, "Authorization: Bearer t", fmt.Sprintf("Content-Length: %d", chunks*uploadChunk)) + "\r\n")
		start := time.Now()
		for i := 0; i < chunks; i++ {
			c.send(strings.Repeat("p", uploadChunk))
			if i < chunks-1 {
				time.Sleep(2 * time.Second)
			}
		}
		resp, body, err := c.answer()
		if err != nil || resp.StatusCode != http.StatusOK || body != fmt.Sprint(chunks*uploadChunk) {
			t.Errorf("an upload of %s at the minimum rate: %v %q %v", time.Since(start).Round(time.Second), resp, body, err)
		}
	}()
	go func() {
		defer wg.Done()
		c := l.dial()
		c.send(l.request("PUT", path, "Authorization: Bearer t", fmt.Sprintf("Content-Length: %d", chunks*uploadChunk)) + "\r\n")
		c.send(strings.Repeat("p", uploadChunk))
		// uploadWindow after the last chunk, then dropped.
		if _, err := c.dropped(uploadWindow + dropBound); err != nil {
			t.Errorf("a stalled upload: %v", err)
		}
	}()
	wg.Wait()
}

// TestConnectionCaps: one address holds at most perHost connections, and
// the next is answered 503; another address is served meanwhile. When
// every place is held, a connection from an address that holds fewer
// than the busiest takes the place of the busiest's connection idle
// longest, and one from an address that holds as many as any is answered
// 503 until a place is free.
func TestConnectionCaps(t *testing.T) {
	lim := defaultLimits
	lim.conns, lim.perHost = 6, 3
	l := newLiveServer(t, &lim)
	if _, err := dialFrom(t, "127.0.0.2", l.addr); err != nil {
		t.Skipf("no second loopback address to dial from: %v", err)
	}
	// The one just made holds a place of 127.0.0.2.
	var held []*rawConn
	for i := 0; i < lim.perHost; i++ {
		held = append(held, l.dial())
	}
	over := l.dial()
	resp, body, err := over.answer()
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, msgTooManyConns) {
		t.Fatalf("a connection over the address's bound: %v %q %v, want 503", resp, body, err)
	}
	other, err := dialFrom(t, "127.0.0.2", l.addr)
	if err != nil {
		t.Fatal(err)
	}
	other.send(l.request("GET", pagePath+"/login") + "\r\n")
	if resp, _, err := other.answer(); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("another address while the first holds its bound: %v %v", resp, err)
	}
	// 127.0.0.2 now holds 2, 127.0.0.1 3: one more place.
	if _, err := dialFrom(t, "127.0.0.3", l.addr); err != nil {
		t.Fatal(err)
	}
	// Every place held: 127.0.0.4 takes the place of held[0], the
	// connection of 127.0.0.1 idle longest.
	newcomer, err := dialFrom(t, "127.0.0.4", l.addr)
	if err != nil {
		t.Fatal(err)
	}
	newcomer.send(l.request("GET", pagePath+"/login") + "\r\n")
	if resp, _, err := newcomer.answer(); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a new address while every place is held: %v %v", resp, err)
	}
	if _, err := held[0].dropped(5 * time.Second); err != nil {
		t.Errorf("the busiest address's connection idle longest: %v, want closed", err)
	}
	// 127.0.0.1 and 127.0.0.2 hold 2 each now, the most: one more of
	// 127.0.0.1 is refused until a place is free.
	full := l.dial()
	if resp, body, err := full.answer(); err != nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, msgServerFull) {
		t.Fatalf("a connection of the busiest address while every place is held: %v %q %v, want 503", resp, body, err)
	}
	held[1].Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// The server counts held[1] out once it reads its end.
		c := l.dial()
		c.send(l.request("GET", pagePath+"/login") + "\r\n")
		resp, _, err := c.answer()
		if err == nil && resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("127.0.0.1 once a place is free: %v %v", resp, err)
		}
	}
}

// signIn signs in through the form and returns the session cookie.
func (l *liveServer) signIn() *http.Cookie {
	l.t.Helper()
	body := url.Values{"key": {testKey}}.Encode()
	c := l.dial()
	c.send(formPost(l, pagePath+"/login", body, "Connection: close") + body)
	resp, _, err := c.answer()
	if err != nil || resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		l.t.Fatalf("sign-in: %v %v", resp, err)
	}
	return resp.Cookies()[0]
}

// withCookie sends one request with a session cookie and returns its
// status and body.
func (l *liveServer) withCookie(cookie *http.Cookie, method, path string, body string, headers ...string) (int, string) {
	l.t.Helper()
	headers = append(headers, "Cookie: "+cookie.Name+"="+cookie.Value, "Connection: close")
	if body != "" {
		headers = append(headers, "Content-Type: application/x-www-form-urlencoded", fmt.Sprintf("Content-Length: %d", len(body)))
	}
	c := l.dial()
	c.send(l.request(method, path, headers...) + "\r\n" + body)
	resp, b, err := c.answer()
	if err != nil {
		l.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, b
}

var csrfValue = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// TestCopiedCookieAfterSignOut: an attacker copies a session's cookie; the
// user signs out; the copy is refused by the API and the page, and still
// after a restart; another session goes on.
func TestCopiedCookieAfterSignOut(t *testing.T) {
	l := newLiveServer(t, nil)
	victim, other := l.signIn(), l.signIn()
	code, page := l.withCookie(victim, "GET", pagePath, "")
	m := csrfValue.FindStringSubmatch(page)
	if code != http.StatusOK || m == nil {
		t.Fatalf("the page: %d, csrf %v", code, m)
	}
	if code, _ := l.withCookie(victim, "GET", apiPrefix+"/runs", ""); code != http.StatusOK {
		t.Fatalf("the copy before the sign-out: %d", code)
	}
	if code, _ := l.withCookie(victim, "POST", pagePath+"/logout", url.Values{"csrf": {m[1]}}.Encode()); code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", code)
	}
	refused := func(when string) {
		if code, body := l.withCookie(victim, "GET", apiPrefix+"/runs", ""); code != http.StatusUnauthorized || !strings.Contains(body, msgSessionEnded) {
			t.Errorf("%s: the copied cookie on the API: %d %s, want 401", when, code, body)
		}
		if code, _ := l.withCookie(victim, "GET", pagePath, ""); code != http.StatusSeeOther {
			t.Errorf("%s: the copied cookie on the page: %d, want the sign-in form (303)", when, code)
		}
		if code, _ := l.withCookie(other, "GET", apiPrefix+"/runs", ""); code != http.StatusOK {
			t.Errorf("%s: another session: %d, want 200", when, code)
		}
	}
	refused("after the sign-out")
	st, err := os.Stat(l.root.Dir + "/" + signedOutFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, mode %v; want 0600", signedOutFile, err, st.Mode())
	}
	l.restart()
	refused("after a restart")
}

// TestNewAPIKeyEndsSessions: admin_api_key is changed in the config while
// the server runs; from then on the old key and every session made with
// it are refused, and the new key works, without a restart.
func TestNewAPIKeyEndsSessions(t *testing.T) {
	t.Parallel()
	l := newLiveServer(t, nil)
	cookie := l.signIn()
	if code, _ := l.withCookie(cookie, "GET", apiPrefix+"/runs", ""); code != http.StatusOK {
		t.Fatalf("the session: %d", code)
	}
	text, err := os.ReadFile(l.cfg)
	if err != nil {
		t.Fatal(err)
	}
	const newKey = "a-new-key-after-a-leak"
	if err := os.WriteFile(l.cfg, []byte(strings.Replace(string(text), testKey, newKey, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	testproject.WaitFor(t, "the session to end", func() bool {
		code, _ := l.withCookie(cookie, "GET", apiPrefix+"/runs", "")
		return code == http.StatusUnauthorized
	})
	for key, want := range map[string]int{testKey: http.StatusUnauthorized, newKey: http.StatusOK} {
		c := l.dial()
		c.send(l.request("GET", apiPrefix+"/runs", "X-API-Key: "+key, "Connection: close") + "\r\n")
		if resp, _, err := c.answer(); err != nil || resp.StatusCode != want {
			t.Errorf("X-API-Key %q: %v %v, want %d", key, resp, err, want)
		}
	}
	if l.log.count("admin_api_key changed in") != 1 {
		t.Errorf("no log line says the key changed")
	}
}
