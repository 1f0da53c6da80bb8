package agent

import (
	"os"
	"path/filepath"
	"strings"

	"potato-training/lib/shell"
	"potato-training/lib/trainer"
)

// writeSpec writes a job's spec.json, private as all the job directory
// holds (potato-agent(1)): trainer.Spec.Write gives it mode 0644.
func writeSpec(spec trainer.Spec, path string) error {
	if err := spec.Write(path); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}

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
