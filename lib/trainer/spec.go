// Package trainer knows the trainers, runs a training process and relays
// its events, and holds the built-in trainers that potato-agent worker
// runs. The protocol is in potato-events(5).
package trainer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"potato-training/lib/bundle"
	"potato-training/lib/curve"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer/calibrate"
	"potato-training/lib/trainer/hf"
	"potato-training/lib/trainer/tfidf"
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
	// Curve, when set, asks for a learning curve: the points, percentages
	// of each schema's labelled train items (potato-events(5)), and
	// CurveDraws the nested draws to fit at each (absent or 0: one).
	Curve      []float64 `json:"curve,omitempty"`
	CurveDraws int       `json:"curve_draws,omitempty"`
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
	return rundir.WriteJSONFile(path, s, 0o644)
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
	// GPU trainers can use a GPU, so a run of one gets the backend's; the
	// others run on the CPU whatever the backend has, and their spec says
	// so (limits.device "cpu").
	GPU bool
	// Curve trainers fit learning curves (spec.json's curve); a run asks
	// the others for none. CurveDraws is how many nested draws a curve
	// asks of it when --draws is left out (spec.json's curve_draws).
	Curve      bool
	CurveDraws int
	// Params are the parameters it takes: potato-dispatch run refuses
	// others before it records the run, and the trainer reads them
	// through this declaration.
	Params Params
}

// registry is every trainer this version names, in the order the help,
// the errors and potato-dispatch(1) list them.
var registry = []Info{
	// tfidf-logreg fits in a moment: 8 draws, which let a curve of a few
	// dozen items show a clear rise in most subsets where 3 show it in
	// fewer than half (scripts/bench-curve).
	{Name: "tfidf-logreg", Builtin: true, Kinds: []string{"nominal", "multilabel", "ordinal"}, Available: true, Curve: true, CurveDraws: 8, Params: tfidfParams},
	// hf-text-classification fits curve.DefaultDraws: a fit is minutes
	// where tfidf-logreg's is a moment, so fewer than its 8, but more than
	// one, whose judge has only the draw's scatter about its line.
	{Name: hf.Name, Kinds: []string{"nominal", "multilabel", "ordinal"}, Available: true, GPU: true, Curve: true, CurveDraws: curve.DefaultDraws, Params: hfParams},
	// embed-logreg encodes each item once and fits linear heads in a
	// moment: tfidf-logreg's 8 draws.
	{Name: hf.EmbedName, Kinds: []string{"nominal", "multilabel", "ordinal"}, Available: true, GPU: true, Curve: true, CurveDraws: 8, Params: embedParams},
	// hf-span's curve is scored on exact-match span F1 (lib/writeback's
	// spans.go), with hf-text-classification's draws.
	{Name: hf.SpanName, Kinds: []string{"span"}, Available: true, GPU: true, Curve: true, CurveDraws: curve.DefaultDraws, Params: hfSpanParams},
	// hf-llm-classification: a decoder LLM's LoRA fine-tune, minutes to
	// hours a fit: no curve.
	{Name: hf.LLMName, Kinds: []string{"nominal", "multilabel", "ordinal"}, Available: true, GPU: true, Params: llmParams},
	{Name: calibrate.Name, LocalOnly: true, Builtin: true, Kinds: []string{"nominal"}, Available: true,
		NoPredictions: true, LocalReason: "it reads the annotation server's own files (Potato's store, project.sqlite, and the annotations)",
		Params: calibrateParams},
}

func itoa(n int) string     { return strconv.Itoa(n) }
func ftoa(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// tfidfParams are tfidf-logreg's, read by fitTfidf; the defaults are
// tfidf.Options'.
var tfidfParams = Params{
	{Name: "epochs", Kind: KindInt, Default: itoa(tfidf.DefaultMaxEpochs), Range: AtLeast(1),
		Help: "the most passes over the training items"},
	{Name: "patience", Kind: KindInt, Default: itoa(tfidf.DefaultPatience),
		Help: "epochs without improvement on the val split before training stops; 0 or less trains every epoch"},
	{Name: "learning_rate", Kind: KindFloat, Default: ftoa(tfidf.DefaultLearningRate), Range: Above(0),
		Help: "the Adagrad step size"},
	{Name: "l2", Kind: KindFloat, Default: ftoa(tfidf.DefaultL2), Range: Above(0),
		Help: "the L2 regularisation of the weights"},
	{Name: "min_df", Kind: KindInt, DefaultNote: fmt.Sprintf("%d, or 1 under %d training items", tfidf.DefaultMinDF, tfidf.SmallCorpus), Range: AtLeast(1),
		Help: "training items a word or word pair must occur in to be a feature"},
	{Name: "max_features", Kind: KindInt, Default: itoa(tfidf.DefaultMaxFeatures), Range: AtLeast(1),
		Help: "features kept, the most frequent"},
}

// calibrateParams are decision-calibrate's, read by calibrate.Run through
// Worker.
var calibrateParams = Params{
	{Name: "target_precision", Kind: KindFloat, Default: ftoa(calibrate.DefaultTarget), Range: &Range{Min: 0, Max: 1, MinOpen: true},
		Help: "the precision the chosen min_confidence reaches"},
	{Name: "method", Kind: KindString, Default: "auto", Choices: []string{"auto", "platt", "isotonic"},
		Help: "the calibration curve; auto: isotonic above " + itoa(calibrate.IsotonicAbove) + " points, else platt"},
	{Name: "run_id", Kind: KindString, DefaultNote: "the run that wrote the schema's newest prediction",
		Help: "the run whose stored predictions are calibrated; all for every run"},
	{Name: calibrate.ParamStore, Kind: KindString, DefaultNote: "task_dir's project.sqlite",
		Help: "Potato's store, set by the local backend"},
	{Name: calibrate.ParamProject, Kind: KindString, DefaultNote: "annotation_task_name",
		Help: "the project the store's rows are keyed by, set by the local backend"},
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
//	tfidf-logreg, hf-text-classification, hf-span, decision-calibrate (local only), or exec:PROGRAM
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

// UsesGPU is whether a run of trainer name gets a GPU: a trainer of the
// registry that can use one, or an exec: program, which may.
func UsesGPU(name string) bool {
	if IsExec(name) {
		return true
	}
	i, ok := Lookup(name)
	return ok && i.GPU
}

// Lookup finds a trainer by name.
func Lookup(name string) (Info, bool) {
	i, ok := Trainers[name]
	return i, ok
}
