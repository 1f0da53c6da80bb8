package cli

import (
	"runtime/debug"
	"sync"
)

// Commit is the commit the binary was built from, as the Makefile sets it:
// go build -ldflags "-X potato-training/internal/cli.Commit=HASH". Left
// empty, BuildCommit reads the build's own record instead.
var Commit string

// VersionText is what --version prints: the version alone on the first
// line, so that a script may read that line, then "commit " and the
// commit the binary was built from (BuildCommit).
func VersionText() string {
	return Version + "\ncommit " + BuildCommit()
}

var buildCommit = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	return commitOf(Commit, info, ok)
})

// BuildCommit is the commit this binary was built from: Commit when the
// build set it; else the vcs.revision that go build records when it
// builds in a git checkout, with "-modified" after it when the tree had
// changes that were not committed (vcs.modified); else "unknown" (a
// build outside a checkout, or a test binary).
func BuildCommit() string { return buildCommit() }

func commitOf(commit string, info *debug.BuildInfo, ok bool) string {
	if commit != "" {
		return commit
	}
	if !ok || info == nil {
		return "unknown"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	switch {
	case rev == "":
		return "unknown"
	case modified == "true":
		return rev + "-modified"
	}
	return rev
}
