package server

// Slow readers: peers that send requests and never read the answers, over
// HTTP/1.1 and HTTP/2, with and without TLS, and the connection places
// they would hold; docs/reliability.md ("Security") lists them.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/agentproto"
	"potato-training/lib/config"
	"potato-training/lib/rundir"
	"potato-training/lib/validate"
)

// slowReadBound is the issue's bar: a peer that never reads is dropped
// within 45 s with the default limits.
const slowReadBound = 45 * time.Second

// jsPath is the page's script, 30 KB, served to anyone: what a slow
// reader asks for again and again.
const jsPath = pagePath + "/static/training.js"

// trackedListener records each connection the server accepts from it:
// its peer, when it was accepted, when the server closed it and how many
// bytes the server wrote to it. It sits under the server's own listener,
// so it sees the connections that listener refuses too.
type trackedListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*trackedConn
}

type trackedConn struct {
	net.Conn
	accepted time.Time
	written  atomic.Int64
	once     sync.Once
	closed   chan struct{}
	closedAt time.Time // set before closed is closed
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, accepted: time.Now(), closed: make(chan struct{})}
	l.mu.Lock()
	l.conns = append(l.conns, tc)
	l.mu.Unlock()
	return tc, nil
}

func (l *trackedListener) all() []*trackedConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*trackedConn(nil), l.conns...)
}

// from returns the connections whose peer's address is one of hosts.
func (l *trackedListener) from(hosts ...string) []*trackedConn {
	var out []*trackedConn
	for _, c := range l.all() {
		h, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		for _, x := range hosts {
			if h == x {
				out = append(out, c)
			}
		}
	}
	return out
}

func (c *trackedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// ReadFrom keeps the sendfile of the connection beneath.
func (c *trackedConn) ReadFrom(r io.Reader) (int64, error) {
	n, err := c.Conn.(io.ReaderFrom).ReadFrom(r)
	c.written.Add(n)
	return n, err
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.closedAt = time.Now()
		close(c.closed)
	})
	return c.Conn.Close()
}

func (c *trackedConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// waitClosed waits at most bound for the server to close c, and returns
// how long after its accept it did.
func (c *trackedConn) waitClosed(bound time.Duration) (time.Duration, error) {
	select {
	case <-c.closed:
		return c.closedAt.Sub(c.accepted), nil
	case <-time.After(time.Until(c.accepted.Add(bound))):
		return 0, fmt.Errorf("still open %s after it was accepted", bound)
	}
}

// answerWithin reads one answer, its body whole, within d.
func answerWithin(c *rawConn, d time.Duration) (*http.Response, string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// serveTracked is newLiveServerWith on a listener of the test's: a
// trackedListener on 127.0.0.1, or on ln when it is given.
func serveTracked(t *testing.T, lim *limits, certs *Certs, ln net.Listener) (*liveServer, *trackedListener) {
	t.Helper()
	path, _, root, tok := agentProject(t, "")
	testproject.SetAPIKey(t, path, testKey)
	cfg, _, err := validate.File(path)
	if err != nil {
		t.Fatal(err)
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	tl := &trackedListener{Listener: ln}
	l := &liveServer{t: t, cfg: path, tok: tok, root: root, log: &logBook{t: t}, certs: certs, addr: ln.Addr().String()}
	l.s = &Server{ConfigPath: path, Config: cfg, Root: root, LongPoll: 2 * time.Second, Logf: l.log.logf, TLS: certs}
	if lim != nil {
		l.s.limits = *lim
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.s.Serve(ctx, tl) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return l, tl
}

// dialNarrow connects from the address from (any when "") with a receive
// buffer of rcvbuf bytes and a segment size so small that the server's
// send buffer stays small too: a few tens of kilobytes fill what the
// kernel holds for a peer that does not read, so that a thousand such
// peers press neither on the machine's TCP memory nor on the test's
// time, and a reader's pace is the server's. (On loopback, with its
// 64 KiB segments, the server's send buffer grows to 4 MiB otherwise.)
func dialNarrow(from, addr string, rcvbuf, mss int) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
			if serr == nil {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, mss)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	return d.Dial("tcp", addr)
}

// nonReaderBuf and nonReaderMSS are the receive buffer and the segment
// size of a peer that never reads: the least the kernel gives, and the
// least an Internet host must take. (A reader of these sizes stalls on
// loopback; a reader here is an Ethernet host's: 1460 bytes, 64 KiB.)
const (
	nonReaderBuf = 1024
	nonReaderMSS = 536
)

// pipelined is n requests for the page's script, sent at once.
func pipelined(addr string, n int) string {
	return strings.Repeat("GET "+jsPath+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n", n)
}

// scriptSize is the length of the page's script.
func scriptSize(t *testing.T) int64 {
	t.Helper()
	b, err := assets.ReadFile("assets/training.js")
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(b))
}

// The bound of the default limits: a peer that stops reading is dropped
// writeWindow after the server's write starts to wait on it (HTTP/1.1,
// and HTTP/2 when the connection's writes wait); an HTTP/2 peer that
// reads but never opens the flow-control window has its streams reset
// writeWindow after their writes wait, and its connection, idle then,
// closed idleTimeout later. Both are within 45 s.
func TestDefaultWriteWindow(t *testing.T) {
	lim := defaultLimits
	if lim.writeWindow <= 0 || lim.writeChunk <= 0 {
		t.Fatalf("no write deadline by default: window %s, chunk %d", lim.writeWindow, lim.writeChunk)
	}
	if lim.writeWindow > slowReadBound || lim.writeWindow+lim.idle > slowReadBound {
		t.Errorf("a slow reader may be kept %s (HTTP/1.1) or %s (HTTP/2), over %s", lim.writeWindow, lim.writeWindow+lim.idle, slowReadBound)
	}
}

// TestPipeliningNonReaders is the attack of issue 32 against the default
// limits: 1024 connections from 4 addresses (256 each, the most one
// address may hold), each sending 16 requests for the page's script at
// once and reading none of the answers. They hold every place (1024);
// the sign-in page still answers a fifth address while they do, taking
// the place of one of them; each is dropped within 45 s of its start,
// the server having written less than it was asked for.
func TestPipeliningNonReaders(t *testing.T) {
	testcli.Short(t, "it waits out the server's 20 s write deadline")
	t.Parallel()
	const perAddr, nAddr, asks = maxConnsPerHost, 4, 16
	var rl syscall.Rlimit
	if need := uint64(2*perAddr*nAddr + 200); syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Cur < need {
		t.Skipf("this process may open %d files; the test needs about %d", rl.Cur, need)
	}
	l, tl := serveTracked(t, nil, nil, nil)
	if c, err := dialFrom(t, "127.0.0.2", l.addr); err != nil {
		t.Skipf("no second loopback address to dial from: %v", err)
	} else {
		c.Close()
	}
	deadline := time.Now().Add(time.Minute)
	var slow []net.Conn
	t.Cleanup(func() {
		for _, c := range slow {
			c.Close()
		}
	})
	addrs := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"}
	for _, from := range addrs[:nAddr] {
		for i := 0; i < perAddr; i++ {
			c, err := dialNarrow(from, l.addr, nonReaderBuf, nonReaderMSS)
			if err != nil {
				t.Fatalf("connection %d from %s: %v", i, from, err)
			}
			slow = append(slow, c)
			if _, err := io.WriteString(c, pipelined(l.addr, asks)); err != nil {
				t.Fatalf("requests on connection %d from %s: %v", i, from, err)
			}
		}
	}
	// Every one held: 1024 connections accepted from them, none closed.
	for {
		held := 0
		for _, c := range tl.from(addrs...) {
			if !c.isClosed() {
				held++
			}
		}
		if held == len(slow) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server holds %d of the %d slow connections", held, len(slow))
		}
		time.Sleep(50 * time.Millisecond)
	}

	c, err := dialFrom(t, "127.0.0.5", l.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.send(l.request("GET", pagePath+"/login") + "\r\n")
	resp, body, err := answerWithin(c, 15*time.Second)
	stillHeld := 0
	for _, sc := range tl.from(addrs...) {
		if !sc.isClosed() {
			stillHeld++
		}
	}
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(body, `name="key"`) {
		t.Fatalf("the sign-in page while %d slow connections are held: %v %v", stillHeld, resp, err)
	}
	t.Logf("the sign-in page answered while %d slow connections were held", stillHeld)
	if stillHeld < len(slow)-perAddr {
		t.Errorf("the sign-in page answered once %d of %d slow connections were gone", len(slow)-stillHeld, len(slow))
	}
	if l.log.count("to make room for addresses that held fewer") != 1 {
		t.Errorf("the log does not say a connection was closed to make room")
	}

	var longest time.Duration
	full := asks * scriptSize(t)
	for _, sc := range tl.from(addrs...) {
		took, err := sc.waitClosed(slowReadBound)
		if err != nil {
			t.Fatalf("a slow reader from %s: %v", sc.RemoteAddr(), err)
		}
		longest = max(longest, took)
		if w := sc.written.Load(); w >= full {
			t.Errorf("the server wrote all %d bytes to a reader that never read", w)
		}
	}
	t.Logf("every slow reader dropped, the last %s after its start", longest.Round(100*time.Millisecond))
}

// TestSlowReadersTLSAndHTTP2: with the write window shortened to 1 s and
// the idle bound to 2 s, the peer that never reads is dropped over TLS
// with HTTP/1.1 and with HTTP/2, and so is the HTTP/2 peer that reads
// everything but never opens the flow-control window past its first
// 64 KiB, whose streams would otherwise wait for ever.
func TestSlowReadersTLSAndHTTP2(t *testing.T) {
	t.Parallel()
	pk := newTestPKI(t)
	certFile, keyFile := pk.issue(t, 7)
	certs, err := LoadCerts(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	lim := defaultLimits
	lim.writeWindow, lim.idle = time.Second, 2*time.Second
	l, tl := serveTracked(t, &lim, certs, nil)
	pool := x509.NewCertPool()
	pool.AddCert(pk.ca)
	const asks = 16
	full := asks * scriptSize(t)
	const bound = 15 * time.Second

	dialTLS := func(proto string) (*tls.Conn, *trackedConn) {
		n := len(tl.all())
		raw, err := dialNarrow("", l.addr, nonReaderBuf, nonReaderMSS)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		c := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{proto}})
		if err := c.Handshake(); err != nil {
			t.Fatal(err)
		}
		if got := c.ConnectionState().NegotiatedProtocol; got != proto {
			t.Fatalf("negotiated %q, want %q", got, proto)
		}
		all := tl.all()
		if len(all) != n+1 {
			t.Fatalf("%d connections accepted, want %d", len(all), n+1)
		}
		return c, all[n]
	}
	var wg sync.WaitGroup
	check := func(name string, sc *trackedConn, blocked bool) {
		defer wg.Done()
		took, err := sc.waitClosed(bound)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		t.Logf("%s: dropped %s after its start, %d bytes written to it", name, took.Round(100*time.Millisecond), sc.written.Load())
		if w := sc.written.Load(); blocked && w >= full {
			t.Errorf("%s: the server wrote %d bytes, all it was asked for", name, w)
		}
	}

	c, sc := dialTLS("http/1.1")
	if _, err := io.WriteString(c, pipelined(l.addr, asks)); err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go check("HTTP/1.1 over TLS, never reading", sc, true)

	// HTTP/2 whose windows let the server send everything: its writes
	// to the connection wait.
	c, sc = dialTLS("h2")
	if _, err := c.Write(h2Asks(l.addr, asks, true)); err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go check("HTTP/2, never reading", sc, true)

	// HTTP/2 that reads and never grants more window.
	c, sc = dialTLS("h2")
	if _, err := c.Write(h2Asks(l.addr, asks, false)); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, c) }()
	wg.Add(1)
	go check("HTTP/2, reading, the window closed", sc, false)
	wg.Wait()
	// The server still answers.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	resp, err := hc.Get("https://" + l.addr + pagePath + "/login")
	if err != nil || resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("the sign-in page over HTTP/2 afterwards: %v %v", resp, err)
	}
	resp.Body.Close()
}

// h2Asks is the start of an HTTP/2 connection (RFC 9113) that asks n
// times for the page's script: the preface, SETTINGS, and a HEADERS
// frame per stream, its fields as HPACK literals. When open, the
// initial stream window and the connection's are the largest allowed, so
// that the server may send everything at once.
func h2Asks(authority string, n int, open bool) []byte {
	var b bytes.Buffer
	frame := func(typ, flags byte, stream uint32, payload []byte) {
		var h [9]byte
		h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
		h[3], h[4] = typ, flags
		binary.BigEndian.PutUint32(h[5:], stream)
		b.Write(h[:])
		b.Write(payload)
	}
	b.WriteString("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	const maxWindow = 1<<31 - 1
	var settings []byte
	if open {
		settings = binary.BigEndian.AppendUint16(settings, 0x4) // SETTINGS_INITIAL_WINDOW_SIZE
		settings = binary.BigEndian.AppendUint32(settings, maxWindow)
	}
	frame(0x4, 0, 0, settings)
	if open {
		frame(0x8, 0, 0, binary.BigEndian.AppendUint32(nil, maxWindow-65535)) // WINDOW_UPDATE
	}
	literal := func(index byte, value string) []byte {
		// A literal header field without indexing, its name from the
		// static table (RFC 7541, 6.2.2); the values here are short.
		return append([]byte{index, byte(len(value))}, value...)
	}
	var fields []byte
	fields = append(fields, 0x82, 0x87) // :method GET, :scheme https
	fields = append(fields, literal(0x04, jsPath)...)
	fields = append(fields, literal(0x01, authority)...)
	for i := 0; i < n; i++ {
		frame(0x1, 0x5, uint32(2*i+1), fields) // HEADERS, END_STREAM|END_HEADERS
	}
	return b.Bytes()
}

// TestSteadyReadersKept: with the write window shortened to 1 s, what
// keeps a minimum rate goes on: a bundle download read at 640 KiB/s,
// sent by sendfile, for about 6 s; the same over HTTP/2; a claim whose
// long poll (2 s) sends nothing for longer than the window. A download
// whose reader stops halfway is dropped.
func TestSteadyReadersKept(t *testing.T) {
	t.Parallel()
	pk := newTestPKI(t)
	certFile, keyFile := pk.issue(t, 8)
	certs, err := LoadCerts(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	lim := defaultLimits
	lim.writeWindow = time.Second
	for _, tc := range []struct {
		name  string
		certs *Certs
	}{{"http", nil}, {"https", certs}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, tl := serveTracked(t, &lim, tc.certs, nil)
			bundle, path := runWithBundle(t, l)
			pool := x509.NewCertPool()
			pool.AddCert(pk.ca)
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true,
				DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return dialNarrow("", addr, 64<<10, 1460) }}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr}
			get := func() *http.Response {
				req, _ := http.NewRequest("GET", tc.name+"://"+l.addr+path, nil)
				req.Header.Set("Authorization", "Bearer "+bundleToken)
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("the bundle: %s", resp.Status)
				}
				return resp
			}

			// Steady: 64 KiB every 100 ms. A quarter of the way, the
			// server has not sent everything: it goes at the reader's
			// pace (over HTTP/2 the client's window holds it all).
			start := time.Now()
			n := len(tl.all())
			resp := get()
			conn := tl.all()[n]
			var got bytes.Buffer
			buf := make([]byte, 64<<10)
			for {
				n, err := io.ReadFull(resp.Body, buf)
				got.Write(buf[:n])
				if err != nil {
					break
				}
				if w := conn.written.Load(); got.Len() == len(bundle)/4 && resp.ProtoMajor == 1 && w >= int64(len(bundle)) {
					t.Errorf("the server wrote %d bytes while the reader had taken %d: it did not wait for the reader", w, got.Len())
				}
				time.Sleep(100 * time.Millisecond)
			}
			resp.Body.Close()
			if !bytes.Equal(got.Bytes(), bundle) {
				t.Fatalf("a download at 640 KiB/s over %s (%s): %d of %d bytes", resp.Proto, time.Since(start).Round(time.Second), got.Len(), len(bundle))
			}
			t.Logf("a download at 640 KiB/s over %s: whole after %s", resp.Proto, time.Since(start).Round(100*time.Millisecond))

			// A claim's long poll: nothing to send for 2 s, then 204.
			req, _ := http.NewRequest("POST", tc.name+"://"+l.addr+agentPrefix+"/claim", strings.NewReader(`{"backend":"lab","host":"h"}`))
			req.Header.Set("Authorization", "Bearer "+l.tok)
			req.Header.Set("Content-Type", "application/json")
			if resp, err := hc.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
				t.Errorf("a claim that waits out its long poll: %v %v", resp, err)
			} else {
				resp.Body.Close()
			}

			// Stopped halfway: dropped, not finished once it reads again.
			if tc.name == "https" {
				return // over HTTP/2 the client's window holds the whole bundle
			}
			tr.CloseIdleConnections()
			n = len(tl.all())
			resp = get()
			if _, err := io.ReadFull(resp.Body, buf); err != nil {
				t.Fatal(err)
			}
			all := tl.all()
			if len(all) != n+1 {
				t.Fatalf("%d connections, want %d", len(all), n+1)
			}
			if took, err := all[n].waitClosed(15 * time.Second); err != nil {
				t.Errorf("a download whose reader stopped: %v", err)
			} else {
				t.Logf("a download whose reader stopped: dropped %s after its start", took.Round(100*time.Millisecond))
			}
			rest, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if len(rest)+len(buf) >= len(bundle) {
				t.Errorf("the stopped download went on to the end once read again")
			}
		})
	}
}

// runWithBundle makes a running run of the agent backend whose dispatch, on
// its socket, says yes to the bundle's HEAD as the real one does; it
// returns the bundle (4 MiB) and its route.
func runWithBundle(t *testing.T, l *liveServer) ([]byte, string) {
	t.Helper()
	run, err := l.root.Create(rundir.Record{Backend: "lab", BackendType: config.TypeAgent, Trainer: "x", State: rundir.StateRunning})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	bundle := make([]byte, 4<<20)
	rand.Read(bundle)
	file := filepath.Join(l.root.RunDir(run.ID), rundir.BundleArchive)
	if err := os.WriteFile(file, bundle, 0o644); err != nil {
		t.Fatal(err)
	}
	ln, sock, err := agentproto.ListenUnix(run.Path(rundir.SocketFile))
	if err != nil {
		t.Fatal(err)
	}
	srv := agentproto.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+bundleToken {
			agentproto.WriteError(w, http.StatusUnauthorized, "wrong token")
			return
		}
		f, err := os.Open(file)
		if err != nil {
			agentproto.WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		defer f.Close()
		fi, _ := f.Stat()
		agentproto.ServeBundle(w, r, f, fi)
	}))
	t.Cleanup(func() { srv.Close() })
	if err := run.Update(func(r *rundir.Record) { r.AgentSocket = sock }); err != nil {
		t.Fatal(err)
	}
	return bundle, agentPrefix + "/runs/" + run.ID + "/bundle"
}

// The address a connection counts against: an IPv6 peer's /64, as the
// sign-in limiter counts it; an IPv4 address, mapped into IPv6 or not,
// as itself.
func TestPeerHostIPv6Prefix(t *testing.T) {
	tcp := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 443} }
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{tcp("2001:db8:1:2::1"), "2001:db8:1:2::/64"},
		{tcp("2001:db8:1:2:ffff:ffff:ffff:fffe"), "2001:db8:1:2::/64"},
		{tcp("2001:db8:1:3::1"), "2001:db8:1:3::/64"},
		{tcp("::1"), "::/64"},
		{tcp("::2"), "::/64"},
		{tcp("192.0.2.7"), "192.0.2.7"},
		{tcp("::ffff:192.0.2.7"), "192.0.2.7"},
		{&net.UnixAddr{Name: "@x", Net: "unix"}, "@x"},
		{fakeAddr("[2001:db8:1:2::9]:80"), "2001:db8:1:2::/64"},
	} {
		if got := peerHost(tc.addr); got != tc.want {
			t.Errorf("peerHost(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
	r := &http.Request{RemoteAddr: "[2001:db8:1:2::1]:5000", Header: http.Header{}}
	if got := clientAddr(r); got != peerHost(tcp("2001:db8:1:2::77")) {
		t.Errorf("the sign-in limiter counts %s as %q, the connection cap as %q", r.RemoteAddr, got, peerHost(tcp("2001:db8:1:2::77")))
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "tcp" }
func (a fakeAddr) String() string  { return string(a) }

// TestIPv6PeersShareCap: two peers of one /64, ::1 and ::2, share the
// bound of one address; a peer of another /64 does not. A network
// namespace of its own (unshare -rn) gives the test its addresses: the
// test runs again inside it, where lo holds ::1, ::2 and fd00::2.
func TestIPv6PeersShareCap(t *testing.T) {
	if os.Getenv("POTATO_TEST_IPV6_NETNS") == "" {
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Skip("no unshare to make a network namespace with two addresses of one /64; TestPeerHostIPv6Prefix checks the key")
		}
		if _, err := exec.LookPath("ip"); err != nil {
			t.Skip("no ip to add addresses; TestPeerHostIPv6Prefix checks the key")
		}
		t.Parallel()
		cmd := exec.Command("unshare", "-rn", "sh", "-c",
			`ip link set lo up && ip -6 addr add ::2/128 dev lo nodad && ip -6 addr add fd00::2/128 dev lo nodad && echo netns-ready && exec "$0" "$@"`,
			os.Args[0], "-test.run=^TestIPv6PeersShareCap$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "POTATO_TEST_IPV6_NETNS=1")
		out, err := cmd.CombinedOutput()
		if !bytes.Contains(out, []byte("netns-ready")) {
			t.Skipf("cannot make a network namespace with ::2 (%v): %s; TestPeerHostIPv6Prefix checks the key", err, out)
		}
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestIPv6PeersShareCap")) {
			t.Fatalf("in the namespace: %v\n%s", err, out)
		}
		t.Logf("in the namespace:\n%s", out)
		return
	}
	lim := defaultLimits
	lim.conns, lim.perHost = 10, 2
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	l, _ := serveTracked(t, &lim, nil, ln)
	get := func(from string) (*http.Response, error) {
		c, err := dialFrom(t, from, l.addr)
		if err != nil {
			t.Fatalf("from %s: %v", from, err)
		}
		c.send("GET " + pagePath + "/login HTTP/1.1\r\nHost: " + l.addr + "\r\n\r\n")
		resp, _, err := c.answer()
		return resp, err
	}
	for i := 0; i < lim.perHost; i++ {
		if resp, err := get("::1"); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d from ::1: %v %v", i, resp, err)
		}
	}
	if resp, err := get("::2"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("::2, of the /64 of ::1, which holds %d: %v %v, want 503", lim.perHost, resp, err)
	}
	if resp, err := get("fd00::2"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("fd00::2, of another /64: %v %v, want 200", resp, err)
	}
	if l.log.count("(the last: ::/64)") != 1 {
		t.Errorf("the log does not name the /64 refused")
	}
}
