package rundir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAgentTokens(t *testing.T) {
	r := &Root{Dir: t.TempDir()}
	if _, err := r.Agent("lab"); err != ErrNoToken {
		t.Fatalf("before registration: %v", err)
	}
	if r.CheckToken("lab", "") || r.CheckToken("lab", "x") {
		t.Error("a token accepted before any was issued")
	}
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	tok, err := r.IssueToken("lab", now)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 64 || !r.CheckToken("lab", tok) || r.CheckToken("lab", tok[:63]) || r.CheckToken("other", tok) {
		t.Errorf("token %q checks wrongly", tok)
	}
	p := filepath.Join(r.Dir, "agents", "lab.json")
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v %v", st.Mode(), err)
	}
	b, _ := os.ReadFile(p)
	if strings.Contains(string(b), tok) {
		t.Error("the token itself is stored")
	}
	if err := r.AgentSeen("lab", "ws1", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	rec, _ := r.Agent("lab")
	if rec.LastHost != "ws1" || rec.LastSeen == nil || !rec.IssuedAt.Equal(now) {
		t.Errorf("%+v", rec)
	}
	tok2, _ := r.IssueToken("lab", now.Add(time.Hour))
	if r.CheckToken("lab", tok) || !r.CheckToken("lab", tok2) {
		t.Error("registering again did not replace the token")
	}
	if _, err := r.IssueToken("../x", now); err == nil {
		t.Error("a backend name with a path accepted")
	}
}
