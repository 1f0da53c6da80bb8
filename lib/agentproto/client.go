package agentproto

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

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
