package agent

import (
	"path/filepath"
	"strings"

	"potato-training/lib/shell"
)

// The agent runs each training process in its job's directory, and a
// SLURM job in the same directory on a compute node: a relative path
// handed on would name something under that directory instead. So the
// agent makes its paths absolute once, at its start, against the
// directory it was started in.

// AbsPath is p with ~/ expanded, absolute and clean.
func AbsPath(p string) (string, error) {
	return filepath.Abs(shell.ExpandHome(p))
}

// ProgramPath is a program as the agent starts it: a name without a slash
// stays a name, looked up on PATH; a path is made absolute as AbsPath
// does. "" stays "".
func ProgramPath(p string) (string, error) {
	p = shell.ExpandHome(p)
	if p == "" || !strings.Contains(p, "/") {
		return p, nil
	}
	return filepath.Abs(p)
}
