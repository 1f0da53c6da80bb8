package check

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	sshbackend "potato-training/lib/backend/ssh"
	"potato-training/lib/config"
	"potato-training/lib/probe"
	"potato-training/lib/trainer"
)

// Verdict is one trainer's answer on a backend: whether a run of it could
// start now, on what, or why not.
type Verdict struct {
	Trainer string `json:"trainer"`
	OK      bool   `json:"ok"`
	// Device is where a run of it would train, as the report words it.
	Device string `json:"device,omitempty"`
	// Reason is why it cannot start.
	Reason string `json:"reason,omitempty"`
	// Note is what the check cannot see from here.
	Note string `json:"note,omitempty"`
}

// Where the judged trainer comes from.
const (
	FromFlag        = "--trainer"
	FromAutoRetrain = "model_training.auto_retrain.trainer"
	FromFirstGPU    = "the first trainer that uses a GPU"
	FromFirst       = "the first trainer this backend runs"
)

// Judged is the trainer whose verdict is the check's answer, and the
// params a run of it would get (--param, or auto_retrain's).
type Judged struct {
	Name   string
	From   string
	Params map[string]string
}

// Judge picks the trainer a check answers for: name when given, else the
// one model_training.auto_retrain names, else the first trainer of the
// registry that uses a GPU and that b can run. A name that is no trainer
// is an error.
func Judge(cfg *config.Config, b *config.Backend, name string) (Judged, error) {
	if name != "" {
		if _, ok := trainer.Lookup(name); !ok && !trainer.IsExec(name) {
			return Judged{}, fmt.Errorf("unknown trainer %q: the trainers are %s", name, trainer.Choices())
		}
		return Judged{Name: name, From: FromFlag}, nil
	}
	if t := cfg.Training.AutoRetrain.Trainer; t != "" {
		return Judged{Name: t, From: FromAutoRetrain, Params: autoParams(cfg)}, nil
	}
	first := ""
	for _, i := range trainer.Runnable() {
		if i.LocalOnly && b.Type != config.TypeLocal {
			continue
		}
		if i.GPU {
			return Judged{Name: i.Name, From: FromFirstGPU}, nil
		}
		if first == "" {
			first = i.Name
		}
	}
	return Judged{Name: first, From: FromFirst}, nil
}

// candidates are the trainers a report gives a verdict for: the
// registry's, then the judged one when it is a program.
func candidates(j Judged) []string {
	var out []string
	for _, i := range trainer.Runnable() {
		out = append(out, i.Name)
	}
	if trainer.IsExec(j.Name) {
		out = append(out, j.Name)
	}
	return out
}

// isPython is whether a trainer is a Python script of the registry.
func isPython(name string) bool {
	i, ok := trainer.Lookup(name)
	return ok && !i.Builtin
}

// pythonPackages are the import names the registry's Python trainers
// need, each once.
func pythonPackages() []string {
	var pkgs []string
	seen := map[string]bool{}
	for _, i := range trainer.Runnable() {
		if i.Builtin {
			continue
		}
		for _, p := range sshbackend.TrainerPackages(i.Name, nil) {
			if !seen[p] {
				seen[p] = true
				pkgs = append(pkgs, p)
			}
		}
	}
	return pkgs
}

// pythonVerdict judges a Python trainer on an interpreter's facts: the
// interpreter must run, be 3.8 or newer, and find the trainer's packages.
// It returns the reason, or "".
func pythonVerdict(name string, f probe.Facts, host string, missing map[string][]string) string {
	if err := f.PythonError(host); err != nil {
		return err.Error()
	}
	if lacks := missing[name]; len(lacks) > 0 {
		msg, hint := probe.ImportError(name, lacks)
		if hint != "" {
			msg += " (" + hint + ")"
		}
		return msg
	}
	return ""
}

// missingByTrainer maps each Python trainer to the import names of its
// packages that the facts say are missing.
func missingByTrainer(f probe.Facts) map[string][]string {
	if f.PythonMissing || f.PythonError("") != nil {
		return nil
	}
	gone := map[string]bool{}
	for _, m := range f.Missing {
		gone[m] = true
	}
	out := map[string][]string{}
	for _, i := range trainer.Runnable() {
		if i.Builtin {
			continue
		}
		for _, p := range sshbackend.TrainerPackages(i.Name, nil) {
			if gone[p] {
				out[i.Name] = append(out[i.Name], p)
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// localOnly is the reason a trainer cannot run on a remote backend, or "".
func localOnly(name string) string {
	if i, ok := trainer.Lookup(name); ok && i.LocalOnly {
		return "it runs only on the annotation server: " + i.LocalReason
	}
	return ""
}

// execProgram is why an exec: trainer's program cannot run here, or "".
func execProgram(name string) string {
	p := strings.TrimPrefix(name, trainer.ExecPrefix)
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return fmt.Sprintf("%s was not found on this machine", p)
	case st.IsDir() || st.Mode()&0o111 == 0:
		return fmt.Sprintf("%s is not an executable file", p)
	}
	return ""
}

// probeLocal runs the probe on this machine, with python and the Python
// trainers' packages, without importing torch (a local run's device comes
// from nvidia-smi, not from torch).
func probeLocal(ctx context.Context, python string) (probe.Facts, error) {
	cmd := exec.CommandContext(ctx, "sh", "-s")
	cmd.Stdin = strings.NewReader(probe.ScriptFor(python, pythonPackages(), false))
	out, err := cmd.Output()
	if err != nil {
		return probe.Facts{}, fmt.Errorf("the probe of this machine failed: %v", err)
	}
	return probe.Parse(out)
}

// judge ends a report: the judged trainer and the verdicts are recorded,
// and the judged trainer's failure becomes the report's first problem,
// worded "TRAINER cannot start: REASON" after prefix on the first line.
// A report that already has a problem keeps its first line.
func judge(r *Report, j Judged, verdicts []Verdict, prefix string) {
	r.Trainer, r.TrainerFrom, r.Trainers = j.Name, j.From, verdicts
	if len(r.Problems) > 0 {
		r.OK = false
		return
	}
	for _, v := range verdicts {
		if v.Trainer != j.Name || v.OK {
			continue
		}
		msg := fmt.Sprintf("%s cannot start: %s", j.Name, v.Reason)
		r.Problems = append([]string{msg}, r.Problems...)
		r.OK = false
		r.Summary = prefix + ": " + msg
		return
	}
	r.OK = true
}
