package trainer

import (
	"path/filepath"
	"strings"

	"potato-training/lib/trainer/hf"
)

// ExecPrefix marks a trainer that is a program: "exec:/path/to/trainer"
// runs that program with --spec spec.json.
const ExecPrefix = "exec:"

// Programs are what a training process is started with on one machine.
type Programs struct {
	// Worker is the potato-agent executable, for the built-in trainers.
	Worker string
	// Python is the interpreter for the Python trainers; "python3" (found
	// on PATH) when empty.
	Python string
	// ScriptDir is where the embedded Python trainers are written, once
	// per version (hf.Write: a directory named by the trainer's hash).
	ScriptDir string
}

// Argv returns the command line of the training process for trainer name
// and the spec at specPath (potato-events(5)):
//
//	built-in trainer        WORKER worker --spec SPEC
//	hf-text-classification  PYTHON SCRIPTDIR/hf-text-classification-HASH/hf_text_classification.py --spec SPEC
//	embed-logreg            PYTHON SCRIPTDIR/hf-text-classification-HASH/embed_logreg.py --spec SPEC
//	hf-span                 PYTHON SCRIPTDIR/hf-text-classification-HASH/hf_span.py --spec SPEC
//	hf-llm-classification   PYTHON SCRIPTDIR/hf-text-classification-HASH/hf_llm_classification.py --spec SPEC
//	exec:PROGRAM            PROGRAM --spec SPEC
//
// It writes the Python trainer into ScriptDir when it is not there. A name
// the registry does not know is run as a built-in, so that the worker
// refuses it with its own error event.
func Argv(name, specPath string, p Programs) ([]string, error) {
	if prog, ok := strings.CutPrefix(name, ExecPrefix); ok {
		return []string{prog, "--spec", specPath}, nil
	}
	if launcher, ok := hf.Launchers[name]; ok {
		python := p.Python
		if python == "" {
			python = "python3"
		}
		dir := p.ScriptDir
		if dir == "" {
			dir = filepath.Dir(specPath)
		}
		script, err := hf.Write(dir)
		if err != nil {
			return nil, err
		}
		return []string{python, filepath.Join(filepath.Dir(script), launcher), "--spec", specPath}, nil
	}
	return []string{p.Worker, "worker", "--spec", specPath}, nil
}
