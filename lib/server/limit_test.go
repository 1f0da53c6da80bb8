package server

// Failed sign-ins per client, on a clock of the test's own: no assertion
// here waits for real time.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// testClock is the limiter's clock in these tests; a delay moves it on as
// the real one would.
type testClock struct {
	mu     sync.Mutex
	now    time.Time
	delays []time.Duration
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Sleep(_ context.Context, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.delays = append(c.delays, d)
	c.now = c.now.Add(d)
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *testClock) Delays() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.delays
	c.delays = nil
	return out
}

// limitedAPI is newAPI on a test clock, its log lines kept.
func limitedAPI(t *testing.T) (*apiEnv, *testClock, func() []string) {
	// The clients are told apart by X-Forwarded-For, as behind a proxy on
	// this machine.
	e := newAPI(t, testKey, "  trusted_proxies: [127.0.0.1]\n")
	clock := &testClock{now: time.Date(2026, 12, 2, 13, 55, 0, 0, time.UTC)}
	e.s.signins.now, e.s.signins.sleep = clock.Now, clock.Sleep
	var mu sync.Mutex
	var lines []string
	e.s.Logf = func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf(format, args...))
		t.Logf(format, args...)
	}
	logged := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := lines
		lines = nil
		return out
	}
	return e, clock, logged
}

// signInAs posts the sign-in form with key, from client as a proxy on
// this machine forwards it (X-Forwarded-For); it does not follow the
// redirect of a success.
func signInAs(t *testing.T, e *apiEnv, client, key string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", e.ts.URL+pagePath+"/login", strings.NewReader(url.Values{"key": {key}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-For", client)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// Wrong keys from one client: each answer is delayed longer, the fifth
// locks the client out for 15 min (429, Retry-After, a log line), during
// which even the right key is refused, from the form and through the API;
// another client is not affected; once the lockout is served the right key
// signs in again.
func TestSignInLimit(t *testing.T) {
	e, clock, logged := limitedAPI(t)
	const attacker, other = "203.0.113.7", "198.51.100.2"
	for i := 1; i < maxFailures; i++ {
		if resp := signInAs(t, e, attacker, fmt.Sprintf("guess-%d", i)); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong key %d: %d, want 401", i, resp.StatusCode)
		}
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}
	if got := clock.Delays(); !slices.Equal(got, want) {
		t.Errorf("the wrong keys' answers were delayed %v, want %v", got, want)
	}
	lines := logged()
	if len(lines) != maxFailures-1 || !strings.Contains(lines[0], "page: sign-in: wrong API key from "+attacker+" ") {
		t.Errorf("log lines of the failures: %q", lines)
	}

	resp := signInAs(t, e, attacker, "guess-5")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "900" {
		t.Fatalf("the fifth wrong key: %d, Retry-After %q; want 429 and 900", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if d := clock.Delays(); len(d) != 0 {
		t.Errorf("the failure that locks out was delayed %v too", d)
	}
	lines = logged()
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "page: sign-in: wrong API key from "+attacker+" (127.0.0.1:") ||
		!strings.HasSuffix(lines[0], "): 5 failed attempts, refused for 15 min") {
		t.Errorf("the lockout's log line: %q", lines)
	}

	// Locked out: the right key is refused too, and nothing is counted or
	// delayed.
	clock.Advance(10 * time.Minute)
	resp = signInAs(t, e, attacker, testKey)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "300" || len(resp.Cookies()) != 0 {
		t.Errorf("the right key while locked out: %d, Retry-After %q, cookies %v; want 429 after 300 s", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Cookies())
	}
	a := e.do("GET", "/runs", "", "X-Forwarded-For", attacker)
	if a.code != http.StatusTooManyRequests || a.hdr.Get("Retry-After") != "300" || a.errorText(t) != fmt.Sprintf(msgLockedOut, "5 min") {
		t.Errorf("the API while locked out: %d %s, Retry-After %q", a.code, a.body, a.hdr.Get("Retry-After"))
	}
	if d := clock.Delays(); len(d) != 0 {
		t.Errorf("refusals while locked out were delayed %v", d)
	}

	// Another client signs in meanwhile.
	if resp := signInAs(t, e, other, testKey); resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Errorf("another client: %d, cookies %v; want a session", resp.StatusCode, resp.Cookies())
	}

	// The lockout served, the right key works, and the count starts
	// again from nothing.
	clock.Advance(5 * time.Minute)
	if resp := signInAs(t, e, attacker, testKey); resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("the right key after the lockout: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	if resp := signInAs(t, e, attacker, "guess-6"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong key after the lockout: %d, want 401", resp.StatusCode)
	}
	if got := clock.Delays(); !slices.Equal(got, want[:1]) {
		t.Errorf("a first failure after the lockout was delayed %v, want %v", got, want[:1])
	}
}

// A success forgets the failures: four wrong keys, the right one, four
// wrong ones again, and the client is still not locked out. Wrong
// X-API-Key headers count as wrong keys of the form do.
func TestSignInSuccessResets(t *testing.T) {
	e, clock, _ := limitedAPI(t)
	const client = "192.0.2.10"
	for round := 0; round < 2; round++ {
		for i := 1; i < maxFailures; i++ {
			if a := e.do("GET", "/runs", "", "X-API-Key", "wrong", "X-Forwarded-For", client); a.code != http.StatusUnauthorized {
				t.Fatalf("round %d, wrong key %d: %d %s", round, i, a.code, a.body)
			}
		}
		if resp := signInAs(t, e, client, testKey); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("round %d: the right key after %d wrong ones: %d", round, maxFailures-1, resp.StatusCode)
		}
	}
	if got := clock.Delays(); len(got) != 2*(maxFailures-1) || got[maxFailures-1] != firstDelay {
		t.Errorf("delays %v: the count did not start again after the success", got)
	}
	// The fifth wrong key in a row locks the API's client out as well.
	for i := 1; i <= maxFailures; i++ {
		a := e.do("GET", "/backends", "", "X-API-Key", "wrong", "X-Forwarded-For", client)
		if i == maxFailures && (a.code != http.StatusTooManyRequests || a.hdr.Get("Retry-After") != "900") {
			t.Errorf("the fifth wrong X-API-Key: %d, Retry-After %q", a.code, a.hdr.Get("Retry-After"))
		}
	}
}

// Failures older than the window are forgotten; the table keeps at most
// its bound of clients, dropping forgotten ones first, then the one that
// failed longest ago, and a client locked out only when all are.
func TestLimiterForgetsAndIsBounded(t *testing.T) {
	clock := &testClock{now: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}
	l := newLimiter()
	l.now, l.sleep, l.max = clock.Now, clock.Sleep, 3
	for i := 1; i < maxFailures; i++ {
		l.failed("a")
	}
	clock.Advance(failureWindow + time.Second)
	if d, locked := l.failed("a"); locked || d != firstDelay {
		t.Errorf("a failure after the window: delay %v, locked %v; want the first delay", d, locked)
	}
	l.failed("b")
	clock.Advance(time.Minute)
	l.failed("c")
	clock.Advance(failureWindow + time.Second)
	l.failed("d")
	if len(l.clients) != 1 || l.clients["d"] == nil {
		t.Errorf("clients %v, want d alone: a, b and c failed longer than the window ago", l.clients)
	}
	// x is locked out; e, f, g and h fail one after the other.
	for i := 0; i < maxFailures; i++ {
		l.failed("x")
	}
	for _, c := range []string{"e", "f", "g", "h"} {
		clock.Advance(time.Second)
		l.failed(c)
		if len(l.clients) > 3 {
			t.Fatalf("%d clients in a table of 3", len(l.clients))
		}
	}
	if l.clients["x"] == nil || l.clients["g"] == nil || l.clients["h"] == nil || len(l.clients) != 3 {
		t.Errorf("clients %v, want x (locked out), g and h (the newest)", l.clients)
	}
	if left := l.lockedOut("x"); left != lockout-4*time.Second {
		t.Errorf("lockedOut(x) = %v, want %v", left, lockout-4*time.Second)
	}
	if left := l.lockedOut("g"); left != 0 {
		t.Errorf("lockedOut(g) = %v, want 0", left)
	}
}

// The client of a request, as the handlers see it through withProxies:
// the peer, or behind a trusted proxy (here 127.0.0.1, ::1 and 10.9.0.0/16)
// the nearest forwarded address that is not a trusted proxy; IPv6 by its
// /64.
func TestClientAddr(t *testing.T) {
	s := &Server{proxies: parseProxies([]string{"127.0.0.1", "::1", "10.9.0.0/16"})}
	for _, c := range []struct{ remote, xff, want string }{
		{"203.0.113.7:5000", "", "203.0.113.7"},
		{"203.0.113.7:5000", "198.51.100.1", "203.0.113.7"},
		{"127.0.0.2:5000", "198.51.100.1", "127.0.0.2"},
		{"127.0.0.1:5000", "", "127.0.0.1"},
		{"127.0.0.1:5000", "10.0.0.1, 198.51.100.1", "198.51.100.1"},
		{"127.0.0.1:5000", "198.51.100.9, 10.9.3.4", "198.51.100.9"},
		{"10.9.0.1:5000", "203.0.113.5, 198.51.100.9, 127.0.0.1", "198.51.100.9"},
		{"127.0.0.1:5000", "not an address", "127.0.0.1"},
		{"127.0.0.1:5000", "198.51.100.4, not an address, 198.51.100.9", "198.51.100.9"},
		{"[::1]:5000", "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:aaaa::1]:5000", "", "2001:db8:1:2::/64"},
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		var got string
		s.withProxies(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = clientAddr(r) })).ServeHTTP(nil, r)
		if got != c.want {
			t.Errorf("clientAddr(%s, X-Forwarded-For %q) = %q, want %q", c.remote, c.xff, got, c.want)
		}
	}
}
