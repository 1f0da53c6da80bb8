package server

// The sign-in, the session and the page's routes over plain HTTP.

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"potato-training/lib/config"
)

// TestPageRefusals: what the page and its sign-in refuse, over plain
// HTTP.
func TestPageRefusals(t *testing.T) {
	e := newAPI(t, testKey, "")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// send sends a request to url, a form when form is not "", with the
	// cookie when it is not nil and the headers (name, value, ...); it
	// does not follow redirects.
	send := func(url, form string, cookie *http.Cookie, headers ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if form != "" {
			req, _ = http.NewRequest("POST", url, strings.NewReader(form))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	get := func(path string, cookie *http.Cookie) *http.Response { return send(e.ts.URL+path, "", cookie) }
	for _, p := range []string{pagePath, pagePath + "/runs/20261202-135501-7f3a"} {
		if resp := get(p, nil); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != pagePath+"/login" {
			t.Errorf("GET %s without a session: %d %s", p, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	signIn := func(key string, headers ...string) *http.Response {
		return send(e.ts.URL+pagePath+"/login", "key="+key, nil, headers...)
	}
	if resp := signIn("wrong"); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Errorf("a wrong key: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	if resp := signIn(testKey, "Origin", "http://evil.example"); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("a sign-in from another site: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	resp := signIn(testKey, "Origin", e.ts.URL)
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("sign-in: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	c := resp.Cookies()[0]
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != pagePath || c.MaxAge <= 0 {
		t.Errorf("session cookie %+v", c)
	}
	if resp := get(pagePath, c); resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Errorf("the page with a session: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := get(pagePath+"/runs/20261202-135501-7f3a", c); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the page of no run: %d", resp.StatusCode)
	}

	// The API takes the session for reads, and for changes only with the
	// session's CSRF token.
	cookie := c.Name + "=" + c.Value
	if a := e.do("GET", "/runs", "", "X-API-Key", "", "Cookie", cookie); a.code != 200 {
		t.Errorf("GET /runs with a session: %d %s", a.code, a.body)
	}
	body := `{"trainer":"tfidf-logreg","schemas":["sentiment"]}`
	if a := e.do("POST", "/runs", body, "X-API-Key", "", "Cookie", cookie); a.code != http.StatusForbidden || a.errorText(t) != msgBadCSRF {
		t.Errorf("POST /runs with a session and no CSRF token: %d %s", a.code, a.body)
	}
	if a := e.do("POST", "/runs", body, "X-API-Key", "", "Cookie", cookie, csrfHeader, e.s.csrfToken(c.Value+"x")); a.code != http.StatusForbidden {
		t.Errorf("POST /runs with another session's CSRF token: %d %s", a.code, a.body)
	}
	if a := e.do("POST", "/runs", body, "X-API-Key", "", "Cookie", cookie, csrfHeader, e.s.csrfToken(c.Value)); a.code != http.StatusCreated {
		t.Errorf("POST /runs with a session and its CSRF token: %d %s", a.code, a.body)
	}
	// A cookie not signed with this key, or expired, is no session.
	expired := e.s.newSession(time.Now().Add(-sessionTTL - time.Second))
	forged := (&Server{Config: &config.Config{AdminAPIKey: "another key"}}).newSession(time.Now())
	tampered := c.Value[:len(c.Value)-2] + "AA"
	for _, v := range []string{expired, forged, tampered, "garbage"} {
		if a := e.do("GET", "/runs", "", "X-API-Key", "", "Cookie", sessionCookie+"="+v); a.code != http.StatusUnauthorized || a.errorText(t) != msgSessionEnded {
			t.Errorf("GET /runs with cookie %q: %d %s", v, a.code, a.body)
		}
		if resp := get(pagePath, &http.Cookie{Name: sessionCookie, Value: v}); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("the page with cookie %q: %d", v, resp.StatusCode)
		}
	}

	// Sign out: only with the session's CSRF token; it clears the cookie.
	signOut := func(csrf string) *http.Response { return send(e.ts.URL+pagePath+"/logout", "csrf="+csrf, c) }
	if resp := signOut("wrong"); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("sign-out without the CSRF token: %d %v", resp.StatusCode, resp.Cookies())
	}
	resp = signOut(e.s.csrfToken(c.Value))
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 || resp.Cookies()[0].Value != "" {
		t.Errorf("sign-out: %d %v", resp.StatusCode, resp.Cookies())
	}

	// Without admin_api_key the sign-in says why it cannot be.
	off := newAPI(t, "", "")
	// An empty key still makes a form: "key=".
	resp = send(off.ts.URL+pagePath+"/login", "key=", nil)
	if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("sign-in with no admin_api_key: %d %v", resp.StatusCode, resp.Cookies())
	}
}
