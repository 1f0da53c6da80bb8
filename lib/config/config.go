// Package config reads a Potato project config and its model_training
// block, described in potato-config(5).
//
// The whole file is parsed as yaml.v3 nodes so that every problem can name
// its line. Only model_training and validation are judged; the rest of a
// Potato config is read for the few keys the toolkit needs and never
// reported.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Config is a Potato project config as the toolkit sees it.
type Config struct {
	// Path is the config file's path as it was given; Dir is its directory,
	// absolute.
	Path string
	Dir  string

	TaskName string // annotation_task_name
	// TaskDir is task_dir resolved against Dir. DataFiles and
	// AnnotationDir are resolved against TaskDir.
	TaskDir       string
	DataFiles     []string
	IDKey         string // item_properties.id_key, default "id"
	TextKey       string // item_properties.text_key, default "text"
	AnnotationDir string // output_annotation_dir, default "annotation_output"
	AdminAPIKey   string
	// AdminAPIKeyLine is the line of admin_api_key, 0 when absent.
	AdminAPIKeyLine int
	Schemes         []Scheme

	Training    Training
	Acknowledge []Acknowledge

	// preAnnotation is Potato's pre_annotation.enabled.
	preAnnotation bool

	// Problems are the errors found while decoding: malformed YAML, unknown
	// keys, missing required keys and values of the wrong type. The
	// validator adds the rules about values.
	Problems []Problem

	// BackendErrors are the validation errors that concern one backend
	// alone, by backend name: they stop runs on that backend and nothing
	// else. Whoever validated the config fills it (potato-dispatch's
	// LoadConfig); BackendError reads it. A backend named here may be
	// missing from Training.Backends, when not even its type could be read.
	BackendErrors map[string][]Problem
}

// BackendError says why the named backend cannot be used, with the
// validation errors that concern it, or returns nil.
func (c *Config) BackendError(name string) error {
	ps := c.BackendErrors[name]
	if len(ps) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "backend %s has %d error(s) in %s; run potato validate %s", name, len(ps), c.Path, c.Path)
	for _, p := range ps {
		fmt.Fprintf(&b, "\n  %s:%d: %s", c.Path, p.Line, p.Message)
	}
	return errors.New(b.String())
}

// Problem is one error or warning, tied to a line of the config file.
type Problem struct {
	Line    int    `json:"line"`
	Key     string `json:"key"`
	Message string `json:"message"`
	// Backend is the backend the problem concerns, if any.
	Backend string `json:"backend,omitempty"`
}

// Acknowledge is one entry of validation.acknowledge.
type Acknowledge struct {
	Text string
	Line int
}

// Split is one band of model_training.splits.
type Split struct {
	Name     string
	Fraction float64
}

// Training is the model_training block with defaults applied.
type Training struct {
	Enabled          bool   `key:"enabled"`
	Backend          string `key:"backend"` // "" means local
	Backends         []*Backend
	MaxWallSeconds   int    `key:"max_wall_seconds"`
	MaxRAMMB         int    `key:"max_ram_mb"`
	Device           string `key:"device"`
	NumThreads       int    `key:"num_threads"`
	Python           string `key:"python"`
	GraceSeconds     int    `key:"grace_seconds"`
	RetainRuns       int    `key:"retain_runs"`
	SplitSeed        int    `key:"split_seed"`
	Splits           []Split
	Aggregation      string `key:"aggregation"`
	Writeback        Writeback
	AutoRetrain      AutoRetrain
	MaxPredictionsMB int `key:"max_predictions_mb"`
	// MaxEventsMB bounds what a run's training process writes into its
	// run directory through the dispatch: events.jsonl and its lines of
	// run.log together; 0 or less, no bound.
	MaxEventsMB int `key:"max_events_mb"`
	// TrustedProxies are the addresses (or CIDR prefixes) of the reverse
	// proxies whose X-Forwarded-For and X-Forwarded-Proto potato-server
	// believes.
	TrustedProxies []string `key:"trusted_proxies"`
	// AllowedHosts are the names, besides this machine's and IP
	// addresses, that potato-server answers the page and the API for.
	AllowedHosts []string `key:"allowed_hosts"`

	// Lines maps each key present in the file to its line.
	Lines map[string]int
	Line  int // line of model_training itself, 0 when absent
}

// Promote values of model_training.writeback.promote.
const (
	PromoteAlways   = "always"
	PromoteIfBetter = "if_better"
)

// Writeback is model_training.writeback.
type Writeback struct {
	Schemas          []string `key:"schemas"`
	IncludeUnlabeled bool     `key:"include_unlabeled"`
	MinConfidence    float64  `key:"min_confidence"`
	Promote          string   `key:"promote"`
	Margin           float64  `key:"margin"`
	Lines            map[string]int
}

// AutoRetrain is model_training.auto_retrain.
type AutoRetrain struct {
	Enabled         bool           `key:"enabled"`
	Trainer         string         `key:"trainer"`
	Schemas         []string       `key:"schemas"`
	UpdateFrequency int            `key:"update_frequency"`
	MinIntervalS    int            `key:"min_interval_s"`
	Params          map[string]any `key:"params"`
	Backend         string         `key:"backend"`
	Lines           map[string]int
}

// Backend is one entry of model_training.backends. One struct serves every
// type; the type's key table says which fields can be set.
type Backend struct {
	Name        string
	Type        string `key:"type"`
	Description string `key:"description"`

	Host         string `key:"host"`
	User         string `key:"user"`
	Port         int    `key:"port"`
	IdentityFile string `key:"identity_file"`
	SSHConfig    string `key:"ssh_config"`
	Python       string `key:"python"`

	Packages          []string          `key:"packages"`
	GPUs              GPUs              `key:"gpus"`
	MinFreeGPUMB      int               `key:"min_free_gpu_mb"`
	NumThreads        int               `key:"num_threads"`
	RemoteDir         string            `key:"remote_dir"`
	Env               map[string]string `key:"env"`
	FetchArtifacts    bool              `key:"fetch_artifacts"`
	KeepRemote        bool              `key:"keep_remote"`
	MaxArtifactMB     int               `key:"max_artifact_mb"`
	MaxFetchMB        int               `key:"max_fetch_mb"`
	HeartbeatTimeoutS int               `key:"heartbeat_timeout_s"`

	JobPython     string   `key:"job_python"`
	Partition     string   `key:"partition"`
	Gres          string   `key:"gres"`
	Time          string   `key:"time"`
	Account       string   `key:"account"`
	QOS           string   `key:"qos"`
	CPUsPerTask   int      `key:"cpus_per_task"`
	Mem           string   `key:"mem"`
	Constraint    string   `key:"constraint"`
	Prelude       []string `key:"prelude"`
	PollIntervalS int      `key:"poll_interval_s"`

	QueueTimeoutS int `key:"queue_timeout_s"`

	Line  int            // line of the backend's name
	Lines map[string]int // line of each key present
}

// LocalBackend is the backend that always exists (SPEC B1).
var LocalBackend = &Backend{Name: "local", Type: TypeLocal}

// Backend returns the named backend; "local" and "" give LocalBackend.
func (c *Config) Backend(name string) (*Backend, bool) {
	if name == "" || name == "local" {
		return LocalBackend, true
	}
	for _, b := range c.Training.Backends {
		if b.Name == name {
			return b, true
		}
	}
	return nil, false
}

// BackendNames names the backends a run may use, "local" first and then
// the configured ones in their order.
func (c *Config) BackendNames() []string {
	names := []string{LocalBackend.Name}
	for _, b := range c.Training.Backends {
		names = append(names, b.Name)
	}
	return names
}

// Scheme returns the named annotation scheme.
func (c *Config) Scheme(name string) (Scheme, bool) {
	for _, s := range c.Schemes {
		if s.Name == name {
			return s, true
		}
	}
	return Scheme{}, false
}

// TrainingDir is <task_dir>/<output_annotation_dir>/training, the root of
// every run directory (potato-rundir(5)).
func (c *Config) TrainingDir() string {
	return filepath.Join(c.AnnotationDir, "training")
}

// ReadError is returned when the config file cannot be read at all; a file
// that can be read but not parsed gives a Problem instead.
type ReadError struct {
	Path string
	Err  error
}

func (e *ReadError) Error() string { return fmt.Sprintf("cannot read %s: %v", e.Path, e.Err) }
func (e *ReadError) Unwrap() error { return e.Err }

// maxConfigBytes bounds what is read: a Potato config is a few kilobytes.
const maxConfigBytes = 16 << 20

// ReadConfigFile reads and decodes the config at path. The error is a
// *ReadError; everything else is reported in Config.Problems.
func ReadConfigFile(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &ReadError{Path: path, Err: unwrapPathError(err)}
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, &ReadError{Path: path, Err: errors.New("is a directory")}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, &ReadError{Path: path, Err: unwrapPathError(err)}
	}
	if len(data) > maxConfigBytes {
		return nil, &ReadError{Path: path, Err: fmt.Errorf("larger than %d MiB", maxConfigBytes>>20)}
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, &ReadError{Path: path, Err: err}
	}
	c := ParseConfig(data, dir)
	c.Path = path
	return c, nil
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// ParseConfig decodes a config's bytes; dir is the directory relative paths
// are resolved against.
func ParseConfig(data []byte, dir string) *Config {
	c := &Config{Dir: dir}
	d := &decoder{c: c}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(&doc)
	root := deref(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = deref(root.Content[0])
	}
	alias, cycle := aliasTrouble(&doc)
	switch {
	case err != nil && err != io.EOF:
		line, msg := yamlErrorLine(err)
		d.errorf(line, "", "malformed YAML: %s", msg)
		d.training(nil, nil)
	case cycle:
		d.errorf(alias.Line, "", "malformed YAML: alias *%s refers to the node that contains it", alias.Value)
		d.training(nil, nil)
	case alias != nil:
		d.errorf(alias.Line, "", "malformed YAML: its aliases refer to more than %d nodes in all (an alias bomb?)", maxAliasNodes)
		d.training(nil, nil)
	case root.Kind == 0 || root.Kind == yaml.DocumentNode || (root.Kind == yaml.ScalarNode && root.Tag == "!!null"):
		d.errorf(1, "", "the file is empty: a Potato config is a YAML map")
		d.training(nil, nil)
	case root.Kind != yaml.MappingNode:
		d.errorf(root.Line, "", "a Potato config is a YAML map, not %s", describe(root))
		d.training(nil, nil)
	default:
		d.project(root)
	}
	c.applyDefaults()
	return c
}

var yamlLineRE = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

func yamlErrorLine(err error) (int, string) {
	m := yamlLineRE.FindStringSubmatch(err.Error())
	if m == nil {
		return 1, err.Error()
	}
	line, _ := strconv.Atoi(m[1])
	if line == 0 {
		line = 1
	}
	return line, m[2]
}

func (c *Config) applyDefaults() {
	if c.TaskDir == "" {
		c.TaskDir = c.Dir
	}
	if c.IDKey == "" {
		c.IDKey = "id"
	}
	if c.TextKey == "" {
		c.TextKey = "text"
	}
	if c.AnnotationDir == "" {
		c.AnnotationDir = filepath.Join(c.TaskDir, "annotation_output")
	}
	if c.Training.Splits == nil {
		c.Training.Splits = []Split{{"train", 0.7}, {"val", 0.15}, {"test", 0.15}}
	}
}

// resolve makes p absolute against base, expanding nothing else.
func resolve(base, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(base, p)
}

// project reads the Potato keys the toolkit needs. They belong to Potato:
// a value of an unexpected shape is ignored here, never reported.
func (d *decoder) project(root *yaml.Node) {
	c := d.c
	var training, trainingKey *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], deref(root.Content[i+1])
		switch k.Value {
		case "annotation_task_name":
			c.TaskName = scalarString(v)
		case "task_dir":
			c.TaskDir = resolve(c.Dir, scalarString(v))
		case "admin_api_key":
			c.AdminAPIKey, c.AdminAPIKeyLine = scalarString(v), k.Line
		case "model_training":
			training, trainingKey = v, k
		case "pre_annotation":
			c.preAnnotation = yamlTrue(mapGet(v, "enabled"))
		case "validation":
			d.validation(k, v)
		}
	}
	if c.TaskDir == "" {
		c.TaskDir = c.Dir
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], deref(root.Content[i+1])
		switch k.Value {
		case "data_files":
			c.DataFiles = nil
			for _, e := range seqOrOne(v) {
				e = deref(e)
				p := scalarString(e)
				if e.Kind == yaml.MappingNode {
					p = scalarString(mapGet(e, "path"))
				}
				if p != "" {
					c.DataFiles = append(c.DataFiles, resolve(c.TaskDir, p))
				}
			}
		case "output_annotation_dir":
			if p := scalarString(v); p != "" {
				c.AnnotationDir = filepath.Clean(resolve(c.TaskDir, p))
			}
		case "item_properties":
			c.IDKey = scalarString(mapGet(v, "id_key"))
			c.TextKey = scalarString(mapGet(v, "text_key"))
		case "annotation_schemes":
			for _, s := range seqOrOne(v) {
				c.Schemes = append(c.Schemes, readScheme(deref(s)))
			}
		}
	}
	d.training(trainingKey, training)
}

// PreAnnotationEnabled is whether the config sets pre_annotation.enabled
// to true: Potato shows stored prelabels to annotators only then, and
// loads them when it starts.
func (c *Config) PreAnnotationEnabled() bool { return c.preAnnotation }

// yamlTrue is whether n is a true that Potato's YAML reader (YAML 1.1)
// reads: true, yes or on, in any of their spellings.
func yamlTrue(n *yaml.Node) bool {
	if n == nil || deref(n).Kind != yaml.ScalarNode {
		return false
	}
	switch deref(n).Value {
	case "true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON":
		return true
	}
	return false
}

func readScheme(n *yaml.Node) Scheme {
	s := Scheme{Line: n.Line}
	if n.Kind != yaml.MappingNode {
		return s
	}
	s.Name = scalarString(mapGet(n, "name"))
	s.AnnotationType = scalarString(mapGet(n, "annotation_type"))
	s.Kind = KindOf(s.AnnotationType)
	s.SourceField = scalarString(mapGet(n, "source_field"))
	if labels := mapGet(n, "labels"); labels != nil && labels.Kind == yaml.SequenceNode {
		for _, l := range labels.Content {
			l = deref(l)
			name := scalarString(l)
			if l.Kind == yaml.MappingNode {
				name = scalarString(mapGet(l, "name"))
			}
			if name != "" {
				s.Labels = append(s.Labels, name)
			}
		}
	}
	if s.Kind == KindOrdinal && s.Labels == nil {
		s.Labels = likertPoints(mapGet(n, "size"))
		s.SizeOnly = s.Labels != nil
	}
	return s
}

// likertPoints are the points of a likert scale given by size instead of
// labels: "1" to size, the values Potato's page gives them. A size that is
// not a whole number from 2 to 100 gives none.
func likertPoints(size *yaml.Node) []string {
	n, err := strconv.Atoi(scalarString(size))
	if err != nil || n < 2 || n > 100 {
		return nil
	}
	points := make([]string, n)
	for i := range points {
		points[i] = strconv.Itoa(i + 1)
	}
	return points
}

func (d *decoder) validation(k, v *yaml.Node) {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return
	}
	if v.Kind != yaml.MappingNode {
		d.errorf(k.Line, "validation", "validation must be a map, not %s", describe(v))
		return
	}
	d.checkKeys(v, "validation", ValidationKeys, "", "")
	ack := mapGet(v, "acknowledge")
	if ack == nil || (ack.Kind == yaml.ScalarNode && ack.Tag == "!!null") {
		return
	}
	if ack.Kind != yaml.SequenceNode {
		d.errorf(ack.Line, "validation.acknowledge", "validation.acknowledge must be a list of strings, not %s", describe(ack))
		return
	}
	for i, e := range ack.Content {
		e = deref(e)
		if e.Kind != yaml.ScalarNode || e.Tag == "!!null" {
			d.errorf(e.Line, fmt.Sprintf("validation.acknowledge[%d]", i), "validation.acknowledge[%d] must be a string, not %s", i, describe(e))
			continue
		}
		d.c.Acknowledge = append(d.c.Acknowledge, Acknowledge{Text: e.Value, Line: e.Line})
	}
}

// seqOrOne returns a sequence's items, or the node itself as one item.
func seqOrOne(n *yaml.Node) []*yaml.Node {
	if n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return nil
	}
	if n.Kind == yaml.SequenceNode {
		return n.Content
	}
	return []*yaml.Node{n}
}

func mapGet(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return deref(n.Content[i+1])
		}
	}
	return nil
}

func scalarString(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return ""
	}
	return strings.TrimSpace(n.Value)
}

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return strconv.Quote(n.Value)
	}
	return "something else"
}
