package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"potato-training/lib/agentproto"
	"potato-training/lib/rundir"
)

const (
	bundleRun   = "20261204T100000-abcdef"
	bundleToken = "tok-bundle-0123456789abcdef"
)

// bundleRig is a run's directory with a bundle, a stand-in for its
// dispatch on a unix socket that checks the token and answers with
// agentproto.ServeBundle as the real one does (etag, when set, is the
// ETag it gives instead, as if the bundle had changed since), and a
// loopback server whose every request goes to serveBundle.
type bundleRig struct {
	bundle []byte
	url    string
	etag   string
	mu     sync.Mutex
	asked  []string // the dispatch's requests: method, Range, and the headers it got
}

func newBundleRig(t *testing.T, withDispatch bool) *bundleRig {
	t.Helper()
	root, err := rundir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	x := &bundleRig{bundle: make([]byte, 3<<20+12345)}
	rand.Read(x.bundle)
	path := filepath.Join(root.RunDir(bundleRun), rundir.BundleArchive)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, x.bundle, 0o644); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "bundle") // short: a socket path has a limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	if withDispatch {
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		d := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			x.mu.Lock()
			x.asked = append(x.asked, fmt.Sprintf("%s %s %v", r.Method, r.Header.Get("Range"), r.Header))
			etag := x.etag
			x.mu.Unlock()
			w.Header().Set("Cache-Control", "no-store")
			if r.Header.Get("Authorization") != "Bearer "+bundleToken {
				agentproto.WriteError(w, http.StatusUnauthorized, "wrong token")
				return
			}
			f, err := os.Open(path)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			fi, _ := f.Stat()
			if etag != "" {
				w.Header().Set("ETag", etag)
				http.ServeContent(w, r, "", fi.ModTime(), f)
				return
			}
			agentproto.ServeBundle(w, r, f, fi)
		})}
		go d.Serve(l)
		t.Cleanup(func() { d.Close() })
	}
	s := &Server{Root: root}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serveBundle(sock, bundleRun, w, r)
	}))
	t.Cleanup(ts.Close)
	x.url = ts.URL + agentproto.PathPrefix + "/runs/" + bundleRun + "/bundle"
	return x
}

func (x *bundleRig) get(t *testing.T, token, rng string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", x.url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Connection", "keep-alive, X-Private")
	req.Header.Set("X-Private", "for this hop")
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func (x *bundleRig) methods() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var m []string
	for _, a := range x.asked {
		m = append(m, strings.Fields(a)[0])
	}
	x.asked = nil
	return strings.Join(m, " ")
}

// The dispatch says yes to a HEAD and the server sends the bytes: whole
// to agentproto's client, a Range as 206 from where it asks; the
// dispatch never sends the body. It gets the agent's token and Range,
// and not the headers of the agent's connection.
func TestBundleSentByServer(t *testing.T) {
	x := newBundleRig(t, true)
	sum := sha256.Sum256(x.bundle)
	c, err := agentproto.NewClient(strings.Split(x.url, agentproto.PathPrefix)[0], bundleToken, agentproto.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "bundle.tar.gz")
	want := agentproto.BundleInfo{Bytes: int64(len(x.bundle)), SHA256: hex.EncodeToString(sum[:])}
	if err := c.DownloadBundle(context.Background(), bundleRun, dst, want, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, x.bundle) {
		t.Error("the bundle differs")
	}
	if m := x.methods(); m != "HEAD" {
		t.Errorf("the dispatch was asked %q, want HEAD alone", m)
	}

	resp, body := x.get(t, bundleToken, "bytes=1000000-")
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, x.bundle[1000000:]) {
		t.Errorf("Range: %d and %d bytes, want 206 and %d", resp.StatusCode, len(body), len(x.bundle)-1000000)
	}
	if cr, want := resp.Header.Get("Content-Range"), fmt.Sprintf("bytes 1000000-%d/%d", len(x.bundle)-1, len(x.bundle)); cr != want {
		t.Errorf("Content-Range %q, want %q", cr, want)
	}
	if resp.Header.Get("ETag") == "" || resp.Header.Get("Content-Type") != "application/gzip" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("headers %v: want the bundle's ETag and type, and the dispatch's Cache-Control", resp.Header)
	}
	x.mu.Lock()
	asked := strings.Join(x.asked, "\n")
	x.mu.Unlock()
	if !strings.HasPrefix(asked, "HEAD bytes=1000000- ") || strings.Contains(asked, "X-Private") || !strings.Contains(asked, bundleToken) {
		t.Errorf("the dispatch got %s\nwant a HEAD with the token and Range, without X-Private", asked)
	}
	if m := x.methods(); m != "HEAD" {
		t.Errorf("the dispatch was asked %q, want HEAD alone", m)
	}
}

// What the dispatch refuses is refused with its answer, body included;
// a bundle that is not the one the dispatch names comes from the
// dispatch; no dispatch is 502.
func TestBundleNotSentByServer(t *testing.T) {
	x := newBundleRig(t, true)
	resp, body := x.get(t, "tok-wrong-000000000000", "")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "wrong token") {
		t.Errorf("a wrong token: %d %s", resp.StatusCode, body)
	}
	if m := x.methods(); m != "HEAD GET" {
		t.Errorf("the dispatch was asked %q, want HEAD GET", m)
	}

	x.mu.Lock()
	x.etag = `"another"`
	x.mu.Unlock()
	resp, body = x.get(t, bundleToken, "")
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, x.bundle) || resp.Header.Get("ETag") != `"another"` {
		t.Errorf("a changed bundle: %d, %d bytes, ETag %q", resp.StatusCode, len(body), resp.Header.Get("ETag"))
	}
	if m := x.methods(); m != "HEAD GET" {
		t.Errorf("the dispatch was asked %q, want HEAD GET", m)
	}

	resp, body = newBundleRig(t, false).get(t, bundleToken, "")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "did not answer") {
		t.Errorf("no dispatch: %d %s", resp.StatusCode, body)
	}
}
