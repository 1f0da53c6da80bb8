package trainer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/trainer/calibrate"
	"potato-training/lib/trainer/tfidf"
)

// MinLabelled is the fewest labelled training items per schema that the
// built-in trainer fits on.
const MinLabelled = 10

// WorkerError is a built-in trainer's run that did not finish: Exit is
// the training process's exit code (potato-events(5)), Code and Msg those
// of the error event it wrote; Msg is "" for a run stopped on request,
// which has nothing more to say.
type WorkerError struct {
	Exit int
	Code string
	Msg  string
}

func (e *WorkerError) Error() string {
	if e.Msg == "" {
		return e.Code
	}
	return e.Msg
}

// Worker is RunWorker for a caller that wants the exit code, with the
// error's message, if any, as a line on stderr.
func Worker(ctx context.Context, specPath string, stdout, stderr io.Writer) int {
	err := RunWorker(ctx, specPath, stdout)
	var we *WorkerError
	switch {
	case err == nil:
		return events.ExitFinished
	case errors.As(err, &we):
		if we.Msg != "" {
			fmt.Fprintf(stderr, "error: %s\n", we.Msg)
		}
		return we.Exit
	}
	fmt.Fprintf(stderr, "error: %v\n", err)
	return events.ExitUnexpected
}

// RunWorker runs a built-in trainer for the spec at specPath, writing
// events to stdout. It returns nil when the trainer finished, else a
// *WorkerError with the exit code the process is to end with. ctx is
// cancelled on SIGTERM: the trainer stops at its next checkpoint and the
// exit code is 4.
func RunWorker(ctx context.Context, specPath string, stdout io.Writer) error {
	// Progress and metrics at a human rate (potato-events(5)): a fit of
	// thousands of epochs a second writes a few events a second, and the
	// last of each always.
	ev := events.NewThrottledWriter(stdout, events.Interval)
	defer ev.Close()
	fail := func(code int, kind, msg, hint string) error {
		_ = ev.Emit(events.ErrorEvent(kind, msg, hint))
		return &WorkerError{Exit: code, Code: kind, Msg: msg}
	}
	spec, err := ReadSpec(specPath)
	if err != nil {
		return fail(events.ExitBadSpec, events.CodeBadSpec, err.Error(), "")
	}
	info, ok := Lookup(spec.Trainer)
	if !ok || !info.Builtin {
		return fail(events.ExitBadSpec, events.CodeUnknownTrainer, fmt.Sprintf("trainer %q is not built in", spec.Trainer), "")
	}
	if !info.Available {
		return fail(events.ExitBadSpec, events.CodeUnknownTrainer, fmt.Sprintf("trainer %q is not available in this version", spec.Trainer), "")
	}
	if spec.Limits.NumThreads > 0 {
		runtime.GOMAXPROCS(spec.Limits.NumThreads)
	}
	// The parameters, checked and typed by the trainer's declaration, as
	// potato-dispatch checked them before it recorded the run.
	params, err := info.Params.Parse(spec.Trainer, spec.Params)
	if err != nil {
		return fail(events.ExitBadSpec, events.CodeBadSpec, err.Error(), "")
	}
	_ = ev.Emit(events.Log("info", fmt.Sprintf("%s: %d threads, device %s", spec.Trainer, runtime.GOMAXPROCS(0), orCPU(spec.Limits.Device))))
	if spec.Trainer == calibrate.Name {
		err = calibrate.Run(ctx, calibrate.Input{BundleDir: spec.BundleDir, Workdir: spec.Workdir, Schemas: spec.Schemas,
			TargetPrecision: params.Float("target_precision"), Method: params.String("method"), RunID: params.String("run_id"),
			Store: params.String(calibrate.ParamStore), Project: params.String(calibrate.ParamProject)}, ev)
	} else {
		err = fitTfidf(ctx, spec, params, ev)
	}
	var fe *fitError
	var ce *calibrate.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		_ = ev.Emit(events.Status(events.CodeCancelled, "stopped on request"))
		return &WorkerError{Exit: events.ExitCancelled, Code: events.CodeCancelled}
	case errors.As(err, &fe):
		return fail(fe.exit, fe.code, fe.msg, "")
	case errors.As(err, &ce):
		return fail(ce.Exit, ce.Code, ce.Msg, "")
	default:
		return fail(events.ExitUnexpected, events.CodeFitFailed, err.Error(), "")
	}
}

func orCPU(d string) string {
	if d == "" || d == "auto" {
		return "cpu"
	}
	return d
}

type fitError struct {
	exit int
	code string
	msg  string
}

func (e *fitError) Error() string { return e.msg }

// example is one bundle row as the trainer needs it.
type example struct {
	id      string
	text    string
	targets map[string]any
}

// readSplit reads a split of the bundle in dir into memory (openSplit):
// a split the fit needs, of labelled items.
func readSplit(dir, name, path string) ([]example, error) {
	f, err := openSplit(dir, name, path)
	if f == nil || err != nil {
		return nil, err
	}
	defer f.Close()
	var out []example
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<16), maxRowBytes)
	vals := make([][]byte, len(rowKeys))
	n := 0
	for sc.Scan() {
		n++
		x, err := parseRow(sc.Bytes(), vals, true)
		if err != nil {
			return nil, badRow(path, n, err)
		}
		out = append(out, x)
	}
	return out, sc.Err()
}

// docsFor returns the documents of a schema: the items with a target.
func docsFor(xs []example, s bundle.Schema) []tfidf.Doc {
	if s.Ordinal() {
		return ordinalDocs(xs, s)
	}
	var docs []tfidf.Doc
	for _, x := range xs {
		switch t := x.targets[s.Name].(type) {
		case string:
			if s.Kind == config.KindNominal && t != "" {
				docs = append(docs, tfidf.Doc{Text: x.text, Labels: []string{t}})
			}
		case []any:
			if s.Kind == config.KindMultilabel {
				var ls []string
				for _, l := range t {
					if str, ok := l.(string); ok {
						ls = append(ls, str)
					}
				}
				docs = append(docs, tfidf.Doc{Text: x.text, Labels: ls})
			}
		}
	}
	return docs
}

// distinctLabels is the number of labels the fit's check counts: those of
// labelSet, the points the train items are at for an ordinal schema, and
// 2 for a multilabel schema, which needs no two.
func distinctLabels(s bundle.Schema, train []tfidf.Doc, labels []string) int {
	switch {
	case s.Ordinal():
		return pointsPresent(train)
	case s.Kind == config.KindNominal:
		return len(labels)
	}
	return max(len(labels), 2)
}

// labelOrder is the result's label_order of a schema: an ordinal schema's
// scale, else the model's labels.
func labelOrder(s bundle.Schema, m *tfidf.Model) []string {
	if s.Ordinal() {
		return append([]string{}, s.Labels...)
	}
	return m.Labels()
}

// tfidfSchema refuses a schema tfidf-logreg cannot learn.
func tfidfSchema(s bundle.Schema) error {
	if !Learns("tfidf-logreg", s.Kind) {
		return &fitError{events.ExitBadSpec, events.CodeValidationFailed,
			KindRefusal("tfidf-logreg", config.Scheme{Name: s.Name, AnnotationType: s.AnnotationType, Kind: s.Kind})}
	}
	return nil
}

// tfidfOptions are the fit's options for schema s, from the run's params
// and limits; patience 0 or less fits every epoch.
func tfidfOptions(spec Spec, params Values, s bundle.Schema) tfidf.Options {
	patience := params.Int("patience")
	if patience <= 0 {
		patience = -1
	}
	return tfidf.Options{Multilabel: s.Kind == config.KindMultilabel || s.Ordinal(), MaxEpochs: params.Int("epochs"), L2: params.Float("l2"),
		LearningRate: params.Float("learning_rate"), Patience: patience, MinDF: params.Int("min_df"),
		MaxFeatures: params.Int("max_features"), Threads: spec.Limits.NumThreads, Seed: spec.Seed}
}

// fitTfidf is the tfidf-logreg trainer: one model per schema, predictions
// for every split but train.
func fitTfidf(ctx context.Context, spec Spec, params Values, ev *events.Writer) error {
	start := time.Now()
	m, err := bundle.ReadManifest(spec.BundleDir)
	if err != nil {
		return &fitError{events.ExitBadSpec, events.CodeBadBundle, err.Error()}
	}
	_ = ev.Emit(events.Status("loading", "reading the bundle"))
	// Every split but unlabeled holds labelled items, which the fit needs;
	// unlabeled.jsonl, which may hold a million items, is only streamed
	// (predictSplit).
	splits := map[string][]example{}
	var names []string
	for name, sf := range m.Splits {
		names = append(names, name)
		if name == bundle.UnlabeledSplit {
			continue
		}
		xs, err := readSplit(spec.BundleDir, name, sf.Path)
		if err != nil {
			return err
		}
		splits[name] = xs
	}
	sort.Strings(names)
	if len(spec.Curve) > 0 {
		return fitTfidfCurve(ctx, spec, params, splits, ev)
	}
	if err := os.MkdirAll(spec.Workdir, 0o755); err != nil {
		return err
	}
	res := events.Result{Status: "success", Metrics: map[string]float64{}, LabelOrder: map[string][]string{},
		PredictionsFile: "predictions.jsonl", ModelVersion: "tfidf-logreg/1"}
	var models []schemaModel
	for si, s := range spec.Schemas {
		if err := tfidfSchema(s); err != nil {
			return err
		}
		s = ordinalSchema(s, splits["train"])
		train, val := docsFor(splits["train"], s), docsFor(splits["val"], s)
		labels := labelSet(s, train)
		if distinct := distinctLabels(s, train, labels); len(train) < MinLabelled || distinct < 2 {
			return &fitError{events.ExitBadSpec, events.CodeValidationFailed,
				fmt.Sprintf("schema %s has %d labelled training items with %d distinct labels: tfidf-logreg needs at least %d items and 2 labels", s.Name, len(train), distinct, MinLabelled)}
		}
		_ = ev.Emit(events.Status("fitting", fmt.Sprintf("fitting %s on %d items", s.Name, len(train))))
		opt := tfidfOptions(spec, params, s)
		fitStart := time.Now()
		model, err := tfidf.Fit(ctx, train, val, labels, opt, func(e tfidf.Epoch) {
			done := float64(si*e.Of + e.N)
			total := float64(len(spec.Schemas) * e.Of)
			eta := time.Since(fitStart).Seconds() / float64(e.N) * float64(e.Of-e.N)
			_ = ev.Emit(events.Progress("fit", done, total, eta))
			_ = ev.Emit(events.Metric("train", s.Name+"/loss", e.TrainLoss, e.N))
			if len(val) > 0 {
				_ = ev.Emit(events.Metric("val", s.Name+"/loss", e.ValLoss, e.N))
				_ = ev.Emit(events.Metric("val", s.Name+"/accuracy", e.ValAccuracy, e.N))
			}
		})
		if err != nil {
			if errors.Is(err, tfidf.ErrTooFewExamples) {
				return &fitError{events.ExitBadSpec, events.CodeValidationFailed, fmt.Sprintf("schema %s: %v", s.Name, err)}
			}
			return err
		}
		if err := saveModel(filepath.Join(spec.Workdir, "model-"+safeName(s.Name)+".json"), model, ev); err != nil {
			return err
		}
		res.LabelOrder[s.Name] = labelOrder(s, model)
		models = append(models, schemaModel{s, model})
	}
	// The fit's items are no longer needed while the pool is predicted.
	splits = nil
	if err := writePredictions(ctx, spec, m, names, models, &res, ev); err != nil {
		return err
	}
	res.Metrics["fit_seconds"] = time.Since(start).Seconds()
	return ev.Emit(events.ResultEvent(res))
}

// writePredictions writes predictions.jsonl: every model's prediction for
// every item of every split but train, the splits in the order of names,
// each streamed (predictSplit).
func writePredictions(ctx context.Context, spec Spec, m bundle.Manifest, names []string, models []schemaModel, res *events.Result, ev *events.Writer) error {
	pf, err := os.Create(filepath.Join(spec.Workdir, "predictions.jsonl"))
	if err != nil {
		return err
	}
	defer pf.Close()
	pw := bufio.NewWriterSize(pf, 1<<20)
	for _, name := range names {
		if name == "train" {
			continue
		}
		path := m.Splits[name].Path
		f, err := openSplit(spec.BundleDir, name, path)
		if err != nil {
			return err
		}
		if f == nil {
			continue
		}
		_ = ev.Emit(events.Status("predicting", fmt.Sprintf("predicting the %s split", name)))
		tally, err := predictSplit(ctx, f, name, path, models, predictThreads(spec), pw)
		f.Close()
		if err != nil {
			return err
		}
		res.NPredictions += tally.predictions
		if name == "val" {
			for i, sm := range models {
				if tally.n[i] > 0 {
					res.Metrics[sm.schema.Name+"/val_accuracy"] = float64(tally.correct[i]) / float64(tally.n[i])
				}
			}
		}
	}
	if err := pw.Flush(); err != nil {
		return err
	}
	return pf.Sync()
}

type payload struct {
	Label      string  `json:"label"`
	Confidence float64 `json:"confidence"`
}

type prediction struct {
	InstanceID string  `json:"instance_id"`
	SchemaName string  `json:"schema_name"`
	Payload    payload `json:"payload"`
	Confidence float64 `json:"confidence"`
	// Probs is every label's probability (potato-events(5)): softmax
	// probabilities of a nominal schema, a multilabel schema's
	// independent sigmoid ones. The dispatch calibrates them.
	Probs map[string]float32 `json:"probs,omitempty"`
}

// predict gives the label, its confidence and every label's probability;
// a multilabel label is the sorted chosen names joined by "|"
// (FORMATS.md).
func predict(m *tfidf.Model, s bundle.Schema, text string) (string, float64, map[string]float32) {
	if s.Ordinal() {
		return predictOrdinal(m, s, text)
	}
	p := m.Probabilities(text)
	probs := make(map[string]float32, len(p))
	for c, v := range p {
		probs[m.Label(c)] = float32(v)
	}
	if s.Kind == config.KindMultilabel {
		chosen, conf := m.MultilabelOf(p, 0.5)
		sort.Strings(chosen)
		return strings.Join(chosen, "|"), conf, probs
	}
	label, conf := m.NominalOf(p)
	return label, conf, probs
}

func goldLabel(s bundle.Schema, t any) (string, bool) {
	if s.Ordinal() {
		return ordinalGold(s, t)
	}
	switch v := t.(type) {
	case string:
		return v, v != ""
	case []any:
		var ls []string
		for _, l := range v {
			if s, ok := l.(string); ok {
				ls = append(ls, s)
			}
		}
		sort.Strings(ls)
		return strings.Join(ls, "|"), true
	}
	return "", false
}

// labelSet is the configured labels, then any other label seen in train.
func labelSet(s bundle.Schema, train []tfidf.Doc) []string {
	if s.Ordinal() {
		return thresholds(s.Labels)
	}
	seen := map[string]bool{}
	var out []string
	for _, l := range s.Labels {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	used := map[string]bool{}
	var extra []string
	for _, d := range train {
		for _, l := range d.Labels {
			used[l] = true
			if !seen[l] {
				seen[l] = true
				extra = append(extra, l)
			}
		}
	}
	sort.Strings(extra)
	out = append(out, extra...)
	if s.Kind == config.KindNominal {
		// Distinct labels actually present decide whether there is anything
		// to learn.
		var present []string
		for _, l := range out {
			if used[l] {
				present = append(present, l)
			}
		}
		if len(present) < 2 {
			return present
		}
	}
	return out
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 || r == '.' && len(s) <= 2 {
			return '_'
		}
		return r
	}, s)
}

func saveModel(path string, m *tfidf.Model, ev *events.Writer) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := m.Save(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	return ev.Emit(events.Artifact(filepath.Base(path), st.Size()))
}
