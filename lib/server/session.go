package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"strings"
	"time"
)

// The page's sign-in: the project's admin_api_key, typed once into a
// form, becomes a session cookie. A session is signed, not stored: its
// cookie carries its expiry and a nonce with an HMAC keyed by the API
// key, so the server keeps no session state, a restart keeps everyone
// signed in, and a new admin_api_key signs everyone out.
const (
	sessionCookie = "potato_training_session"
	sessionTTL    = 12 * time.Hour
	// csrfHeader carries the session's CSRF token on the API requests of
	// the page; csrfField on its forms.
	csrfHeader = "X-CSRF-Token"
	csrfField  = "csrf"
)

// Texts of the page's refusals.
const (
	msgSignedOut = "not signed in"
	msgBadCSRF   = "missing or wrong CSRF token: reload the page"
)

// sessionKey derives the HMAC key of sessions from the API key, kept
// apart from any other use of it.
func (s *Server) sessionKey() []byte {
	m := hmac.New(sha256.New, []byte(s.Config.AdminAPIKey))
	m.Write([]byte("potato-training session v1"))
	return m.Sum(nil)
}

func (s *Server) mac(parts ...[]byte) []byte {
	m := hmac.New(sha256.New, s.sessionKey())
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// newSession returns a session cookie's value: expiry (8 bytes), nonce
// (16) and their MAC (32), base64url.
func (s *Server) newSession(now time.Time) string {
	b := make([]byte, 24, 56)
	binary.BigEndian.PutUint64(b, uint64(now.Add(sessionTTL).Unix()))
	_, _ = rand.Read(b[8:24])
	b = append(b, s.mac([]byte("session"), b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// session returns the request's valid session cookie value, or "".
func (s *Server) session(r *http.Request, now time.Time) string {
	if s.Config.AdminAPIKey == "" {
		return ""
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(b) != 56 {
		return ""
	}
	if !hmac.Equal(b[24:], s.mac([]byte("session"), b[:24])) {
		return ""
	}
	if now.Unix() >= int64(binary.BigEndian.Uint64(b[:8])) {
		return ""
	}
	return c.Value
}

// csrfToken is the CSRF token of a session: only pages served to that
// session know it.
func (s *Server) csrfToken(session string) string {
	return base64.RawURLEncoding.EncodeToString(s.mac([]byte("csrf"), []byte(session)))
}

// checkCSRF compares a request's token with its session's.
func (s *Server) checkCSRF(session, got string) *apiError {
	want := s.csrfToken(session)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return errorf(http.StatusForbidden, msgBadCSRF)
	}
	return nil
}

// secure reports whether the page was reached over https, directly or
// through a proxy that ends TLS.
func secure(r *http.Request) bool { return strings.EqualFold(scheme(r), "https") }

func setSessionCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: value, Path: pagePath, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r),
	})
}
