package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"potato-training/internal/testcli"
)

func TestCommitOf(t *testing.T) {
	const rev = "3f1c9e0a5b7d2c4e6f8a0b1c2d3e4f5a6b7c8d9e"
	vcs := func(kv ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{}
		for i := 0; i < len(kv); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return info
	}
	for _, c := range []struct {
		name, commit string
		info         *debug.BuildInfo
		ok           bool
		want         string
	}{
		{"ldflags win", "abc123", vcs("vcs.revision", rev), true, "abc123"},
		{"vcs.revision", "", vcs("vcs", "git", "vcs.revision", rev, "vcs.modified", "false"), true, rev},
		{"modified tree", "", vcs("vcs.revision", rev, "vcs.modified", "true"), true, rev + "-modified"},
		{"no vcs", "", vcs("-trimpath", "true"), true, "unknown"},
		{"no build info", "", nil, false, "unknown"},
	} {
		if got := commitOf(c.commit, c.info, c.ok); got != c.want {
			t.Errorf("%s: commitOf = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestVersionOfBuiltBinary builds potato-validate as the Makefile's dist
// does (the commit given by -ldflags -X) and as a plain go build in the
// checkout does (no -ldflags: the commit read from the build's
// vcs.revision), and runs --version of each: the version alone on the
// first line, then the commit. The second half needs a git clone: outside
// one (a source tarball), or in a git worktree, it is skipped.
func TestVersionOfBuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	root := testcli.Root()
	dir := t.TempDir()
	build := func(out string, args ...string) string {
		t.Helper()
		bin := filepath.Join(dir, out)
		cmd := exec.Command("go", append(append([]string{"build", "-o", bin}, args...), "./cmd/potato-validate")...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		b, err := exec.Command(bin, "--version").Output()
		if err != nil {
			t.Fatalf("%s --version: %v", out, err)
		}
		return string(b)
	}
	const stamped = "0123456789abcdef0123456789abcdef01234567"
	if got, want := build("stamped", "-ldflags", "-X potato-training/internal/cli.Commit="+stamped), Version+"\ncommit "+stamped+"\n"; got != want {
		t.Errorf("built with -X cli.Commit: --version printed %q, want %q", got, want)
	}

	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		b, err := cmd.Output()
		return strings.TrimSpace(string(b)), err
	}
	head, err := git("rev-parse", "HEAD")
	if err != nil {
		t.Skipf("not a git checkout (%v): no vcs.revision to read", err)
	}
	if st, err := os.Stat(filepath.Join(root, ".git")); err != nil || !st.IsDir() {
		t.Skip("a git worktree, whose .git is a file: go build records no vcs.revision there")
	}
	// -buildvcs=true: go build's default, auto, stamps a build in a
	// checkout, but GOFLAGS (or go env -w) may have turned it off.
	got := build("plain", "-buildvcs=true")
	status, err := git("status", "--porcelain")
	if err != nil {
		t.Fatal(err)
	}
	want := Version + "\ncommit " + head + "\n"
	if status != "" {
		want = Version + "\ncommit " + head + "-modified\n"
	}
	if got != want {
		t.Errorf("plain go build: --version printed %q, want %q (git status: %q)", got, want, status)
	}
}
