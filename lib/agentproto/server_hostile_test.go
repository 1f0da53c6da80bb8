package agentproto

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

// hostileAllocBound is the most a hostile request may make the server
// allocate (docs/reliability.md).
const hostileAllocBound = 64 << 20

// counted wraps a handler and counts the body bytes it reads.
type counted struct {
	h    http.Handler
	read atomic.Int64
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func (c *counted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.Body = countingBody{r.Body, &c.read}
	c.h.ServeHTTP(w, r)
}

// zeros is an endless body that allocates nothing.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// hugeRequest sends method path with a body of size bytes (chunked when
// chunked is set, else with its Content-Length) over a connection of its
// own, writing the body while it reads the answer, and returns the
// answer's status and body. The server may answer before the body is
// sent and close the connection; the writer then stops.
func hugeRequest(t *testing.T, network, addr, method, path, header string, size int64, chunked bool) (int, string) {
	t.Helper()
	conn, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	length := fmt.Sprintf("Content-Length: %d", size)
	if chunked {
		length = "Transfer-Encoding: chunked"
	}
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: agent\r\n%s\r\n%s\r\nConnection: close\r\n\r\n", method, path, header, length)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var w io.Writer = conn
		var cw io.WriteCloser
		if chunked {
			cw = newChunked(conn)
			w = cw
		}
		if _, err := io.CopyBuffer(w, io.LimitReader(zeros{}, size), make([]byte, 64<<10)); err == nil && cw != nil {
			cw.Close()
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

// chunkedWriter writes HTTP/1.1 chunks.
type chunkedWriter struct{ w io.Writer }

func newChunked(w io.Writer) *chunkedWriter { return &chunkedWriter{w} }

func (c *chunkedWriter) Write(p []byte) (int, error) {
	if _, err := fmt.Fprintf(c.w, "%x\r\n", len(p)); err != nil {
		return 0, err
	}
	if _, err := c.w.Write(p); err != nil {
		return 0, err
	}
	_, err := io.WriteString(c.w, "\r\n")
	return len(p), err
}

func (c *chunkedWriter) Close() error {
	_, err := io.WriteString(c.w, "0\r\n\r\n")
	return err
}

// TestHugeBodiesRefused sends 100 MB to each route that takes a body,
// with its length declared and chunked: each is answered 413 with a
// message, the handler reads at most its limit (nothing when the length
// is declared), and the server allocates within hostileAllocBound.
func TestHugeBodiesRefused(t *testing.T) {
	f := newFake(t)
	c := &counted{h: NewHandler(f, testOptions(HandlerOptions{MaxPredictionsMB: 16}))}
	sock := serve(t, c)
	const size = 100 << 20
	auth := "Authorization: Bearer " + testToken
	for _, tc := range []struct {
		method, route string
		limit         int64
		want          string
	}{
		{"POST", "/claim", maxJSONBody, "body over"},
		{"POST", "/runs/" + testRun + "/events", MaxEventsBody, "bytes of events in one request"},
		{"POST", "/runs/" + testRun + "/result", maxJSONBody, "body over"},
		{"PUT", "/runs/" + testRun + "/predictions", 16 << 20, "over the server's limit of 16 MB"},
	} {
		for _, chunked := range []bool{false, true} {
			name := fmt.Sprintf("%s %s chunked=%v", tc.method, tc.route, chunked)
			c.read.Store(0)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			code, body := hugeRequest(t, "unix", sock, tc.method, PathPrefix+tc.route, auth, size, chunked)
			runtime.ReadMemStats(&after)
			var e errorBody
			if code != http.StatusRequestEntityTooLarge || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, tc.want) {
				t.Errorf("%s: %d %q, want 413 and %q", name, code, body, tc.want)
			}
			read := c.read.Load()
			if !chunked && read != 0 {
				t.Errorf("%s: the handler read %d bytes of a body whose length says it is too large", name, read)
			}
			if read > tc.limit+1<<20 {
				t.Errorf("%s: the handler read %d bytes, limit %d", name, read, tc.limit)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > hostileAllocBound {
				t.Errorf("%s: %d MB allocated, bound %d MB", name, n>>20, hostileAllocBound>>20)
			}
		}
	}
	if f.predCalls != 1 || f.predErrs[0] == nil {
		t.Errorf("predictions: %d calls, errors %v; want the chunked one, cut", f.predCalls, f.predErrs)
	}
	if len(f.posts) != 0 || len(f.results) != 0 {
		t.Errorf("a refused body was handed on: %d posts, %d results", len(f.posts), len(f.results))
	}
}

// TestNestedBodiesRefused sends bodies nested 100,000 deep, and one not
// UTF-8: a JSON body is answered 400 with encoding/json's reason; an
// events body keeps such lines as log lines, never as events.
func TestNestedBodiesRefused(t *testing.T) {
	f := newFake(t)
	_, sock := setup(t, f, HandlerOptions{})
	deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	auth := "Bearer " + testToken
	for _, route := range []string{"/claim", "/runs/" + testRun + "/result"} {
		resp, body := rawDo(t, sock, "POST", PathPrefix+route, auth, strings.NewReader(`{"backend": `+deep+`}`))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "exceeded max depth") {
			t.Errorf("%s: %d %s, want 400 and exceeded max depth", route, resp.StatusCode, body)
		}
	}
	lines := `{"v":1,"event":"log","t":1,"x":` + deep + "}\n" + "{\"v\":1,\"event\":\"log\",\"t\":1,\"msg\":\"\xff\"}\n" + `{"v":1,"event":"log","t":1,"msg":"ok"}` + "\n"
	resp, body := rawDo(t, sock, "POST", PathPrefix+"/runs/"+testRun+"/events", auth, strings.NewReader(lines))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("events: %d %s", resp.StatusCode, body)
	}
	if len(f.posts) != 1 || len(f.posts[0].evs) != 1 || len(f.posts[0].bad) != 2 {
		t.Errorf("posts %+v, want one event and two log lines", f.posts)
	}
}
