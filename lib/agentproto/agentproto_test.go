package agentproto

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"potato-training/lib/events"
	"potato-training/lib/trainer"
)

const (
	testToken = "tok-9f8e7d6c5b4a-secret"
	testRun   = "20261202-135501-7f3a"
)

// fakeRun is one run's server side, recording what it was given.
type fakeRun struct {
	mu          sync.Mutex
	claims      chan *Claim
	claimReqs   []ClaimRequest
	bundle      string
	bundleCalls int
	posts       []post
	reply       Reply
	dir         string
	predCalls   int
	predErrs    []error
	results     []Result
}

type post struct {
	evs []events.Event
	bad []string
}

func newFake(t *testing.T) *fakeRun {
	return &fakeRun{claims: make(chan *Claim, 1), dir: t.TempDir()}
}

func (f *fakeRun) known(id string) error {
	if id != testRun {
		return &StatusError{Code: http.StatusNotFound, Msg: "no run " + id}
	}
	return nil
}

func (f *fakeRun) Claim(ctx context.Context, req ClaimRequest) (*Claim, error) {
	f.mu.Lock()
	f.claimReqs = append(f.claimReqs, req)
	f.mu.Unlock()
	select {
	case c := <-f.claims:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeRun) BundlePath(id string) (string, error) {
	f.mu.Lock()
	f.bundleCalls++
	f.mu.Unlock()
	return f.bundle, f.known(id)
}

func (f *fakeRun) Events(id string, evs []events.Event, bad []string) (Reply, error) {
	if err := f.known(id); err != nil {
		return Reply{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.posts = append(f.posts, post{evs, bad})
	return f.reply, nil
}

func (f *fakeRun) predictionsPath() string { return filepath.Join(f.dir, "predictions.jsonl") }

func (f *fakeRun) Predictions(id string, r io.Reader) error {
	if err := f.known(id); err != nil {
		return err
	}
	err := StoreFile(f.predictionsPath(), r)
	f.mu.Lock()
	f.predCalls++
	f.predErrs = append(f.predErrs, err)
	f.mu.Unlock()
	return err
}

func (f *fakeRun) Result(id string, res Result) error {
	if err := f.known(id); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.results = append(f.results, res)
	return nil
}

// serve serves h on a fresh unix socket made by ListenUnix.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	l, sock, err := ListenUnix(filepath.Join(t.TempDir(), "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := Serve(l, h)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func testOptions(opt HandlerOptions) HandlerOptions {
	if opt.TokenSHA256 == [32]byte{} && opt.Authorize == nil {
		opt.TokenSHA256 = sha256.Sum256([]byte(testToken))
	}
	if opt.LongPoll == 0 {
		opt.LongPoll = 200 * time.Millisecond
	}
	return opt
}

func client(t *testing.T, sock, token string) *Client {
	t.Helper()
	c, err := NewClient("unix:"+sock, token, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.backoff = time.Millisecond
	return c
}

// setup serves f through NewHandler and returns a client with the right
// token, and the socket.
func setup(t *testing.T, f *fakeRun, opt HandlerOptions) (*Client, string) {
	t.Helper()
	sock := serve(t, NewHandler(f, testOptions(opt)))
	return client(t, sock, testToken), sock
}

// rawClient talks HTTP over the socket with no help from Client.
func rawClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

func rawDo(t *testing.T, sock, method, route, auth string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://agent"+route, body)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := rawClient(sock).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// rawLine sends a request line exactly as given, so that the path is not
// cleaned or re-escaped on the way.
func rawLine(t *testing.T, sock, method, target string) int {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: agent\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", method, target, testToken)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func writeRandom(t *testing.T, path string, n int) BundleInfo {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return BundleInfo{Bytes: int64(n), SHA256: hex.EncodeToString(sum[:])}
}

func TestAuth(t *testing.T) {
	f := newFake(t)
	c, sock := setup(t, f, HandlerOptions{})
	route := PathPrefix + "/runs/" + testRun + "/events"

	for _, auth := range []string{"", "Basic " + testToken, "Bearer", "Bearer wrong-" + testToken} {
		resp, body := rawDo(t, sock, "POST", route, auth, nil)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: status %d, want 401", auth, resp.StatusCode)
		}
		if got := resp.Header.Get("WWW-Authenticate"); got != "Bearer" {
			t.Errorf("Authorization %q: WWW-Authenticate %q, want Bearer", auth, got)
		}
		var eb errorBody
		if err := json.Unmarshal(body, &eb); err != nil || eb.Error == "" {
			t.Errorf("Authorization %q: body %q is not a JSON error", auth, body)
		}
		if strings.Contains(string(body), testToken) {
			t.Errorf("the 401 body echoes the token: %s", body)
		}
	}

	const wrong = "not-the-token-123"
	_, err := client(t, sock, wrong).Heartbeat(context.Background(), testRun)
	var he *HTTPError
	if !errors.As(err, &he) || he.Code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %v, want a 401 HTTPError", err)
	}
	if strings.Contains(err.Error(), wrong) {
		t.Errorf("the error names the token: %v", err)
	}

	resp, _ := rawDo(t, sock, "POST", route, "Bearer "+testToken, nil)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("right token: status %d, want 200", resp.StatusCode)
	}
	if _, err := c.Heartbeat(context.Background(), testRun); err != nil {
		t.Errorf("right token: %v", err)
	}
	if len(f.posts) != 2 {
		t.Errorf("the run saw %d posts, want the 2 authorized ones", len(f.posts))
	}

	// A transport error names no token either.
	gone := client(t, filepath.Join(t.TempDir(), "none.sock"), testToken)
	if _, err := gone.Heartbeat(context.Background(), testRun); err == nil || strings.Contains(err.Error(), testToken) {
		t.Errorf("unreachable server: %v", err)
	}
	// Nor does the answer of a server that echoes what it was sent.
	echo := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusForbidden, "you sent "+r.Header.Get("Authorization"))
	}))
	if _, err := client(t, echo, testToken).Heartbeat(context.Background(), testRun); err == nil || strings.Contains(err.Error(), testToken) {
		t.Errorf("echoing server: %v", err)
	}
	// Nor does NewClient's refusal of a token a header cannot carry.
	if _, err := NewClient("unix:"+sock, "bad token\n", ClientOptions{}); err == nil || strings.Contains(err.Error(), "bad token") {
		t.Errorf("NewClient with a bad token: %v", err)
	}
}

func TestAuthorizeFunc(t *testing.T) {
	f := newFake(t)
	sock := serve(t, NewHandler(f, testOptions(HandlerOptions{Authorize: func(tok string) bool { return tok == "other" }})))
	if _, err := client(t, sock, "other").Heartbeat(context.Background(), testRun); err != nil {
		t.Errorf("accepted token: %v", err)
	}
	if _, err := client(t, sock, testToken).Heartbeat(context.Background(), testRun); err == nil {
		t.Error("a token Authorize refuses was accepted")
	}
}

// An agent backend's token takes a run through the claim, and nothing
// else: the run's routes want the run's own token, so that another agent
// of the backend cannot post events or a result for a run it did not
// claim.
func TestClaimOnlyToken(t *testing.T) {
	f := newFake(t)
	sock := serve(t, NewHandler(f, testOptions(HandlerOptions{AuthorizeClaim: func(tok string) bool { return tok == "backend-token" }})))
	if resp, _ := rawDo(t, sock, "POST", PathPrefix+"/claim", "Bearer backend-token", strings.NewReader(`{"backend":"lab"}`)); resp.StatusCode == http.StatusUnauthorized {
		t.Errorf("claim with the backend's token: status %d", resp.StatusCode)
	}
	for _, path := range []string{"/runs/" + testRun + "/events", "/runs/" + testRun + "/result"} {
		if resp, _ := rawDo(t, sock, "POST", PathPrefix+path, "Bearer backend-token", strings.NewReader("{}")); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s with the backend's token: status %d, want 401", path, resp.StatusCode)
		}
	}
	if _, err := client(t, sock, testToken).Heartbeat(context.Background(), testRun); err != nil {
		t.Errorf("the run's token: %v", err)
	}
}

func TestZeroTokenAcceptsNothing(t *testing.T) {
	f := newFake(t)
	sock := serve(t, NewHandler(f, HandlerOptions{}))
	if resp, _ := rawDo(t, sock, "POST", PathPrefix+"/runs/"+testRun+"/events", "Bearer x", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("status %d, want 401", resp.StatusCode)
	}
}

func TestClaim(t *testing.T) {
	f := newFake(t)
	c, _ := setup(t, f, HandlerOptions{LongPoll: 100 * time.Millisecond, MaxPredictionsMB: 7})
	ctx := context.Background()
	req := ClaimRequest{Backend: "lab", Host: "ws1", Workdir: "/w", Version: "1.0"}

	start := time.Now()
	got, err := c.Claim(ctx, req)
	if err != nil || got != nil {
		t.Fatalf("nothing to hand out: %v, %v; want nil, nil (204)", got, err)
	}
	if d := time.Since(start); d < 90*time.Millisecond {
		t.Errorf("the claim came back after %v, before the long poll", d)
	}
	if f.claimReqs[0] != req {
		t.Errorf("the run got %+v, want %+v", f.claimReqs[0], req)
	}

	want := Claim{RunID: testRun, RunToken: "rt", Spec: trainer.Spec{V: 1, RunID: testRun, Trainer: "tfidf-logreg"},
		Bundle: BundleInfo{Bytes: 10, SHA256: strings.Repeat("ab", 32)}, GraceSeconds: 5}
	f.claims <- &want
	got, err = c.Claim(ctx, req)
	if err != nil || got == nil {
		t.Fatalf("claim: %v, %v", got, err)
	}
	if got.RunID != want.RunID || got.RunToken != "rt" || got.Spec.Trainer != "tfidf-logreg" || got.Bundle != want.Bundle {
		t.Errorf("claim %+v, want %+v", got, want)
	}
	if got.GraceSeconds != 5 || got.MaxPredictionsMB != 7 || got.HeartbeatTimeoutS != DefaultHeartbeatTimeoutS {
		t.Errorf("claim limits %d %d %d, want 5, 7 (the handler's) and %d", got.GraceSeconds, got.MaxPredictionsMB,
			got.HeartbeatTimeoutS, DefaultHeartbeatTimeoutS)
	}
}

func TestClaimLongPollGetsMidWaitClaim(t *testing.T) {
	f := newFake(t)
	c, _ := setup(t, f, HandlerOptions{LongPoll: 20 * time.Second})
	go func() {
		time.Sleep(150 * time.Millisecond)
		f.claims <- &Claim{RunID: testRun}
	}()
	start := time.Now()
	got, err := c.Claim(context.Background(), ClaimRequest{Backend: "lab"})
	if err != nil || got == nil || got.RunID != testRun {
		t.Fatalf("claim: %+v, %v", got, err)
	}
	// It came back with the run, not at the long poll's end.
	if d := time.Since(start); d < 100*time.Millisecond || d >= 20*time.Second {
		t.Errorf("the claim came back after %v, want once the run had one, before the long poll's 20 s", d)
	}
}

func TestBundleRoundTrip(t *testing.T) {
	f := newFake(t)
	f.bundle = filepath.Join(f.dir, "bundle.tar.gz")
	want := writeRandom(t, f.bundle, 300_000)
	c, sock := setup(t, f, HandlerOptions{})

	dst := filepath.Join(t.TempDir(), "bundle.tar.gz")
	var last, total int64
	err := c.DownloadBundle(context.Background(), testRun, dst, want, func(d, n int64) { last, total = d, n })
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(f.bundle)
	b, _ := os.ReadFile(dst)
	if !bytes.Equal(a, b) {
		t.Error("the downloaded bundle differs")
	}
	if last != want.Bytes || total != want.Bytes {
		t.Errorf("last progress %d/%d, want %d/%d", last, total, want.Bytes, want.Bytes)
	}
	if _, err := os.Stat(dst + ".part"); !os.IsNotExist(err) {
		t.Errorf("the .part file is left: %v", err)
	}

	req, _ := http.NewRequest("GET", "http://agent"+PathPrefix+"/runs/"+testRun+"/bundle", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Range", "bytes=1000-1999")
	resp, err := rawClient(sock).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	part, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(part, a[1000:2000]) {
		t.Errorf("Range: status %d, %d bytes", resp.StatusCode, len(part))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/gzip" {
		t.Errorf("Content-Type %q", ct)
	}
}

// dropWriter passes the first n bytes of a body, then drops the
// connection, as a network failure mid-transfer does.
type dropWriter struct {
	http.ResponseWriter
	n int
}

func (d *dropWriter) Write(p []byte) (int, error) {
	if len(p) <= d.n {
		d.n -= len(p)
		return d.ResponseWriter.Write(p)
	}
	k, _ := d.ResponseWriter.Write(p[:d.n])
	d.n = 0
	d.ResponseWriter.(http.Flusher).Flush()
	conn, _, err := http.NewResponseController(d.ResponseWriter).Hijack()
	if err == nil {
		conn.Close()
	}
	return k, errors.New("dropped")
}

// dropping serves h, dropping the connection after n bytes of the body
// of each of the first drops bundle requests; it records each request's
// Range and If-Range.
type dropping struct {
	h      http.Handler
	n      int
	drops  int
	mu     sync.Mutex
	ranges []string
}

func (d *dropping) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/bundle") {
		d.h.ServeHTTP(w, r)
		return
	}
	d.mu.Lock()
	d.ranges = append(d.ranges, r.Header.Get("Range")+"|"+r.Header.Get("If-Range"))
	drop := len(d.ranges) <= d.drops
	d.mu.Unlock()
	if drop {
		w = &dropWriter{ResponseWriter: w, n: d.n}
	}
	d.h.ServeHTTP(w, r)
}

func TestBundleResumesAfterDrop(t *testing.T) {
	f := newFake(t)
	f.bundle = filepath.Join(f.dir, "bundle.tar.gz")
	want := writeRandom(t, f.bundle, 500_000)
	d := &dropping{h: NewHandler(f, testOptions(HandlerOptions{})), n: 123_456, drops: 1}
	c := client(t, serve(t, d), testToken)

	dst := filepath.Join(t.TempDir(), "bundle.tar.gz")
	if err := c.DownloadBundle(context.Background(), testRun, dst, want, nil); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(f.bundle)
	b, _ := os.ReadFile(dst)
	if !bytes.Equal(a, b) {
		t.Error("the resumed bundle differs")
	}
	if len(d.ranges) != 2 {
		t.Fatalf("%d requests (%q), want 2", len(d.ranges), d.ranges)
	}
	rng, ifRange, _ := strings.Cut(d.ranges[1], "|")
	if rng != "bytes=123456-" {
		t.Errorf("second request Range %q, want bytes=123456-", rng)
	}
	if !strings.HasPrefix(ifRange, `"`) {
		t.Errorf("second request If-Range %q, want the first answer's ETag", ifRange)
	}
}

// TestBundleRestartsWhenRangeIgnored: a server (or a proxy) that answers
// the resumed request with the whole file, 200 and not 206. The client
// starts the file over, its running sha256 with it, and the bundle passes
// its check.
func TestBundleRestartsWhenRangeIgnored(t *testing.T) {
	f := newFake(t)
	f.bundle = filepath.Join(f.dir, "bundle.tar.gz")
	want := writeRandom(t, f.bundle, 500_000)
	h := NewHandler(f, testOptions(HandlerOptions{}))
	noRange := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del("Range")
		h.ServeHTTP(w, r)
	})
	d := &dropping{h: noRange, n: 123_456, drops: 1}
	c := client(t, serve(t, d), testToken)

	dst := filepath.Join(t.TempDir(), "bundle.tar.gz")
	if err := c.DownloadBundle(context.Background(), testRun, dst, want, nil); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(f.bundle)
	b, _ := os.ReadFile(dst)
	if !bytes.Equal(a, b) || len(d.ranges) != 2 {
		t.Errorf("bundle equal %v after %d requests (%q), want equal after 2", bytes.Equal(a, b), len(d.ranges), d.ranges)
	}
}

func TestBundleGivesUpAfterFiveAttempts(t *testing.T) {
	f := newFake(t)
	f.bundle = filepath.Join(f.dir, "bundle.tar.gz")
	want := writeRandom(t, f.bundle, 200_000)
	d := &dropping{h: NewHandler(f, testOptions(HandlerOptions{})), n: 10_000, drops: 1000}
	c := client(t, serve(t, d), testToken)

	dst := filepath.Join(t.TempDir(), "bundle.tar.gz")
	err := c.DownloadBundle(context.Background(), testRun, dst, want, nil)
	if err == nil || !strings.Contains(err.Error(), "after 5 attempts") {
		t.Fatalf("error %v, want one that gives up after 5 attempts", err)
	}
	if len(d.ranges) != BundleAttempts {
		t.Errorf("%d requests, want %d", len(d.ranges), BundleAttempts)
	}
	if rng, _, _ := strings.Cut(d.ranges[4], "|"); rng != "bytes=40000-" {
		t.Errorf("fifth request Range %q, want bytes=40000-", rng)
	}
	for _, p := range []string{dst, dst + ".part"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is left: %v", p, err)
		}
	}
}

func TestBundleMismatch(t *testing.T) {
	f := newFake(t)
	f.bundle = filepath.Join(f.dir, "bundle.tar.gz")
	good := writeRandom(t, f.bundle, 50_000)
	c, _ := setup(t, f, HandlerOptions{})
	dst := filepath.Join(t.TempDir(), "bundle.tar.gz")

	for _, tc := range []struct {
		want BundleInfo
		msg  string
	}{
		{BundleInfo{Bytes: good.Bytes, SHA256: strings.Repeat("0", 64)}, "sha256 mismatch"},
		{BundleInfo{Bytes: good.Bytes + 1, SHA256: good.SHA256}, "bytes"},
		{BundleInfo{Bytes: good.Bytes - 1, SHA256: good.SHA256}, "bytes"},
		{BundleInfo{Bytes: good.Bytes, SHA256: "xyz"}, "64 hex digits"},
	} {
		err := c.DownloadBundle(context.Background(), testRun, dst, tc.want, nil)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%+v: error %v, want %q", tc.want, err, tc.msg)
		}
		for _, p := range []string{dst, dst + ".part"} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("%+v: %s is left: %v", tc.want, p, err)
			}
		}
	}
}

func TestBundleUnknownRunIsNotRetried(t *testing.T) {
	f := newFake(t)
	f.bundle = filepath.Join(f.dir, "bundle.tar.gz")
	want := writeRandom(t, f.bundle, 1000)
	c, _ := setup(t, f, HandlerOptions{})
	err := c.DownloadBundle(context.Background(), "other-run", filepath.Join(t.TempDir(), "b"), want, nil)
	var he *HTTPError
	if !errors.As(err, &he) || he.Code != http.StatusNotFound {
		t.Fatalf("error %v, want a 404", err)
	}
	if f.bundleCalls != 1 {
		t.Errorf("%d requests, want 1: a 404 is not worth retrying", f.bundleCalls)
	}
}

func TestEvents(t *testing.T) {
	f := newFake(t)
	c, sock := setup(t, f, HandlerOptions{})
	ctx := context.Background()

	evs := []events.Event{events.Progress("train", 3, 10, 42), events.Metric("val", "macro_f1", 0.5, 3)}
	raw := [][]byte{[]byte("plain output from the trainer"), []byte(`{"v":2,"event":"log"}` + "\n")}
	reply, err := c.PostEvents(ctx, testRun, evs, raw)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Cancel {
		t.Error("cancel without a cancel request")
	}
	p := f.posts[0]
	if len(p.evs) != 2 || p.evs[0].Kind != events.KindProgress || p.evs[0].Number("current") != 3 || p.evs[1].Kind != events.KindMetric {
		t.Errorf("events %+v", p.evs)
	}
	if len(p.bad) != 2 || p.bad[0] != "plain output from the trainer" || p.bad[1] != `{"v":2,"event":"log"}` {
		t.Errorf("bad lines %q", p.bad)
	}

	body := "\r\n" + string(events.Log("info", "hi").Line()[:len(events.Log("info", "hi").Line())-1]) + "\r\n\n  \nnot json\r\n{\"v\":1,\"event\":\"status\",\"state\":\"running\"}"
	resp, b := rawDo(t, sock, "POST", PathPrefix+"/runs/"+testRun+"/events", "Bearer "+testToken, strings.NewReader(body))
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != `{"cancel":false}` {
		t.Errorf("raw post: %d %s", resp.StatusCode, b)
	}
	p = f.posts[1]
	if len(p.evs) != 2 || p.evs[0].String("msg") != "hi" || p.evs[1].String("state") != "running" || len(p.bad) != 1 || p.bad[0] != "not json" {
		t.Errorf("raw post parsed as %+v / %q", p.evs, p.bad)
	}

	if _, err := c.Heartbeat(ctx, testRun); err != nil {
		t.Fatal(err)
	}
	if p := f.posts[2]; len(p.evs) != 0 || len(p.bad) != 0 {
		t.Errorf("heartbeat seen as %+v", p)
	}

	f.reply = Reply{Cancel: true, GraceSeconds: 30}
	if reply, err := c.Heartbeat(ctx, testRun); err != nil || reply != f.reply {
		t.Errorf("cancel reply %+v, %v; want %+v", reply, err, f.reply)
	}
	f.reply = Reply{Cancel: true}
	if reply, err := c.PostEvents(ctx, testRun, evs, nil); err != nil || reply.GraceSeconds != DefaultGraceSeconds {
		t.Errorf("cancel reply without grace %+v, %v; want grace_seconds %d", reply, err, DefaultGraceSeconds)
	}
	resp, b = rawDo(t, sock, "POST", PathPrefix+"/runs/"+testRun+"/events", "Bearer "+testToken, nil)
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != `{"cancel":true,"grace_seconds":20}` {
		t.Errorf("raw cancel reply: %d %s", resp.StatusCode, b)
	}
}

func TestPredictions(t *testing.T) {
	f := newFake(t)
	c, sock := setup(t, f, HandlerOptions{MaxPredictionsMB: 1})
	ctx := context.Background()
	src := t.TempDir()

	small := filepath.Join(src, "small.jsonl")
	writeRandom(t, small, 700_000)
	if err := c.UploadPredictions(ctx, testRun, small); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(small)
	if b, err := os.ReadFile(f.predictionsPath()); err != nil || !bytes.Equal(a, b) {
		t.Fatalf("stored predictions differ: %v", err)
	}
	os.Remove(f.predictionsPath())

	big := filepath.Join(src, "big.jsonl")
	writeRandom(t, big, 1<<20+10)
	err := c.UploadPredictions(ctx, testRun, big)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the limit: %v, want ErrTooLarge", err)
	}
	if !strings.Contains(err.Error(), "1 MB") {
		t.Errorf("the error does not say the limit: %v", err)
	}
	if f.predCalls != 1 {
		t.Errorf("the run was handed a body declared over the limit")
	}

	// A body of no declared length is cut by the limit as it streams: the
	// run sees an error and keeps nothing.
	body := io.MultiReader(bytes.NewReader(make([]byte, 1<<20)), strings.NewReader(strings.Repeat("x", 50_000)))
	resp, b := rawDo(t, sock, "PUT", PathPrefix+"/runs/"+testRun+"/predictions", "Bearer "+testToken, body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "1 MB") {
		t.Errorf("streamed over the limit: %d %s, want 413", resp.StatusCode, b)
	}
	if f.predCalls != 2 || f.predErrs[1] == nil {
		t.Errorf("the run saw %d calls, errors %v; want an error for the cut body", f.predCalls, f.predErrs)
	}
	ents, _ := os.ReadDir(f.dir)
	if len(ents) != 0 {
		t.Errorf("after the refused uploads the run directory holds %v, want nothing", ents)
	}
}

func TestResult(t *testing.T) {
	f := newFake(t)
	c, _ := setup(t, f, HandlerOptions{})
	want := Result{ExitCode: 4, ArtifactURI: "ws1:/w/artifacts", Error: "cancelled"}
	if err := c.PostResult(context.Background(), testRun, want); err != nil {
		t.Fatal(err)
	}
	if len(f.results) != 1 || f.results[0] != want {
		t.Errorf("results %+v, want %+v", f.results, want)
	}
	var he *HTTPError
	if err := c.PostResult(context.Background(), "other-run-0", want); !errors.As(err, &he) || he.Code != 404 || !strings.Contains(err.Error(), "no run other-run-0") {
		t.Errorf("unknown run: %v, want the run's 404", err)
	}
}

type failingRun struct{ *fakeRun }

func (failingRun) Result(string, Result) error { return errors.New("disk full") }

func TestRunErrorIs500(t *testing.T) {
	sock := serve(t, NewHandler(failingRun{newFake(t)}, testOptions(HandlerOptions{})))
	err := client(t, sock, testToken).PostResult(context.Background(), testRun, Result{})
	var he *HTTPError
	if !errors.As(err, &he) || he.Code != 500 || he.Msg != "disk full" {
		t.Errorf("error %v, want a 500 saying disk full", err)
	}
}

func TestRoutes(t *testing.T) {
	f := newFake(t)
	_, sock := setup(t, f, HandlerOptions{})
	auth := "Bearer " + testToken
	for _, tc := range []struct {
		method, route string
		code          int
		allow         string
	}{
		{"GET", "/", 404, ""},
		{"POST", "/api/training/agent/v2/claim", 404, ""},
		{"POST", PathPrefix + "/nope", 404, ""},
		{"POST", PathPrefix + "/claim/", 404, ""},
		{"POST", PathPrefix + "/runs/" + testRun, 404, ""},
		{"POST", PathPrefix + "/runs/" + testRun + "/nope", 404, ""},
		{"POST", PathPrefix + "/runs/" + testRun + "/events/x", 404, ""},
		{"GET", PathPrefix + "/claim", 405, "POST"},
		{"DELETE", PathPrefix + "/runs/" + testRun + "/bundle", 405, "GET, HEAD"},
		{"GET", PathPrefix + "/runs/" + testRun + "/predictions", 405, "PUT"},
		{"PUT", PathPrefix + "/runs/" + testRun + "/result", 405, "POST"},
		{"POST", PathPrefix + "/runs/other-run-0/events", 404, ""},
	} {
		resp, body := rawDo(t, sock, tc.method, tc.route, auth, nil)
		if resp.StatusCode != tc.code {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.route, resp.StatusCode, tc.code)
		}
		if got := resp.Header.Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.route, got, tc.allow)
		}
		var eb errorBody
		if json.Unmarshal(body, &eb) != nil || eb.Error == "" {
			t.Errorf("%s %s: body %q is not a JSON error", tc.method, tc.route, body)
		}
	}
}

func TestPathInjection(t *testing.T) {
	f := newFake(t)
	f.bundle = filepath.Join(f.dir, "bundle.tar.gz")
	want := writeRandom(t, f.bundle, 100)
	_, sock := setup(t, f, HandlerOptions{})
	for target, code := range map[string]int{
		PathPrefix + "/runs/../x/bundle":             404,
		PathPrefix + "/runs/..%2Fx/bundle":           404,
		PathPrefix + "/runs/" + testRun + "/../../x": 404,
		PathPrefix + "/runs/../bundle":               400,
		PathPrefix + "/runs/%2e%2e/bundle":           400,
		PathPrefix + "/runs/a.b/bundle":              400,
		PathPrefix + "/runs//bundle":                 400,
		PathPrefix + "/runs/a%20b/bundle":            400,
	} {
		if got := rawLine(t, sock, "GET", target); got != code {
			t.Errorf("GET %s: %d, want %d", target, got, code)
		}
	}
	if f.bundleCalls != 0 {
		t.Errorf("the run was asked for a bundle %d times", f.bundleCalls)
	}
	if got := rawLine(t, sock, "GET", PathPrefix+"/runs/"+testRun+"/bundle"); got != 200 {
		t.Errorf("the plain path: %d", got)
	}

	var sent atomic.Int32
	counting := serve(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { sent.Add(1) }))
	cc := client(t, counting, testToken)
	ctx := context.Background()
	for _, id := range []string{"../x", "a/b", "", ".."} {
		if err := cc.DownloadBundle(ctx, id, filepath.Join(t.TempDir(), "b"), want, nil); err == nil {
			t.Errorf("DownloadBundle(%q) went through", id)
		}
		if _, err := cc.PostEvents(ctx, id, nil, nil); err == nil {
			t.Errorf("PostEvents(%q) went through", id)
		}
		if err := cc.PostResult(ctx, id, Result{}); err == nil {
			t.Errorf("PostResult(%q) went through", id)
		}
	}
	if sent.Load() != 0 {
		t.Errorf("%d requests sent for invalid run ids", sent.Load())
	}
}

func TestNewClient(t *testing.T) {
	for _, s := range []string{"ftp://x", "http://", "http://u:p@host:1", "http://h/?a=1", "unix:", "unix:/" + strings.Repeat("x", 120)} {
		if _, err := NewClient(s, testToken, ClientOptions{}); err == nil {
			t.Errorf("NewClient(%q) accepted", s)
		}
	}
	c, err := NewClient("https://potato.example.org:8443/lab/", testToken, ClientOptions{})
	if err != nil || c.base != "https://potato.example.org:8443/lab" {
		t.Errorf("base %q, %v", c.base, err)
	}
}

// TestMain has the downloads flush every 64 KiB, so that the bundle tests,
// whose bundles are small, flush in the background while bytes arrive,
// while a resumed download appends and while a restarted one truncates.
func TestMain(m *testing.M) {
	flushEvery = 64 << 10
	os.Exit(m.Run())
}

// TestFlushErrorReported: a background flush that fails is the download's
// error, since the fsync on the same file would not report it again. A
// disk that fails fdatasync is hard to have for real; a closed file fails
// it here.
func TestFlushErrorReported(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "part"))
	if err != nil {
		t.Fatal(err)
	}
	x := newFlusher(f)
	f.Close()
	x.wrote(flushEvery)
	err = x.stop()
	if err == nil {
		t.Fatal("stop gave no error after a failed flush")
	}
	if again := x.stop(); again != err {
		t.Errorf("a second stop gave %v, want %v", again, err)
	}
}

// TestPlainHTTPRefused: the token rides in a header, so plain http:// is
// refused for a server outside loopback, with a message that names the
// way out and not the token; loopback and --insecure-http are let
// through. Nothing is dialled.
func TestPlainHTTPRefused(t *testing.T) {
	for _, s := range []string{"http://annotate.example.org:8000", "http://192.0.2.7:8000/lab", "http://[2001:db8::1]:80"} {
		_, err := NewClient(s, testToken, ClientOptions{})
		if err == nil || !strings.Contains(err.Error(), "--insecure-http") || strings.Contains(err.Error(), testToken) {
			t.Errorf("NewClient(%q): %v", s, err)
		}
		if _, err := NewClient(s, testToken, ClientOptions{InsecureHTTP: true}); err != nil {
			t.Errorf("NewClient(%q) with InsecureHTTP: %v", s, err)
		}
	}
	for _, s := range []string{"http://127.0.0.1:8000", "http://127.3.2.1:1", "http://localhost:8000", "http://[::1]:8000", "https://annotate.example.org"} {
		if _, err := NewClient(s, testToken, ClientOptions{}); err != nil {
			t.Errorf("NewClient(%q): %v", s, err)
		}
	}
}

// TestCAFile: a server on loopback whose certificate a private CA signed
// is reached with that CA's file, and refused without it, as by anyone
// who would stand in for it; a CA file for an http:// server, or one
// without a certificate, is refused.
func TestCAFile(t *testing.T) {
	caPEM, cert := privateCA(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, caPEM, 0o644)
	c, err := NewClient(srv.URL, testToken, ClientOptions{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.hc.Get(c.base + "/ping")
	if err != nil {
		t.Fatalf("with the CA file: %v", err)
	}
	resp.Body.Close()
	plain, _ := NewClient(srv.URL, testToken, ClientOptions{})
	if _, err := plain.hc.Get(plain.base + "/ping"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA file: %v", err)
	}
	if _, err := NewClient("http://127.0.0.1:1", testToken, ClientOptions{CAFile: caFile}); err == nil {
		t.Error("a CA file for http:// accepted")
	}
	empty := filepath.Join(dir, "empty.pem")
	os.WriteFile(empty, []byte("not a certificate\n"), 0o644)
	if _, err := NewClient(srv.URL, testToken, ClientOptions{CAFile: empty}); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("an empty CA file: %v", err)
	}
}

// privateCA makes a CA and a certificate it signs for 127.0.0.1: the CA
// as PEM, and the server's certificate with its key.
func privateCA(t *testing.T) ([]byte, tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "potato test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
