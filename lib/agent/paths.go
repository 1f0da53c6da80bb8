package agent

import (
	"os"
	"path/filepath"
	"strings"
)

// The agent runs each training process in its job's directory, and a
// SLURM job in the same directory on a compute node: a relative path
// handed on would name something under that directory instead. So the
// agent makes its paths absolute once, at its start, against the
// directory it was started in.

// ExpandHome replaces a leading ~/ (or a lone ~) with $HOME.
func ExpandHome(p string) string {
	rest, ok := strings.CutPrefix(p, "~/")
	if !ok && p != "~" {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return p
	}
	return filepath.Join(home, rest)
}

// AbsPath is p with ~/ expanded, absolute and clean.
func AbsPath(p string) (string, error) {
	return filepath.Abs(ExpandHome(p))
}

// ProgramPath is a program as the agent starts it: a name without a slash
// stays a name, looked up on PATH; a path is made absolute as AbsPath
// does. "" stays "".
func ProgramPath(p string) (string, error) {
	p = ExpandHome(p)
	if p == "" || !strings.Contains(p, "/") {
		return p, nil
	}
	return filepath.Abs(p)
}
