// Package trainer knows the trainers, runs a training process and relays
// its events, and holds the built-in trainers that potato-agent worker
// runs. The protocol is in potato-events(5).
package trainer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"potato-training/lib/bundle"
	"potato-training/lib/rundir"
)

// Limits is spec.json's limits.
type Limits struct {
	MaxWallS   int    `json:"max_wall_s"`
	MaxRAMMB   int    `json:"max_ram_mb"`
	Device     string `json:"device"`
	NumThreads int    `json:"num_threads"`
}

// Spec is spec.json, TrainingSpec v1.
type Spec struct {
	V         int               `json:"v"`
	RunID     string            `json:"run_id"`
	Trainer   string            `json:"trainer"`
	Schemas   []bundle.Schema   `json:"schemas"`
	BundleDir string            `json:"bundle_dir"`
	Workdir   string            `json:"workdir"`
	Params    map[string]string `json:"params"`
	Seed      int64             `json:"seed"`
	Limits    Limits            `json:"limits"`
}

// ReadSpec reads and checks spec.json.
func ReadSpec(path string) (Spec, error) {
	var s Spec
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case s.V != 1:
		return s, fmt.Errorf("%s: version %d, want 1", path, s.V)
	case s.Trainer == "":
		return s, fmt.Errorf("%s: no trainer", path)
	case len(s.Schemas) == 0:
		return s, fmt.Errorf("%s: no schemas", path)
	case s.BundleDir == "" || s.Workdir == "":
		return s, fmt.Errorf("%s: bundle_dir and workdir are required", path)
	}
	return s, nil
}

// Write writes the spec atomically.
func (s Spec) Write(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return rundir.WriteFileAtomic(path, append(b, '\n'), 0o644)
}

// PredictionsPath is where a result's predictions_file is: relative to
// workdir, and never outside it, whatever the process wrote there (an
// absolute path is taken as one under workdir). Every backend reads it
// through this, so a result cannot name a file of the machine.
func PredictionsPath(workdir, file string) string {
	if file == "" {
		file = "predictions.jsonl"
	}
	return filepath.Join(workdir, filepath.Clean("/"+strings.TrimPrefix(file, workdir)))
}

// Info describes a trainer.
type Info struct {
	Name string
	// LocalOnly trainers run only on the annotation server (SPEC B4).
	LocalOnly bool
	// Builtin trainers are Go code run as "potato-agent worker".
	Builtin bool
	// Kinds are the schema kinds the trainer can learn.
	Kinds []string
	// Available is false for a trainer this version names but cannot run.
	Available bool
	// NoPredictions trainers write no predictions: their runs have nothing
	// to score or write back.
	NoPredictions bool
	// LocalReason says why a LocalOnly trainer runs only locally.
	LocalReason string
}

// registry is every trainer this version names, in the order the help,
// the errors and potato-dispatch(1) list them.
var registry = []Info{
	{Name: "tfidf-logreg", Builtin: true, Kinds: []string{"nominal", "multilabel"}, Available: true},
	{Name: "hf-text-classification", Kinds: []string{"nominal", "multilabel"}, Available: true},
	{Name: "decision-calibrate", LocalOnly: true, Builtin: true, Kinds: []string{"nominal"}, Available: true,
		NoPredictions: true, LocalReason: "it reads the annotation server's own files (Potato's store, project.sqlite, and the annotations)"},
}

// Trainers is the registry, by name.
var Trainers = func() map[string]Info {
	m := make(map[string]Info, len(registry))
	for _, i := range registry {
		m[i.Name] = i
	}
	return m
}()

// Runnable returns the trainers this version can run, in the registry's
// order.
func Runnable() []Info {
	var out []Info
	for _, i := range registry {
		if i.Available {
			out = append(out, i)
		}
	}
	return out
}

// Choices is the list of trainers a user can give --trainer, as the help
// and the "unknown trainer" error say it:
//
//	tfidf-logreg, hf-text-classification, decision-calibrate (local only), or exec:PROGRAM
func Choices() string {
	var names []string
	for _, i := range Runnable() {
		n := i.Name
		if i.LocalOnly {
			n += " (local only)"
		}
		names = append(names, n)
	}
	return strings.Join(names, ", ") + ", or " + ExecPrefix + "PROGRAM"
}

// Lookup finds a trainer by name.
func Lookup(name string) (Info, bool) {
	i, ok := Trainers[name]
	return i, ok
}
