package trainer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"potato-training/lib/config"
)

// PythonEnv names the interpreter of local runs of Python trainers when
// the config's model_training.python does not; potato-agent's --python
// reads it too.
const PythonEnv = "POTATO_TRAINING_PYTHON"

// PythonKey is the config key of a local run's interpreter.
const PythonKey = "model_training.python"

// LocalPython is the interpreter of a local run's Python trainers
// (potato-config(5)): model_training.python, a relative path taken from
// the config file's directory and a leading "~/" from $HOME; else
// $POTATO_TRAINING_PYTHON; else python3. From says which of the three
// named it. A bare name is looked up on PATH by Find.
type LocalPython struct {
	Name string
	From string // PythonKey, PythonEnv, or "default"
}

// LocalPythonOf reads a config's choice of local interpreter.
func LocalPythonOf(cfg *config.Config) LocalPython {
	if p := cfg.Training.Python; p != "" {
		if rest, ok := strings.CutPrefix(p, "~/"); ok {
			if home, err := os.UserHomeDir(); err == nil {
				p = filepath.Join(home, rest)
			}
		} else if strings.Contains(p, "/") && !filepath.IsAbs(p) {
			p = filepath.Join(cfg.Dir, p)
		}
		return LocalPython{Name: p, From: PythonKey}
	}
	if p := os.Getenv(PythonEnv); p != "" {
		return LocalPython{Name: p, From: PythonEnv}
	}
	return LocalPython{Name: "python3", From: "default"}
}

// Find is the interpreter's path on this machine: a bare name looked up
// on PATH, a path that must be an executable file. The error names the
// interpreter and where the name came from.
func (p LocalPython) Find() (string, error) {
	if err := p.find(); err != nil {
		return "", fmt.Errorf("%w (%s)", err, p.source())
	}
	if !strings.Contains(p.Name, "/") {
		return exec.LookPath(p.Name)
	}
	return p.Name, nil
}

// Missing says why the interpreter cannot run on this machine, naming
// it alone, or returns nil.
func (p LocalPython) Missing() error { return p.find() }

func (p LocalPython) find() error {
	if !strings.Contains(p.Name, "/") {
		if _, err := exec.LookPath(p.Name); err != nil {
			return fmt.Errorf("%s was not found on PATH", p.Name)
		}
		return nil
	}
	st, err := os.Stat(p.Name)
	switch {
	case err != nil:
		return fmt.Errorf("%s was not found on this machine", p.Name)
	case st.IsDir() || st.Mode()&0o111 == 0:
		return fmt.Errorf("%s is not an executable file", p.Name)
	}
	return nil
}

// source says where the name came from, for the messages.
func (p LocalPython) source() string {
	switch p.From {
	case PythonKey, PythonEnv:
		return "from " + p.From
	}
	return "the default; set " + PythonKey + " to choose one"
}

// Describe is the interpreter as a report names it:
// "/usr/bin/python3 (model_training.python)".
func (p LocalPython) Describe() string {
	if p.From == PythonKey || p.From == PythonEnv {
		return p.Name + " (" + p.From + ")"
	}
	return p.Name + " (the default)"
}
