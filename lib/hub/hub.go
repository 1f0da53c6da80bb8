// Package hub publishes a run's model to the Hugging Face Hub, as
// potato-dispatch push does (potato-dispatch(1), PUSH): which runs have a
// model that can go (Find), its model card (Model.README), the token (FindToken),
// and the upload, which potato_hf/push.py makes with huggingface_hub
// (Push). The pushes of a run are recorded in its hub.jsonl and run.log
// (potato-rundir(5)).
package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"potato-training/lib/backend"
	_ "potato-training/lib/backend/all" // the registry, read below
	"potato-training/lib/bundle"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer/hf"
)

// Texts of the refusals that users and tests match.
const (
	// MsgRemote is why a model left on the backend's host is not pushed,
	// as the tutorial words it.
	MsgRemote = "publishing to the Hugging Face Hub needs the model files on the annotation server, so a model left on the GPU host cannot be published"
	// MsgNotTransformers ends the refusal of a trainer's model that
	// transformers cannot load.
	MsgNotTransformers = "only models of hf-text-classification on a transformers model go to the Hugging Face Hub, as transformers loads them"
)

// CardFormat is model_card.json's "format" (potato-agent(1)).
const CardFormat = "potato-model-card"

// Model kinds, as the trainer saves them (potato-agent(1)).
const (
	KindAdapter = "adapter" // a LoRA adapter, put on its base model with peft
	KindMerged  = "merged"  // the base with the adapter merged in; the adapter in adapter/
	KindFull    = "full"    // the whole model fine-tuned (lora=false)
)

// NotPushable is the refusal of a run whose model cannot be pushed: it
// is not successful, its trainer's model is not a transformers model, or
// its model is not on this machine. The server answers it with 409.
type NotPushable struct{ Reason string }

func (e *NotPushable) Error() string { return e.Reason }

// UsageError is a request that names no model of the run: a schema it
// did not train, or none among several.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func refuse(format string, args ...any) error {
	return &NotPushable{Reason: fmt.Sprintf(format, args...)}
}

// ModelCard is what push reads of the trainer's model_card.json.
type ModelCard struct {
	Format        string   `json:"format"`
	Trainer       string   `json:"trainer"`
	ModelVersion  string   `json:"model_version"`
	RunID         string   `json:"run_id"`
	Schema        string   `json:"schema"`
	Kind          string   `json:"kind"`
	AnnotationTyp string   `json:"annotation_type"`
	Labels        []string `json:"labels"`
	ProblemType   string   `json:"problem_type"`
	Threshold     *float64 `json:"threshold"`
	Merged        bool     `json:"merged"`
	BaseModel     string   `json:"base_model"`
	Lora          *Lora    `json:"lora"`
	MaxLength     int      `json:"max_length"`
	// Truncation is how the run cut a longer text: head_tail (its first
	// quarter and last three quarters) or head; "" on cards of earlier
	// versions, which cut the head.
	Truncation  string            `json:"truncation"`
	Tokenizer   string            `json:"tokenizer"`
	Precision   string            `json:"precision"`
	Seed        *int64            `json:"seed"`
	TrainItems  *int              `json:"train_items"`
	ValItems    *int              `json:"val_items"`
	BestEpoch   *int              `json:"best_epoch"`
	ValAccuracy *float64          `json:"val_accuracy"`
	Packages    map[string]string `json:"packages"`
	Params      map[string]any    `json:"params"`
	CreatedAt   string            `json:"created_at"`
}

// Lora is model_card.json's lora.
type Lora struct {
	R             int      `json:"r"`
	Alpha         float64  `json:"alpha"`
	Dropout       float64  `json:"dropout"`
	TargetModules []string `json:"target_modules"`
	ModulesToSave []string `json:"modules_to_save"`
}

// File is a file to send: its path here and in the repo.
type File struct {
	Path   string `json:"path"`
	InRepo string `json:"path_in_repo"`
	Bytes  int64  `json:"bytes"`
}

// Model is a run's model of one schema, found on this machine.
type Model struct {
	Record rundir.Record
	Schema string
	// Dir is the model's directory, artifacts/model-SCHEMA.
	Dir  string
	Kind string
	Card ModelCard
	// Files are the model's files, but its README.md, which the model
	// card replaces.
	Files []File
	// Bundle is the run's bundle manifest; nil when it was removed.
	Bundle *bundle.Manifest
}

// Bytes is the size of the model's files.
func (m *Model) Bytes() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Bytes
	}
	return n
}

// Find finds the model of schema ("" when the run trained one schema) of
// run id, or says why it cannot be pushed: a NotPushable, a UsageError,
// or another error (a file that cannot be read).
func Find(root *rundir.Root, id, schema string) (*Model, error) {
	if !rundir.ValidID(id) {
		return nil, &UsageError{fmt.Errorf("no run %q", id)}
	}
	if _, err := os.Stat(filepath.Join(root.RunDir(id), rundir.RecordFile)); errors.Is(err, fs.ErrNotExist) {
		return nil, &UsageError{fmt.Errorf("no run %s in %s", id, filepath.Join(root.Dir, "runs"))}
	}
	info, err := root.Read(id)
	if err != nil {
		return nil, err
	}
	rec := info.Record
	switch {
	case !info.Finished:
		return nil, refuse("run %s has not ended (%s): only a successful run has a model to push", id, rec.State)
	case rec.State != rundir.StateSuccess:
		return nil, refuse("run %s ended %s: only a successful run has a model to push", id, rec.State)
	case rec.Curve != nil:
		return nil, refuse("run %s is a learning curve run, which keeps no model", id)
	}
	if err := transformersModel(rec); err != nil {
		return nil, err
	}
	if !local(rec) {
		return nil, refuse("run %s: its model stayed on %s (%s): %s", id, hostOf(rec.ArtifactURI), whyRemote(root, rec), MsgRemote)
	}
	if schema == "" {
		if len(rec.Schemas) != 1 {
			return nil, &UsageError{fmt.Errorf("run %s trained a model for each of %s: name one with --schema", id, strings.Join(rec.Schemas, ", "))}
		}
		schema = rec.Schemas[0]
	} else if !slices.Contains(rec.Schemas, schema) {
		return nil, &UsageError{fmt.Errorf("run %s did not train schema %q: its schemas are %s", id, schema, strings.Join(rec.Schemas, ", "))}
	}
	m := &Model{Record: rec, Schema: schema, Dir: filepath.Join(root.RunDir(id), rundir.ArtifactsDir, ModelDirName(schema))}
	if err := m.read(); err != nil {
		return nil, err
	}
	if man, err := bundle.ReadManifest(filepath.Join(root.RunDir(id), rundir.BundleDir)); err == nil {
		m.Bundle = &man
	}
	return m, nil
}

// transformersModel refuses a run whose trainer's model transformers
// cannot load, from its record alone.
func transformersModel(rec rundir.Record) error {
	id := rec.RunID
	switch {
	case rec.Trainer == "tfidf-logreg":
		return refuse("run %s was trained by tfidf-logreg, whose model (artifacts/model-SCHEMA.json) is the toolkit's own JSON of n-gram weights: %s", id, MsgNotTransformers)
	case rec.Trainer == "decision-calibrate":
		return refuse("run %s was trained by decision-calibrate, whose model is a set of thresholds over Potato's own model: %s", id, MsgNotTransformers)
	case rec.Trainer != hf.Name:
		return refuse("run %s was trained by %s, whose model the toolkit does not know: %s", id, rec.Trainer, MsgNotTransformers)
	case strings.HasPrefix(rec.Params["model"], "builtin:"):
		return refuse("run %s trained model=%s, the trainer's own n-gram model (model.pt, ngram.json), which transformers cannot load: %s", id, rec.Params["model"], MsgNotTransformers)
	}
	return nil
}

// local tells whether the run's model is on this machine (artifacts/),
// and not left, whole or in part, on a backend's host.
func local(rec rundir.Record) bool {
	return rec.ArtifactURI == "" || strings.HasPrefix(rec.ArtifactURI, "file://")
}

// hostOf is the host of an artifact_uri: ssh://HOST/DIR, or HOST:DIR of a
// polling agent.
func hostOf(uri string) string {
	if rest, ok := strings.CutPrefix(uri, "ssh://"); ok {
		host, _, _ := strings.Cut(rest, "/")
		return host
	}
	if host, _, ok := strings.Cut(uri, ":"); ok && host != "" {
		return host
	}
	return uri
}

// whyRemote says why the model stayed on the host, as the run log tells
// it, and where it is.
func whyRemote(root *rundir.Root, rec rundir.Record) string {
	if d, ok := backend.Lookup(rec.BackendType); ok && d.ModelStays != "" {
		return d.ModelStays + ", in " + rec.ArtifactURI
	}
	log, _ := os.ReadFile(filepath.Join(root.RunDir(rec.RunID), rundir.LogFile))
	why := ""
	switch s := string(log); {
	case strings.Contains(s, "fetch_artifacts is false"):
		why = "fetch_artifacts is false"
	case strings.Contains(s, "is over max_artifact_mb"):
		why = "a file over max_artifact_mb stayed there; the run log names it"
	case strings.Contains(s, "only the model files are missing from artifacts/"):
		why = "the copy back stalled"
	default:
		why = "it was not copied back"
	}
	return why + ", in " + rec.ArtifactURI
}

// ModelDirName is the directory of a schema's model under artifacts/,
// as the trainer names it: model-SCHEMA, with "/", "\" and NUL made "_".
func ModelDirName(schema string) string {
	s := strings.NewReplacer("/", "_", "\\", "_", "\x00", "_").Replace(schema)
	if s == "" {
		s = "_"
	}
	return "model-" + s
}

// read reads the model's card and lists its files.
func (m *Model) read() error {
	id := m.Record.RunID
	st, err := os.Stat(m.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return refuse("run %s: its model %s is not on this machine (removed since, or never written)", id, m.Dir)
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return refuse("run %s: %s is not a directory", id, m.Dir)
	}
	b, err := os.ReadFile(filepath.Join(m.Dir, "model_card.json"))
	if err != nil {
		return refuse("run %s: its model has no model_card.json: %v", id, err)
	}
	if err := json.Unmarshal(b, &m.Card); err != nil || m.Card.Format != CardFormat {
		return refuse("run %s: %s is not the trainer's model card (format %q)", id, filepath.Join(m.Dir, "model_card.json"), m.Card.Format)
	}
	if m.Card.Tokenizer == "hash-tokenizer.json" {
		return refuse("run %s: its model uses the trainer's hashing tokenizer (hash-tokenizer.json), as its base model had no tokenizer; transformers cannot load it: %s", id, MsgNotTransformers)
	}
	_, adapter := statFile(filepath.Join(m.Dir, "adapter_config.json"))
	switch {
	case adapter:
		m.Kind = KindAdapter
	case m.Card.Merged:
		m.Kind = KindMerged
	default:
		m.Kind = KindFull
	}
	err = filepath.WalkDir(m.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(m.Dir, p)
		switch {
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			// A link could send a file from anywhere on this machine.
			return refuse("run %s: %s is not a regular file; the trainer saves none such", id, p)
		case rel == "README.md":
			return nil // the model card replaces what the library wrote
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		m.Files = append(m.Files, File{Path: p, InRepo: filepath.ToSlash(rel), Bytes: fi.Size()})
		return nil
	})
	if err != nil {
		return err
	}
	if _, ok := statFile(filepath.Join(m.Dir, "config.json")); !ok {
		return refuse("run %s: its model has no config.json", id)
	}
	return nil
}

func statFile(p string) (os.FileInfo, bool) {
	fi, err := os.Stat(p)
	return fi, err == nil && fi.Mode().IsRegular()
}

// repoID is a repo id on the Hub: OWNER/NAME.
var repoID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)

// CheckRepo refuses what is not OWNER/NAME, as the Hub names repos.
func CheckRepo(repo string) error {
	if !repoID.MatchString(repo) || strings.Contains(repo, "..") || strings.HasSuffix(repo, ".git") {
		return &UsageError{fmt.Errorf("repo %q is not OWNER/NAME (letters, digits, \".\", \"_\" and \"-\")", repo)}
	}
	return nil
}

// revision is a branch name push makes or commits to.
var revision = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$`)

// CheckRevision refuses a branch name the Hub would not take.
func CheckRevision(rev string) error {
	if rev == "" {
		return nil
	}
	if !revision.MatchString(rev) || strings.Contains(rev, "..") || strings.HasSuffix(rev, "/") || strings.HasPrefix(rev, "refs/") || strings.HasSuffix(rev, ".lock") {
		return &UsageError{fmt.Errorf("revision %q is not a branch name", rev)}
	}
	return nil
}

// CheckBaseModel refuses a base model id that is not NAME or OWNER/NAME.
func CheckBaseModel(id string) error {
	if id == "" || hubName(id) {
		return nil
	}
	return &UsageError{fmt.Errorf("base model %q is not an id on the Hub (NAME or OWNER/NAME)", id)}
}

// hubName tells whether a model name is an id on the Hub rather than a
// directory, as the trainer tells them apart.
func hubName(name string) bool {
	if name == "" || strings.HasPrefix(name, "/") || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "~") ||
		strings.Count(name, "/") > 1 || strings.Contains(name, "\\") {
		return false
	}
	return repoID.MatchString(name) || regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`).MatchString(name)
}
