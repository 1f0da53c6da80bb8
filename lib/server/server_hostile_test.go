package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// hostileAllocBound is the most a hostile request may make the server
// allocate (docs/reliability.md).
const hostileAllocBound = 64 << 20

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// hugeRequest sends a body of size bytes, its length declared or chunked,
// over a connection of its own, writing while it reads the answer (which
// may come, and close the connection, before the body is sent).
func hugeRequest(t *testing.T, addr, method, path string, headers []string, size int64, chunked bool) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	length := fmt.Sprintf("Content-Length: %d", size)
	if chunked {
		length = "Transfer-Encoding: chunked"
	}
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\n%s\r\n%s\r\nConnection: close\r\n\r\n", method, path, addr, strings.Join(headers, "\r\n"), length)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A JSON string that never ends: valid as far as it is read.
		buf := []byte(strings.Repeat("a", 64<<10))
		copy(buf, `{"trainer": "`)
		for sent := int64(0); sent < size; sent += int64(len(buf)) {
			if chunked {
				if _, err := fmt.Fprintf(conn, "%x\r\n", len(buf)); err != nil {
					return
				}
			}
			if _, err := conn.Write(buf); err != nil {
				return
			}
			copy(buf, "aaaaaaaaaaaaa")
			if chunked {
				if _, err := io.WriteString(conn, "\r\n"); err != nil {
					return
				}
			}
		}
		if chunked {
			io.WriteString(conn, "0\r\n\r\n")
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: no answer: %v", method, path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	conn.Close()
	<-done
	return resp.StatusCode, string(b)
}

// TestHugeBodiesRefused sends 100 MB, declared and chunked, to the API's
// start route and the agents' claim: each is answered 413 with a message,
// the server reads at most its 1 MiB limit (nothing when the length is
// declared) and allocates within hostileAllocBound; and a body nested
// 100,000 deep is answered 400.
func TestHugeBodiesRefused(t *testing.T) {
	s, tok := agentServer(t, 50*time.Millisecond)
	s.Config.AdminAPIKey = testKey
	var read atomic.Int64
	h := s.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = countingBody{r.Body, &read}
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.broker.run(ctx)
	addr := ts.Listener.Addr().String()
	for _, tc := range []struct {
		path   string
		header string
		want   string
	}{
		{apiPrefix + "/runs", "X-API-Key: " + testKey, "the body is over 1048576 bytes"},
		{agentPrefix + "/claim", "Authorization: Bearer " + tok, "the claim's body is over 1 MiB"},
	} {
		for _, chunked := range []bool{false, true} {
			name := fmt.Sprintf("%s chunked=%v", tc.path, chunked)
			read.Store(0)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			code, body := hugeRequest(t, addr, "POST", tc.path, []string{tc.header, "Content-Type: application/json"}, 100<<20, chunked)
			runtime.ReadMemStats(&after)
			var e struct{ Error string }
			if code != http.StatusRequestEntityTooLarge || json.Unmarshal([]byte(body), &e) != nil || e.Error != tc.want {
				t.Errorf("%s: %d %q, want 413 and %q", name, code, body, tc.want)
			}
			if n := read.Load(); (!chunked && n != 0) || n > 2<<20 {
				t.Errorf("%s: the server read %d bytes of the body", name, n)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > hostileAllocBound {
				t.Errorf("%s: %d MB allocated, bound %d MB", name, n>>20, hostileAllocBound>>20)
			}
		}
	}
	deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	for _, tc := range []struct{ path, header string }{
		{apiPrefix + "/runs", "X-API-Key"}, {agentPrefix + "/claim", "Authorization"},
	} {
		req, _ := http.NewRequest("POST", ts.URL+tc.path, strings.NewReader(`{"trainer": `+deep+`}`))
		req.Header.Set("X-API-Key", testKey)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "exceeded max depth") {
			t.Errorf("%s nested: %d %s, want 400 and exceeded max depth", tc.path, resp.StatusCode, b)
		}
	}
}
