package ssh

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"potato-training/lib/config"
)

// sh runs script under /bin/sh with HOME set and returns its output.
func sh(t *testing.T, home, script string) []byte {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), "HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sh: %v\n%s\nscript:\n%s", err, out, script)
	}
	return out
}

// A remote path becomes one shell word that names it from the remote
// home, as scp takes it, whatever it holds.
func TestRemoteWord(t *testing.T) {
	home := "/home/potato user"
	for p, want := range map[string]string{
		"~":                   home,
		"~/.cache/potato":     home + "/.cache/potato",
		"jobs/x; rm -rf /":    home + "/jobs/x; rm -rf /",
		"/srv/it's $HOME/dir": "/srv/it's $HOME/dir",
	} {
		if got := string(sh(t, home, "printf %s "+remoteWord(p))); got != want {
			t.Errorf("remoteWord(%q) expands to %q, want %q", p, got, want)
		}
	}
}

// The env is exported with its values exactly, whatever they hold.
func TestEnvPrefix(t *testing.T) {
	b := &config.Backend{Env: map[string]string{"A": "it's; $(echo no)", "PATH": "/opt/x bin:/usr/bin:/bin"}}
	if got := string(sh(t, "/", envPrefix(b)+`printf '%s|%s' "$A" "$PATH"`)); got != "it's; $(echo no)|/opt/x bin:/usr/bin:/bin" {
		t.Errorf("exported %q", got)
	}
	if got := pathPrefix(b); got != "export PATH='/opt/x bin:/usr/bin:/bin'; " {
		t.Errorf("pathPrefix %q", got)
	}
	if got := pathPrefix(&config.Backend{Env: map[string]string{"HF_TOKEN": "secret"}}); got != "" {
		t.Errorf("pathPrefix without PATH: %q, want nothing (no other variable goes on a command line)", got)
	}
}

func TestGoarchOf(t *testing.T) {
	for m, want := range map[string]string{"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"} {
		if got, err := goarchOf(m); err != nil || got != want {
			t.Errorf("goarchOf(%q) = %q, %v; want %q", m, got, err, want)
		}
	}
	if _, err := goarchOf("riscv64"); err == nil {
		t.Error("goarchOf(riscv64) gave an agent")
	}
}

// The checks before remote_dir's agent is reused, run by the real shell
// on real directories: the agent is reused only when it has the digest
// its directory is named after and no one else could have written it.
func TestCodeCheck(t *testing.T) {
	agent := []byte("#!/bin/sh\necho agent\n")
	sum := sha256.Sum256(agent)
	digest := hex.EncodeToString(sum[:])
	setup := func(t *testing.T, content []byte, codeMode os.FileMode) string {
		root := t.TempDir()
		dir := filepath.Join(root, "code", digest)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "potato-agent"), content, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(root, "code"), codeMode); err != nil {
			t.Fatal(err)
		}
		return root
	}
	for _, c := range []struct {
		name     string
		content  []byte
		codeMode os.FileMode
		want     string
	}{
		{"intact", agent, 0o755, reuseOK},
		{"another binary", []byte("tampered\n"), 0o755, reuseStale},
		{"code/ writable by others", agent, 0o777, reuseBad},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := setup(t, c.content, c.codeMode)
			out := sh(t, "/", reuseFuncs+codeCheck(root, digest))
			if got := reuseOf(out, codeMark); got.state != c.want {
				t.Errorf("state %q (%q), want %q\n%s", got.state, got.bad, c.want, out)
			}
		})
	}
	// No agent yet: nothing to reuse, nothing said.
	if out := sh(t, "/", reuseFuncs+codeCheck(t.TempDir(), digest)); reuseOf(out, codeMark).state != "" {
		t.Errorf("an empty remote_dir: %s", out)
	}
}

// remote_dir writable by others is said; a sticky one (/tmp) is not.
func TestRootCheck(t *testing.T) {
	for mode, open := range map[os.FileMode]bool{0o755: false, 0o777: true, 0o777 | os.ModeSticky: false} {
		root := t.TempDir()
		if err := os.Chmod(root, mode); err != nil {
			t.Fatal(err)
		}
		if got := hasLine(sh(t, "/", rootCheck(root)), openMark); got != open {
			t.Errorf("mode %v: open %v, want %v", mode, got, open)
		}
	}
}

// A venv is reused when it has an interpreter and no one else could have
// written it.
func TestVenvCheck(t *testing.T) {
	v := filepath.Join(t.TempDir(), "venv-x")
	if err := os.MkdirAll(filepath.Join(v, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v, "bin", "python"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := reuseOf(sh(t, "/", reuseFuncs+venvCheck(v)), venvMark); got.state != reuseOK {
		t.Errorf("intact venv: %q", got.state)
	}
	if err := os.Chmod(filepath.Join(v, "bin"), 0o777); err != nil {
		t.Fatal(err)
	}
	if got := reuseOf(sh(t, "/", reuseFuncs+venvCheck(v)), venvMark); got.state != reuseBad || got.bad != filepath.Join(v, "bin") {
		t.Errorf("venv with a directory others may write: %q %q", got.state, got.bad)
	}
}
