package rundir

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// AgentsDir holds one file per agent backend: agents/<backend>.json.
const AgentsDir = "agents"

// AgentRecord is agents/<backend>.json (mode 0600): the backend's token,
// stored only as its SHA-256, when it was issued, and when and from where
// an agent last used it (SPEC G3, G5).
type AgentRecord struct {
	Backend     string     `json:"backend"`
	TokenSHA256 string     `json:"token_sha256"`
	IssuedAt    time.Time  `json:"issued_at"`
	LastSeen    *time.Time `json:"last_seen,omitempty"`
	LastHost    string     `json:"last_host,omitempty"`
}

// ErrNoToken is the error of a backend no token was issued for.
var ErrNoToken = errors.New("no token issued yet")

// validBackend is a name that can be joined to a path safely.
func validBackend(s string) bool {
	if s == "" || len(s) > 64 || s[0] == '.' {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func (r *Root) agentPath(backend string) string {
	return filepath.Join(r.Dir, AgentsDir, backend+".json")
}

// IssueToken makes a new 256-bit token for backend, stores its hash (the
// old token stops working at once) and returns the token, which is
// nowhere else.
func (r *Root) IssueToken(backend string, now time.Time) (string, error) {
	if !validBackend(backend) {
		return "", fmt.Errorf("%q is not a backend name", backend)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	token := hex.EncodeToString(b)
	sum := sha256.Sum256([]byte(token))
	rec := AgentRecord{Backend: backend, TokenSHA256: hex.EncodeToString(sum[:]), IssuedAt: now.UTC()}
	if err := r.writeAgent(rec); err != nil {
		return "", err
	}
	return token, nil
}

func (r *Root) writeAgent(rec AgentRecord) error {
	dir := filepath.Join(r.Dir, AgentsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return WriteJSONFile(r.agentPath(rec.Backend), rec, 0o600)
}

// Agent reads a backend's record; ErrNoToken when none was issued.
func (r *Root) Agent(backend string) (AgentRecord, error) {
	var rec AgentRecord
	if !validBackend(backend) {
		return rec, ErrNoToken
	}
	b, err := os.ReadFile(r.agentPath(backend))
	if errors.Is(err, fs.ErrNotExist) {
		return rec, ErrNoToken
	}
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("%s: %w", r.agentPath(backend), err)
	}
	return rec, nil
}

// CheckToken reports, in constant time, whether token is backend's
// current token.
func (r *Root) CheckToken(backend, token string) bool {
	rec, err := r.Agent(backend)
	if err != nil || rec.TokenSHA256 == "" {
		return false
	}
	want, err := hex.DecodeString(rec.TokenSHA256)
	if err != nil || len(want) != sha256.Size {
		return false
	}
	got := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], want) == 1
}

// AgentSeen records that an agent of backend, on host, used its token.
// A record replaced meanwhile by a new registration is left alone.
func (r *Root) AgentSeen(backend, host string, now time.Time) error {
	rec, err := r.Agent(backend)
	if err != nil {
		return err
	}
	t := now.UTC()
	rec.LastSeen, rec.LastHost = &t, host
	cur, err := r.Agent(backend)
	if err != nil || cur.TokenSHA256 != rec.TokenSHA256 {
		return err
	}
	return r.writeAgent(rec)
}
