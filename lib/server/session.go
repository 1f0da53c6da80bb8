package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"potato-training/lib/config"
	"potato-training/lib/rundir"
)

// The page's sign-in: the project's admin_api_key, typed once into a
// form, becomes a session cookie. A session is signed: its cookie carries
// its expiry and a nonce with an HMAC keyed by the API key, so a restart
// keeps everyone signed in, and a new admin_api_key signs everyone out.
// What the server keeps is the sessions signed out before their expiry
// (signedOutFile), so that a copy of a cookie is refused after its
// sign-out, across restarts too.
const (
	sessionCookie = "potato_training_session"
	sessionTTL    = 12 * time.Hour
	// signedOutFile, in the training directory, lists the sessions
	// signed out and not yet expired: the SHA-256 of each cookie and its
	// expiry.
	signedOutFile = "signed-out.json"
	// keyCheckEvery bounds how often the config's file is looked at for
	// a new admin_api_key.
	keyCheckEvery = time.Second
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
	m := hmac.New(sha256.New, []byte(s.apiKey()))
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
	if s.apiKey() == "" {
		return ""
	}
	c, err := r.Cookie(cookieName(r))
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
	if s.signedOut(c.Value) {
		return ""
	}
	return c.Value
}

// keyState is admin_api_key as the config's file holds it now, once the
// server watches it (watchKey), and the sessions signed out.
type keyState struct {
	mu       sync.Mutex
	watching bool
	key      string
	stamp    fileStamp
	checked  time.Time
	// out maps the SHA-256 of a signed-out session's cookie to its
	// expiry; loaded is whether signedOutFile was read.
	out    map[string]time.Time
	loaded bool
}

// fileStamp tells one version of a file from the next.
type fileStamp struct {
	ino, size int64
	mtime     time.Time
	ctime     syscall.Timespec
}

func stampOf(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	fs := fileStamp{size: st.Size(), mtime: st.ModTime()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		fs.ino, fs.ctime = int64(sys.Ino), ctimeOf(sys)
	}
	return fs, nil
}

// watchKey makes the server read admin_api_key from the config's file
// again whenever the file changes, at most every keyCheckEvery: a new key
// takes effect without a restart, and, since it keys the sessions' MAC,
// every session ends with the old key.
func (s *Server) watchKey() {
	k := &s.keys
	k.mu.Lock()
	defer k.mu.Unlock()
	if s.ConfigPath == "" || k.watching {
		return
	}
	k.watching, k.key, k.checked = true, s.Config.AdminAPIKey, time.Now()
	k.stamp, _ = stampOf(s.ConfigPath)
}

// apiKey is the admin_api_key in force: the config's as the server
// started, or, while it watches the file, as the file holds it now. A
// config that can no longer be read turns the API and the page off until
// it can: the server does not go on with a key its owner may have
// replaced.
func (s *Server) apiKey() string {
	k := &s.keys
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.watching {
		return s.Config.AdminAPIKey
	}
	if now := time.Now(); now.Sub(k.checked) >= keyCheckEvery {
		k.checked = now
		st, err := stampOf(s.ConfigPath)
		if err != nil || st != k.stamp {
			k.stamp = st
			key := ""
			c, err := config.ReadConfigFile(s.ConfigPath)
			if err != nil {
				s.logf("the config could not be read again: %v; the API and the page are off until it can", err)
			} else {
				key = c.AdminAPIKey
			}
			if key != k.key {
				k.key = key
				s.logf("admin_api_key changed in %s: the old key and every session are refused from now on", s.ConfigPath)
			}
		}
	}
	return k.key
}

// signedOut reports whether the session was signed out.
func (s *Server) signedOut(session string) bool {
	k := &s.keys
	k.mu.Lock()
	defer k.mu.Unlock()
	s.loadSignedOut()
	_, out := k.out[sessionHash(session)]
	return out
}

// endSession signs a session out on the server, for good: signedOutFile
// keeps it until it expires.
func (s *Server) endSession(session string) error {
	b, err := base64.RawURLEncoding.DecodeString(session)
	if err != nil || len(b) < 8 {
		return nil
	}
	expiry := time.Unix(int64(binary.BigEndian.Uint64(b[:8])), 0).UTC()
	k := &s.keys
	k.mu.Lock()
	defer k.mu.Unlock()
	s.loadSignedOut()
	now := time.Now()
	for h, exp := range k.out {
		if !now.Before(exp) {
			delete(k.out, h)
		}
	}
	k.out[sessionHash(session)] = expiry
	if s.Root == nil {
		return nil
	}
	if err := rundir.WriteJSONFile(filepath.Join(s.Root.Dir, signedOutFile), k.out, 0o600); err != nil {
		return fmt.Errorf("the sign-out is not recorded on disk, and a copy of its cookie works again after a restart: %w", err)
	}
	return nil
}

// loadSignedOut reads signedOutFile once; k.mu is held.
func (s *Server) loadSignedOut() {
	k := &s.keys
	if k.loaded {
		return
	}
	k.loaded, k.out = true, map[string]time.Time{}
	if s.Root == nil {
		return
	}
	b, err := os.ReadFile(filepath.Join(s.Root.Dir, signedOutFile))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.logf("%v: the sessions signed out before are not known", err)
		}
		return
	}
	if err := json.Unmarshal(b, &k.out); err != nil {
		s.logf("%s: %v: the sessions signed out before are not known", signedOutFile, err)
		k.out = map[string]time.Time{}
	}
}

func sessionHash(session string) string {
	h := sha256.Sum256([]byte(session))
	return hex.EncodeToString(h[:])
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

// cookieName is the session cookie's name: over https with the __Host-
// prefix, which browsers keep only as a Secure cookie of path / set by
// this very host, so that no other site or subdomain can plant or shadow
// it.
func cookieName(r *http.Request) string {
	if secure(r) {
		return "__Host-" + sessionCookie
	}
	return sessionCookie
}

func setSessionCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	c := &http.Cookie{
		Name: sessionCookie, Value: value, Path: pagePath, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
	}
	if secure(r) {
		c.Name, c.Path, c.Secure = cookieName(r), "/", true
	}
	http.SetCookie(w, c)
}
