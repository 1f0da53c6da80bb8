package agentproto

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"potato-training/lib/atomicfile"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
)

// Client is the agent's end of the protocol. Every request carries the
// token as "Authorization: Bearer"; the token is never put in a URL or an
// error message.
type Client struct {
	base    string // scheme://host[/prefix], no trailing slash
	token   string
	hc      *http.Client
	backoff time.Duration // first wait between bundle attempts; doubles
}

// ClientOptions are how a client may reach its server.
type ClientOptions struct {
	// InsecureHTTP lets the token travel in plain http:// to a host
	// outside loopback; without it such a URL is refused.
	InsecureHTTP bool
	// CAFile is a PEM file of the certificate authorities an https://
	// server's certificate is checked against, instead of the system's:
	// a private CA.
	CAFile string
}

// NewClient makes a client of the server at server: "https://host:port"
// or "http://..." (a path prefix is kept), or "unix:/path/to.sock",
// reached as host "agent". Since every request carries the token in a
// header, plain http:// is refused for a host outside loopback unless
// o.InsecureHTTP is set.
func NewClient(server, token string, o ClientOptions) (*Client, error) {
	if err := checkToken(token); err != nil {
		return nil, err
	}
	tr := &http.Transport{
		MaxIdleConns:          8,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ExpectContinueTimeout: 2 * time.Second,
		// A claim's answer may take its long poll, 25 s.
		ResponseHeaderTimeout: 2 * time.Minute,
	}
	var base string
	if sock, ok := strings.CutPrefix(server, "unix:"); ok {
		if sock == "" {
			return nil, errors.New(`server "unix:" names no socket`)
		}
		if len(sock) > MaxSocketPath {
			return nil, fmt.Errorf("socket path %q is longer than %d bytes", sock, MaxSocketPath)
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
		base = "http://agent"
	} else {
		u, err := url.Parse(server)
		if err != nil {
			return nil, fmt.Errorf("server URL: %w", err)
		}
		switch {
		case u.Scheme != "http" && u.Scheme != "https":
			return nil, fmt.Errorf("server URL %q: want http://, https:// or unix:", server)
		case u.Host == "":
			return nil, fmt.Errorf("server URL %q names no host", server)
		case u.User != nil:
			return nil, errors.New("the server URL must not carry credentials; the token is passed apart")
		case u.RawQuery != "" || u.Fragment != "":
			return nil, fmt.Errorf("server URL %q: no query or fragment, please", server)
		case u.Scheme == "http" && !o.InsecureHTTP && !IsLoopbackHost(u.Hostname()):
			return nil, fmt.Errorf("server URL %q: plain http:// would carry the token unencrypted to %s; "+
				"use https:// (--ca-file for a private CA), or --insecure-http on a network you trust", server, u.Hostname())
		case o.CAFile != "" && u.Scheme != "https":
			return nil, fmt.Errorf("server URL %q: a CA file is for https:// servers", server)
		}
		if o.CAFile != "" {
			pem, err := os.ReadFile(o.CAFile)
			if err != nil {
				return nil, fmt.Errorf("CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("CA file %s: no PEM certificate in it", o.CAFile)
			}
			tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		} else {
			tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tr.Proxy = http.ProxyFromEnvironment
		tr.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		tr.ForceAttemptHTTP2 = true
		base = u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/")
	}
	hc := &http.Client{
		Transport: tr,
		// The protocol has no redirects; following one could send the
		// body (and, to the same host, the token) somewhere unexpected.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Client{base: base, token: token, hc: hc, backoff: 500 * time.Millisecond}, nil
}

// IsLoopbackHost reports whether host (a URL's host name, without port)
// is this machine's loopback: localhost, or an address of 127.0.0.0/8
// or ::1.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkToken refuses a token a header cannot carry; the message does not
// quote it.
func checkToken(token string) error {
	if token == "" {
		return errors.New("no token")
	}
	for i := 0; i < len(token); i++ {
		if token[i] <= ' ' || token[i] >= 0x7f {
			return errors.New("the token holds a character a request header cannot carry")
		}
	}
	return nil
}

// WithToken returns a client of the same server that sends token, e.g. a
// claim's run token.
func (c *Client) WithToken(token string) (*Client, error) {
	if err := checkToken(token); err != nil {
		return nil, err
	}
	d := *c
	d.token = token
	return &d, nil
}

// request sends one request to route (under PathPrefix). A non-2xx
// answer is returned as *HTTPError, its body consumed.
func (c *Client) request(ctx context.Context, method, route string, body io.Reader, size int64, hdr http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+PathPrefix+route, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.ContentLength = size
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, c.httpError(resp)
}

func (c *Client) httpError(resp *http.Response) *HTTPError {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var eb errorBody
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &eb) == nil && eb.Error != "" {
		msg = eb.Error
	} else if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	if loc := resp.Header.Get("Location"); resp.StatusCode/100 == 3 && loc != "" {
		msg = fmt.Sprintf("redirected to %q; give that as the server", loc)
	}
	// A server that echoes the token does not get it into a log.
	msg = strings.ReplaceAll(msg, c.token, "<token>")
	return &HTTPError{Code: resp.StatusCode, Msg: msg}
}

func (c *Client) jsonCall(ctx context.Context, method, route string, in, out any) (int, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return 0, err
	}
	hdr := http.Header{"Content-Type": {"application/json"}}
	resp, err := c.request(ctx, method, route, bytes.NewReader(b), int64(len(b)), hdr)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent || out == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return resp.StatusCode, nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(out); err != nil {
		return resp.StatusCode, fmt.Errorf("bad answer: %w", err)
	}
	return resp.StatusCode, nil
}

// Claim asks for a run; the server holds the request up to its long poll.
// It returns nil, nil when there is none.
func (c *Client) Claim(ctx context.Context, req ClaimRequest) (*Claim, error) {
	var cl Claim
	code, err := c.jsonCall(ctx, http.MethodPost, "/claim", req, &cl)
	if err != nil {
		return nil, fmt.Errorf("claiming a run: %w", err)
	}
	if code == http.StatusNoContent {
		return nil, nil
	}
	if !rundir.ValidID(cl.RunID) {
		return nil, fmt.Errorf("claiming a run: the server handed out an invalid run id %q", cl.RunID)
	}
	return &cl, nil
}

func runRoute(runID, what string) (string, error) {
	if !rundir.ValidID(runID) {
		return "", fmt.Errorf("invalid run id %q", runID)
	}
	return "/runs/" + runID + "/" + what, nil
}

// PostEvents sends evs, then raw (lines that are not events, sent as they
// are), as JSON Lines; a batch over MaxEventsBody goes in several
// requests. The replies are merged: cancel when any says so.
func (c *Client) PostEvents(ctx context.Context, runID string, evs []events.Event, raw [][]byte) (Reply, error) {
	route, err := runRoute(runID, "events")
	if err != nil {
		return Reply{}, fmt.Errorf("posting events: %w", err)
	}
	var bodies [][]byte
	var cur []byte
	add := func(line []byte) {
		if len(cur) > 0 && len(cur)+len(line) > MaxEventsBody {
			bodies = append(bodies, cur)
			cur = nil
		}
		cur = append(cur, line...)
	}
	for _, ev := range evs {
		add(ev.Line())
	}
	for _, line := range raw {
		if len(line) > events.MaxLine {
			line = line[:events.MaxLine]
		}
		if len(line) == 0 || line[len(line)-1] != '\n' {
			line = append(line[:len(line):len(line)], '\n')
		}
		add(line)
	}
	bodies = append(bodies, cur) // an empty one is a heartbeat
	var out Reply
	for _, b := range bodies {
		var r Reply
		hdr := http.Header{"Content-Type": {"application/x-ndjson"}}
		resp, err := c.request(ctx, http.MethodPost, route, bytes.NewReader(b), int64(len(b)), hdr)
		if err != nil {
			return out, fmt.Errorf("posting events: %w", err)
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(&r)
		resp.Body.Close()
		if err != nil {
			return out, fmt.Errorf("posting events: bad answer: %w", err)
		}
		if r.Cancel {
			out.Cancel = true
			out.GraceSeconds = max(out.GraceSeconds, r.GraceSeconds)
		}
	}
	return out, nil
}

// Heartbeat is an empty POST of events: word that the agent is alive,
// answered with whether to cancel.
func (c *Client) Heartbeat(ctx context.Context, runID string) (Reply, error) {
	return c.PostEvents(ctx, runID, nil, nil)
}

// UploadPredictions PUTs the file at path. A file over the server's limit
// gives an error matching ErrTooLarge; "Expect: 100-continue" lets the
// server refuse it before the file is sent.
func (c *Client) UploadPredictions(ctx context.Context, runID, path string) error {
	route, err := runRoute(runID, "predictions")
	if err != nil {
		return fmt.Errorf("uploading predictions: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("uploading predictions: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("uploading predictions: %w", err)
	}
	hdr := http.Header{"Content-Type": {"application/x-ndjson"}, "Expect": {"100-continue"}}
	var body io.Reader = f
	if fi.Size() == 0 {
		body = http.NoBody
	}
	resp, err := c.request(ctx, http.MethodPut, route, body, fi.Size(), hdr)
	if err != nil {
		return fmt.Errorf("uploading predictions %s (%d bytes): %w", path, fi.Size(), err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return nil
}

// PostResult reports how the run ended.
func (c *Client) PostResult(ctx context.Context, runID string, res Result) error {
	route, err := runRoute(runID, "result")
	if err == nil {
		_, err = c.jsonCall(ctx, http.MethodPost, route, res, nil)
	}
	if err != nil {
		return fmt.Errorf("posting the result: %w", err)
	}
	return nil
}

// DownloadBundle downloads the run's bundle to dst. It writes dst+".part"
// and, when a transfer breaks off, asks for the rest with a Range request,
// up to BundleAttempts requests in all, waiting a little longer before
// each. The file must then have want's size and sha256, or it is removed
// and that is the error; it is renamed to dst only when it does. progress,
// when set, is called as bytes arrive.
//
// The sha256 is computed as the bytes are written, across the attempts,
// so the file is never read back. The file is fsynced before the rename;
// while the bytes arrive, a flusher has the disk write what came so far,
// so that fsync finds little left.
func (c *Client) DownloadBundle(ctx context.Context, runID, dst string, want BundleInfo, progress func(done, total int64)) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("downloading the bundle: %w", err)
		}
	}()
	route, err := runRoute(runID, "bundle")
	if err != nil {
		return err
	}
	if want.Bytes <= 0 {
		return fmt.Errorf("the claim gives the bundle's size as %d", want.Bytes)
	}
	if b, err := hex.DecodeString(want.SHA256); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("the claim's bundle sha256 %q is not 64 hex digits", want.SHA256)
	}
	part := dst + ".part"
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	kept := false
	defer func() {
		if f != nil {
			f.Close()
		}
		if !kept {
			os.Remove(part)
		}
	}()

	d := &download{c: c, route: route, f: f, h: newHasher(), fl: newFlusher(f), total: want.Bytes, progress: progress}
	defer d.h.close()
	defer d.fl.stop()
	var last error
	attempt := 0
	for ; attempt < BundleAttempts && !d.complete; attempt++ {
		if attempt > 0 {
			wait := c.backoff << (attempt - 1)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(wait, 4*time.Second)):
			}
		}
		retry, err := d.attempt(ctx)
		if err == nil {
			continue
		}
		if !retry || ctx.Err() != nil {
			return err
		}
		last = err
	}
	if !d.complete {
		return fmt.Errorf("gave up after %d attempts: %w", attempt, last)
	}

	if d.done != want.Bytes {
		return fmt.Errorf("got %d bytes, the claim says %d", d.done, want.Bytes)
	}
	if got := hex.EncodeToString(d.h.sum()); !strings.EqualFold(got, want.SHA256) {
		return fmt.Errorf("sha256 mismatch: got %s, the claim says %s", got, want.SHA256)
	}
	// An error of a flush in the background is reported there and only
	// there: the fsync on the same file would not see it again.
	if err := d.fl.stop(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	err = f.Close()
	f = nil
	if err != nil {
		return err
	}
	if err := atomicfile.Promote(part, dst); err != nil {
		return err
	}
	kept = true
	return nil
}

// download is the state of one bundle download across its attempts.
type download struct {
	c         *Client
	route     string
	f         *os.File
	h         *hasher // sha256 of the bytes in f
	fl        *flusher
	total     int64
	done      int64  // bytes in f
	validator string // ETag or Last-Modified of the first answer, for If-Range
	complete  bool
	progress  func(done, total int64)
}

// attempt makes one request for what is missing. retry is false for an
// error another attempt cannot cure.
func (d *download) attempt(ctx context.Context) (retry bool, err error) {
	hdr := http.Header{}
	if d.done > 0 {
		hdr.Set("Range", fmt.Sprintf("bytes=%d-", d.done))
		if d.validator != "" {
			hdr.Set("If-Range", d.validator)
		}
	}
	resp, err := d.c.request(ctx, http.MethodGet, d.route, nil, 0, hdr)
	if err != nil {
		var he *HTTPError
		if errors.As(err, &he) {
			if he.Code == http.StatusRequestedRangeNotSatisfiable && d.done == d.total {
				d.complete = true
				return false, nil
			}
			if he.Code == http.StatusRequestedRangeNotSatisfiable {
				if rerr := d.restart(); rerr != nil {
					return false, rerr
				}
				return true, err
			}
			if he.Code/100 == 4 && he.Code != http.StatusRequestTimeout && he.Code != http.StatusTooManyRequests {
				return false, err
			}
		}
		return true, err
	}
	defer resp.Body.Close()
	end := d.total // where this answer's body ends
	switch resp.StatusCode {
	case http.StatusOK:
		// The whole file: the server ignored the range, or the bundle
		// changed since the first answer.
		if err := d.restart(); err != nil {
			return false, err
		}
		if resp.ContentLength >= 0 {
			end = resp.ContentLength
		}
	case http.StatusPartialContent:
		start, last, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != d.done {
			if err := d.restart(); err != nil {
				return false, err
			}
			return true, fmt.Errorf("the server sent range %q for bytes=%d-", resp.Header.Get("Content-Range"), d.done)
		}
		end = last + 1
	default:
		return false, fmt.Errorf("unexpected answer %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	if end > d.total {
		return false, fmt.Errorf("the server sends %d bytes, the claim says %d", end, d.total)
	}
	if d.validator == "" {
		if et := resp.Header.Get("ETag"); et != "" && !strings.HasPrefix(et, "W/") {
			d.validator = et
		} else {
			d.validator = resp.Header.Get("Last-Modified")
		}
	}
	body := io.LimitReader(resp.Body, end-d.done)
	for {
		buf := d.h.buffer()
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, err := d.f.Write(buf[:n]); err != nil {
				d.h.give(buf[:0])
				return false, err
			}
			d.h.give(buf[:n])
			d.done += int64(n)
			d.fl.wrote(d.done)
			if d.progress != nil {
				d.progress(d.done, d.total)
			}
		}
		if n == 0 {
			d.h.give(buf[:0])
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return true, fmt.Errorf("transfer broke off at byte %d of %d: %w", d.done, d.total, rerr)
		}
	}
	if d.done < end {
		return true, fmt.Errorf("transfer broke off at byte %d of %d", d.done, d.total)
	}
	d.complete = d.done == d.total
	if !d.complete {
		return false, fmt.Errorf("the server's bundle has %d bytes, the claim says %d", d.done, d.total)
	}
	return false, nil
}

// restart empties the file, for an answer that starts at byte 0.
func (d *download) restart() error {
	d.done, d.validator = 0, ""
	d.fl.wrote(0)
	d.h.reset()
	if err := d.f.Truncate(0); err != nil {
		return err
	}
	_, err := d.f.Seek(0, io.SeekStart)
	return err
}

// flusher makes a download's bytes durable while more arrive: every
// flushEvery bytes written, a goroutine of its own syncs the file's data
// (fdatasync on Linux), which has the disk, and any cache below it, write
// them. The loop that reads and writes never waits for it: one flush may
// wait behind the one going, and a flush due while one waits is dropped,
// since the waiting one writes its bytes too. Without the flusher, the
// fsync before the rename would write the whole file then.
type flusher struct {
	f     *os.File
	kick  chan struct{}
	ended chan struct{}
	last  int64 // bytes written when a flush was last due
	err   error // the first flush's error, read after ended
	done  bool
}

// flushEvery is a variable for the tests, which flush often.
var flushEvery int64 = 16 << 20

func newFlusher(f *os.File) *flusher {
	x := &flusher{f: f, kick: make(chan struct{}, 1), ended: make(chan struct{})}
	go func() {
		defer close(x.ended)
		for range x.kick {
			if err := datasync(x.f); err != nil && x.err == nil {
				x.err = err
			}
		}
	}()
	return x
}

// wrote says the file now has n bytes; 0 after it is emptied.
func (x *flusher) wrote(n int64) {
	if n < x.last {
		x.last = 0
	}
	if n-x.last < flushEvery {
		return
	}
	x.last = n
	select {
	case x.kick <- struct{}{}:
	default: // a flush is due or going: it writes these bytes too
	}
}

// stop waits for a flush that is going, and returns the first flush's
// error. It may be called more than once.
func (x *flusher) stop() error {
	if !x.done {
		x.done = true
		close(x.kick)
	}
	<-x.ended
	return x.err
}

// hasher computes the download's sha256 on a goroutine of its own, over
// the buffers the download reads into and writes from: the loop that
// reads and writes does not wait for the hash, and no byte is copied
// for it. A buffer comes from buffer and goes back through give, with the
// bytes to hash.
type hasher struct {
	h    hash.Hash
	work chan []byte
	free chan []byte
}

const hashBuffers, hashBufferSize = 4, 256 << 10

func newHasher() *hasher {
	x := &hasher{h: sha256.New(), work: make(chan []byte, hashBuffers), free: make(chan []byte, hashBuffers)}
	for range hashBuffers {
		x.free <- make([]byte, hashBufferSize)
	}
	go func() {
		for b := range x.work {
			x.h.Write(b)
			x.free <- b[:cap(b)]
		}
	}()
	return x
}

func (x *hasher) buffer() []byte { return <-x.free }

// give hashes b, a buffer from buffer, and then takes it back.
func (x *hasher) give(b []byte) { x.work <- b }

// wait returns once every buffer given has been hashed.
func (x *hasher) wait() {
	var bufs [hashBuffers][]byte
	for i := range bufs {
		bufs[i] = <-x.free
	}
	for _, b := range bufs {
		x.free <- b
	}
}

func (x *hasher) sum() []byte {
	x.wait()
	return x.h.Sum(nil)
}

func (x *hasher) reset() {
	x.wait()
	x.h.Reset()
}

func (x *hasher) close() { close(x.work) }

// parseContentRange reads "bytes first-last/total".
func parseContentRange(s string) (first, last int64, ok bool) {
	s, ok = strings.CutPrefix(s, "bytes ")
	if !ok {
		return 0, 0, false
	}
	r, _, _ := strings.Cut(s, "/")
	a, b, ok := strings.Cut(r, "-")
	if !ok {
		return 0, 0, false
	}
	first, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || first < 0 || last < first {
		return 0, 0, false
	}
	return first, last, true
}
