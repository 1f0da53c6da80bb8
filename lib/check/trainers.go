package check

import (
	"fmt"

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
// registry that uses a GPU and that the backend can run; onServer says
// that it trains on the annotation server (lib/backend's
// Descriptor.OnServer), which alone runs the trainers that read its files.
// A name that is no trainer is an error.
func Judge(cfg *config.Config, onServer bool, name string) (Judged, error) {
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
		if i.LocalOnly && !onServer {
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

// Candidates are the trainers a report gives a verdict for: the
// registry's, then the judged one when it is a program.
func Candidates(j Judged) []string {
	var out []string
	for _, i := range trainer.Runnable() {
		out = append(out, i.Name)
	}
	if trainer.IsExec(j.Name) {
		out = append(out, j.Name)
	}
	return out
}

// IsPython is whether a trainer is a Python script of the registry.
func IsPython(name string) bool {
	i, ok := trainer.Lookup(name)
	return ok && !i.Builtin
}

// PythonPackages are the import names the registry's Python trainers
// need, each once.
func PythonPackages() []string {
	var pkgs []string
	seen := map[string]bool{}
	for _, i := range trainer.Runnable() {
		if i.Builtin {
			continue
		}
		for _, p := range trainer.Packages(i.Name, nil) {
			if !seen[p] {
				seen[p] = true
				pkgs = append(pkgs, p)
			}
		}
	}
	return pkgs
}

// PythonVerdict judges a Python trainer on an interpreter's facts: the
// interpreter must run, be 3.8 or newer, and find the trainer's packages.
// It returns the reason, or "".
func PythonVerdict(name string, f probe.Facts, host string, missing map[string][]string) string {
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

// MissingByTrainer maps each Python trainer to the import names of its
// packages that the facts say are missing.
func MissingByTrainer(f probe.Facts) map[string][]string {
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
		for _, p := range trainer.Packages(i.Name, nil) {
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

// LocalOnly is the reason a trainer cannot run on a remote backend, or "".
func LocalOnly(name string) string {
	if i, ok := trainer.Lookup(name); ok && i.LocalOnly {
		return "it runs only on the annotation server: " + i.LocalReason
	}
	return ""
}

// Unreachable is every trainer's verdict on a host the check could not
// probe: none can start, for the same reason.
func Unreachable(j Judged, why string) []Verdict {
	var out []Verdict
	for _, name := range Candidates(j) {
		v := Verdict{Trainer: name, Reason: why}
		if lo := LocalOnly(name); lo != "" {
			v.Reason = lo
		}
		out = append(out, v)
	}
	return out
}

// Conclude ends a report: the judged trainer and the verdicts are recorded,
// and the judged trainer's failure becomes the report's first problem,
// worded "TRAINER cannot start: REASON" after prefix on the first line.
// A report that already has a problem keeps its first line.
func Conclude(r *Report, j Judged, verdicts []Verdict, prefix string) {
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
