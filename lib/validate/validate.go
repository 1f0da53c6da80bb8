// Package validate implements the rules of potato-validate(1): the errors,
// warnings and notes of a project's model_training block, and the
// acknowledge list that accepts warnings.
package validate

import (
	"fmt"
	"io"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"potato-training/lib/config"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
)

// The user-visible texts of SPEC V3 and V4, kept in one place.
const (
	longTimeWarning  = "%s is %s. A job that holds a GPU for more than 6 hours is long on a shared cluster; check its policy"
	ackTooShort      = "validation.acknowledge entry %q is too short to acknowledge anything: an entry needs at least %d characters"
	ackMatchesNone   = "validation.acknowledge entry %q matches no warning"
	ackMinChars      = 12
	maxSLURMDuration = 6 * time.Hour
)

// Finding is one error, warning or note.
type Finding struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Key     string `json:"key,omitempty"`
	Message string `json:"message"`
	Backend string `json:"backend,omitempty"`
	// AcknowledgedBy is the acknowledge entry that accepted a warning.
	AcknowledgedBy string `json:"acknowledged_by,omitempty"`
}

// Report is what potato-validate prints; --json prints it as it is.
type Report struct {
	File         string    `json:"file"`
	Errors       []Finding `json:"errors"`
	Warnings     []Finding `json:"warnings"`
	Acknowledged []Finding `json:"acknowledged"`
	// Notes are advice: neither errors nor warnings, they never make a
	// config invalid, under --strict either.
	Notes []Finding `json:"notes"`
	// Info says what runs of the config will do where the config leaves
	// it to a default (AggregationInfo); never a fault, never counted.
	Info []Finding `json:"info"`
}

// Valid reports whether the config passes: no errors, and under strict no
// unacknowledged warning either. Notes never count.
func (r Report) Valid(strict bool) bool {
	return len(r.Errors) == 0 && (!strict || len(r.Warnings) == 0)
}

// File reads and checks the config at path. The error is a
// *config.ReadError when the file cannot be read.
func File(p string) (*config.Config, Report, error) {
	c, err := config.ReadConfigFile(p)
	if err != nil {
		return nil, Report{}, err
	}
	return c, Check(c), nil
}

// Check applies every rule to a decoded config.
func Check(c *config.Config) Report {
	ch := &checker{c: c, bad: map[string]bool{}}
	for _, p := range c.Problems {
		ch.bad[p.Key] = true
	}
	ch.errs = append(ch.errs, c.Problems...)
	ch.adminKey()
	ch.training()
	for _, b := range c.Training.Backends {
		ch.backend(b)
	}
	r := Report{File: c.Path, Errors: ch.findings(ch.errs), Warnings: []Finding{}, Acknowledged: []Finding{}}
	r.Warnings, r.Acknowledged, r.Notes = acknowledge(c, ch.findings(ch.warns), ch.findings(ch.notes))
	r.Info = ch.findings(ch.info)
	return r
}

type checker struct {
	c *config.Config
	// bad holds the keys whose value could not be decoded: their value
	// rules are not applied, so one mistake gives one message.
	bad   map[string]bool
	errs  []config.Problem
	warns []config.Problem
	notes []config.Problem
	info  []config.Problem
}

func (ch *checker) findings(ps []config.Problem) []Finding {
	out := make([]Finding, 0, len(ps))
	for _, p := range ps {
		out = append(out, Finding{File: ch.c.Path, Line: p.Line, Key: p.Key, Message: p.Message, Backend: p.Backend})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}

func (ch *checker) errorf(line int, key, backend, format string, args ...any) {
	if ch.bad[key] {
		return
	}
	ch.errs = append(ch.errs, config.Problem{Line: line, Key: key, Backend: backend, Message: fmt.Sprintf(format, args...)})
}

func (ch *checker) warnf(line int, key, backend, format string, args ...any) {
	ch.warns = append(ch.warns, config.Problem{Line: line, Key: key, Backend: backend, Message: fmt.Sprintf(format, args...)})
}

func (ch *checker) notef(line int, key, backend, format string, args ...any) {
	ch.notes = append(ch.notes, config.Problem{Line: line, Key: key, Backend: backend, Message: fmt.Sprintf(format, args...)})
}

// adminKey notes a weak admin_api_key: a note, since the tutorial's own
// config carries the placeholder "change-me"; potato-server is where it is
// enforced, listening only on loopback with such a key.
func (ch *checker) adminKey() {
	if why := config.WeakAdminKey(ch.c.AdminAPIKey); why != "" {
		ch.notef(max(ch.c.AdminAPIKeyLine, 1), "admin_api_key", "", "%s: anyone who may reach the server can guess it, so potato-server listens only on loopback with it; "+
			"set a long random key (for example the output of: openssl rand -hex 32)", why)
	}
}

// line finds the line of a key of the model_training block.
func (ch *checker) line(key string) int {
	t := ch.c.Training
	if l, ok := t.Lines[key]; ok {
		return l
	}
	if t.Line > 0 {
		return t.Line
	}
	return 1
}

var (
	backendNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	splitNameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)
	deviceRE      = regexp.MustCompile(`^(auto|cpu|mps|cuda|cuda:[0-9]+)$`)
	envNameRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	memRE         = regexp.MustCompile(`^[0-9]+[KMGT]?$`)
)

func (ch *checker) training() {
	c, t := ch.c, ch.c.Training
	if _, ok := c.Backend(t.Backend); !ok {
		ch.errorf(ch.line("backend"), "model_training.backend", "", "model_training.backend is %q, which names no backend: the backends are %s", t.Backend, ch.backendNames())
	}
	nonNegative := []struct {
		key string
		v   int
	}{
		{"max_wall_seconds", t.MaxWallSeconds}, {"max_ram_mb", t.MaxRAMMB}, {"num_threads", t.NumThreads},
		{"grace_seconds", t.GraceSeconds}, {"retain_runs", t.RetainRuns},
	}
	for _, n := range nonNegative {
		if n.v < 0 {
			ch.errorf(ch.line(n.key), "model_training."+n.key, "", "model_training.%s is %d: it cannot be negative", n.key, n.v)
		}
	}
	if t.MaxPredictionsMB < 1 {
		ch.errorf(ch.line("max_predictions_mb"), "model_training.max_predictions_mb", "", "model_training.max_predictions_mb is %d: it must be at least 1", t.MaxPredictionsMB)
	}
	switch {
	case t.MaxEventsMB < 0:
		ch.errorf(ch.line("max_events_mb"), "model_training.max_events_mb", "", "model_training.max_events_mb is %d: it must be 0 (no bound) or more", t.MaxEventsMB)
	case t.MaxEventsMB == 0:
		ch.warnf(ch.line("max_events_mb"), "model_training.max_events_mb", "", "model_training.max_events_mb is 0: a run's training process, or an agent's token, may fill the annotation server's disk with events and log lines; leave it unset for 128")
	}
	if !deviceRE.MatchString(t.Device) {
		ch.errorf(ch.line("device"), "model_training.device", "", "model_training.device is %q: use auto, cpu, mps, cuda or cuda:N", t.Device)
	}
	ch.python()
	ch.serverKeys()
	if t.Aggregation != "majority" && t.Aggregation != "consensus" {
		ch.errorf(ch.line("aggregation"), "model_training.aggregation", "", "model_training.aggregation is %q: use majority or consensus", t.Aggregation)
	} else if msg := AggregationInfo(c); msg != "" {
		ch.info = append(ch.info, config.Problem{Line: ch.line("aggregation"), Key: "model_training.aggregation", Message: msg})
	}
	ch.splits()

	wl := func(k string) int {
		if l, ok := t.Writeback.Lines[k]; ok {
			return l
		}
		return ch.line("writeback")
	}
	if mc := t.Writeback.MinConfidence; mc < 0 || mc > 1 {
		ch.errorf(wl("min_confidence"), "model_training.writeback.min_confidence", "", "model_training.writeback.min_confidence is %g: it must be between 0 and 1", mc)
	}
	ch.schemas("model_training.writeback.schemas", t.Writeback.Schemas, wl("schemas"))
	if p := t.Writeback.Promote; p != config.PromoteAlways && p != config.PromoteIfBetter {
		ch.errorf(wl("promote"), "model_training.writeback.promote", "", "model_training.writeback.promote is %q: use always or if_better", p)
	}
	if m := t.Writeback.Margin; m < -1 || m > 1 {
		ch.errorf(wl("margin"), "model_training.writeback.margin", "", "model_training.writeback.margin is %g: it must be between -1 and 1 (a difference of macro-F1)", m)
	}

	ar := t.AutoRetrain
	al := func(k string) int {
		if l, ok := ar.Lines[k]; ok {
			return l
		}
		return ch.line("auto_retrain")
	}
	if ar.UpdateFrequency < 1 {
		ch.errorf(al("update_frequency"), "model_training.auto_retrain.update_frequency", "", "model_training.auto_retrain.update_frequency is %d: it must be at least 1", ar.UpdateFrequency)
	}
	if ar.MinIntervalS < 0 {
		ch.errorf(al("min_interval_s"), "model_training.auto_retrain.min_interval_s", "", "model_training.auto_retrain.min_interval_s is %d: it cannot be negative", ar.MinIntervalS)
	}
	if ar.Backend != "" {
		if _, ok := c.Backend(ar.Backend); !ok {
			ch.errorf(al("backend"), "model_training.auto_retrain.backend", "", "model_training.auto_retrain.backend is %q, which names no backend: the backends are %s", ar.Backend, ch.backendNames())
		}
	}
	ch.schemas("model_training.auto_retrain.schemas", ar.Schemas, al("schemas"))
	if ar.Enabled {
		if ar.Trainer == "" {
			ch.errorf(al("enabled"), "model_training.auto_retrain.trainer", "", "model_training.auto_retrain is enabled but names no trainer")
		}
		if len(ar.Schemas) == 0 {
			ch.errorf(al("enabled"), "model_training.auto_retrain.schemas", "", "model_training.auto_retrain is enabled but names no schemas")
		}
	}
	ch.autoParams(ar, al)
	if ar.Trainer == "decision-calibrate" {
		name := ar.Backend
		if name == "" {
			name = t.Backend
		}
		if b, ok := c.Backend(name); ok && b.Type != config.TypeLocal {
			ch.errorf(al("trainer"), "model_training.auto_retrain.trainer", "", "model_training.auto_retrain: the trainer decision-calibrate runs only on the annotation server, not on %s (%s)", b.Name, b.Type)
		}
	}
}

// python checks model_training.python, the interpreter of local runs'
// Python trainers. One this machine lacks is a warning: the built-in
// trainers and the remote backends run without it.
func (ch *checker) python() {
	t := ch.c.Training
	if _, set := t.Lines["python"]; !set {
		return
	}
	l := ch.line("python")
	switch {
	case strings.TrimSpace(t.Python) == "":
		ch.errorf(l, trainer.PythonKey, "", "%s is empty: name an interpreter, or leave the key out for python3 on PATH", trainer.PythonKey)
	case strings.HasPrefix(t.Python, "-") || strings.ContainsAny(t.Python, "\n\x00"):
		ch.errorf(l, trainer.PythonKey, "", "%s is %q, which is not an interpreter's name or path", trainer.PythonKey, t.Python)
	default:
		if err := trainer.LocalPythonOf(ch.c).Missing(); err != nil {
			ch.warnf(l, trainer.PythonKey, "", "%s: %v, so local runs of the Python trainers cannot start (the built-in trainers need no Python)", trainer.PythonKey, err)
		}
	}
}

// autoParams checks auto_retrain.trainer and auto_retrain.params as
// potato-dispatch run checks --trainer and --param: a trainer of the
// registry takes the parameters it declares, an exec: trainer any.
func (ch *checker) autoParams(ar config.AutoRetrain, al func(string) int) {
	if ar.Trainer == "" || strings.HasPrefix(ar.Trainer, trainer.ExecPrefix) {
		return
	}
	info, ok := trainer.Lookup(ar.Trainer)
	if !ok {
		ch.errorf(al("trainer"), "model_training.auto_retrain.trainer", "", "model_training.auto_retrain.trainer is %q: the trainers are %s", ar.Trainer, trainer.Choices())
		return
	}
	var names []string
	for _, p := range info.Params {
		names = append(names, p.Name)
	}
	for _, k := range slices.Sorted(maps.Keys(ar.Params)) {
		if _, ok := ar.Params[k].(map[string]any); ok {
			ch.errorf(al("params"), "model_training.auto_retrain.params", "", "model_training.auto_retrain.params: param %s is a map: give it a value, or a list for a comma-separated one", k)
			continue
		}
		_, err := info.Params.Parse(ar.Trainer, map[string]string{k: trainer.ParamString(ar.Params[k])})
		if err != nil {
			ch.errorf(al("params"), "model_training.auto_retrain.params", "", "model_training.auto_retrain.params: %v; the parameters of %s are %s", err, ar.Trainer, strings.Join(names, ", "))
		}
	}
}

// AggregationInfo says how runs of c resolve several annotators' labels
// of an item into one, and that Potato's own runs of the same config do
// the same; "" for a config without a model_training block.
func AggregationInfo(c *config.Config) string {
	t := c.Training
	if t.Line == 0 {
		return ""
	}
	_, set := t.Lines["aggregation"]
	switch {
	case t.Aggregation == "majority":
		return "model_training.aggregation is majority: runs give an item the label most of its annotators gave (the first annotator's, by folder name, on a tie), as Potato's own runs of this config do"
	case set:
		return "model_training.aggregation is consensus: runs resolve several annotators' labels of an item by Dawid-Skene, weighing each annotator by their estimated reliability, as Potato's own runs do"
	}
	return "model_training.aggregation is not set: runs resolve several annotators' labels of an item by consensus (Dawid-Skene, weighing each annotator by their estimated reliability), Potato's default, as Potato's own runs do; set it to majority for a plain vote"
}

func (ch *checker) backendNames() string {
	names := []string{"local"}
	for _, b := range ch.c.Training.Backends {
		names = append(names, b.Name)
	}
	return strings.Join(names, ", ")
}

func (ch *checker) schemas(key string, names []string, line int) {
	for _, n := range names {
		s, ok := ch.c.Scheme(n)
		switch {
		case !ok:
			var have []string
			for _, s := range ch.c.Schemes {
				have = append(have, s.Name)
			}
			ch.errorf(line, key, "", "%s names %q, which is not in annotation_schemes (%s)", key, n, strings.Join(have, ", "))
		case !s.Classification() && s.Kind != config.KindSpan:
			ch.warnf(line, key, "", "%s names %q, a %s schema: the trainers predict labels of radio, select and multiselect schemas, and hf-span spans of span schemas, only", key, n, s.AnnotationType)
		}
	}
}

func (ch *checker) splits() {
	t := ch.c.Training
	if len(t.Splits) == 0 {
		ch.errorf(ch.line("splits"), "model_training.splits", "", "model_training.splits is empty: give at least a train split")
		return
	}
	hasTrain := false
	for _, s := range t.Splits {
		key := "model_training.splits." + s.Name
		l := ch.line("splits." + s.Name)
		switch {
		case s.Name == "unlabeled":
			ch.errorf(l, key, "", "%s: the name unlabeled is kept for items nobody has labelled", key)
		case !splitNameRE.MatchString(s.Name):
			ch.errorf(l, key, "", "%s: a split name is lowercase letters, digits, _ and -", key)
		}
		if s.Fraction <= 0 {
			ch.errorf(l, key, "", "%s is %g: a split's fraction must be above 0", key, s.Fraction)
		}
		if s.Name == "train" {
			hasTrain = true
		}
	}
	if !hasTrain {
		ch.errorf(ch.line("splits"), "model_training.splits", "", "model_training.splits has no train split")
	}
}

func (ch *checker) backend(b *config.Backend) {
	p := "model_training.backends." + b.Name
	l := func(k string) int {
		if x, ok := b.Lines[k]; ok {
			return x
		}
		return b.Line
	}
	switch {
	case b.Name == "local":
		ch.errorf(b.Line, p, b.Name, "%s: the name local is the annotation server itself; give this backend another name", p)
	case !backendNameRE.MatchString(b.Name):
		ch.errorf(b.Line, p, b.Name, "%s: a backend name is letters, digits, '.', '_' and '-', starting with a letter or digit", p)
	}
	positive := func(k string, v int) {
		if _, set := b.Lines[k]; set && v < 1 {
			ch.errorf(l(k), p+"."+k, b.Name, "%s.%s is %d: it must be at least 1", p, k, v)
		}
	}
	nonNegative := func(k string, v int) {
		if v < 0 {
			ch.errorf(l(k), p+"."+k, b.Name, "%s.%s is %d: it cannot be negative", p, k, v)
		}
	}
	positive("heartbeat_timeout_s", b.HeartbeatTimeoutS)
	if b.Type == config.TypeAgent {
		positive("queue_timeout_s", b.QueueTimeoutS)
		return
	}
	if _, set := b.Lines["port"]; set && (b.Port < 1 || b.Port > 65535) {
		ch.errorf(l("port"), p+".port", b.Name, "%s.port is %d: a port is between 1 and 65535", p, b.Port)
	}
	if strings.ContainsAny(b.Host, " \t\n") || strings.HasPrefix(b.Host, "-") {
		ch.errorf(l("host"), p+".host", b.Name, "%s.host is %q, which is not a host name ssh accepts", p, b.Host)
	}
	if strings.HasPrefix(b.User, "-") {
		ch.errorf(l("user"), p+".user", b.Name, "%s.user is %q, which is not a login name", p, b.User)
	}
	if b.Python == "" {
		ch.errorf(l("python"), p+".python", b.Name, "%s.python is empty: name an interpreter", p)
	}
	nonNegative("min_free_gpu_mb", b.MinFreeGPUMB)
	nonNegative("num_threads", b.NumThreads)
	positive("max_artifact_mb", b.MaxArtifactMB)
	positive("max_fetch_mb", b.MaxFetchMB)
	for _, k := range slices.Sorted(maps.Keys(b.Env)) {
		if !envNameRE.MatchString(k) {
			ch.errorf(l("env"), p+".env", b.Name, "%s.env: %q is not an environment variable name", p, k)
		}
	}
	for _, pkg := range b.Packages {
		if strings.TrimSpace(pkg) == "" || strings.HasPrefix(pkg, "-") {
			ch.errorf(l("packages"), p+".packages", b.Name, "%s.packages: %q is not a package requirement", p, pkg)
		}
	}
	if b.Type != config.TypeSLURM {
		return
	}
	if rd := b.RemoteDir; rd != "" && path.IsAbs(rd) {
		clean := path.Clean(rd)
		for _, tmp := range []string{"/tmp", "/var/tmp"} {
			if clean == tmp || strings.HasPrefix(clean, tmp+"/") {
				ch.errorf(l("remote_dir"), p+".remote_dir", b.Name, "%s.remote_dir is %s, which is under %s: %s is local to each node, and the compute nodes must share remote_dir with the login node", p, rd, tmp, tmp)
			}
		}
	}
	if b.Time != "" {
		d, unlimited, err := config.ParseSLURMTime(b.Time)
		switch {
		case err != nil:
			ch.errorf(l("time"), p+".time", b.Name, "%s.time: %v", p, err)
		case unlimited || d > maxSLURMDuration:
			ch.warnf(l("time"), p+".time", b.Name, longTimeWarning, p+".time", b.Time)
		}
	}
	if b.Mem != "" && !memRE.MatchString(strings.ToUpper(b.Mem)) {
		ch.errorf(l("mem"), p+".mem", b.Name, "%s.mem is %q: use a size such as 16G or 4000M", p, b.Mem)
	}
	if strings.ContainsAny(b.Gres, " \t\n") {
		ch.errorf(l("gres"), p+".gres", b.Name, "%s.gres is %q: use the form sbatch accepts, such as gpu:1", p, b.Gres)
	}
	positive("cpus_per_task", b.CPUsPerTask)
	positive("poll_interval_s", b.PollIntervalS)
	for _, k := range []struct{ key, v string }{{"partition", b.Partition}, {"account", b.Account}, {"qos", b.QOS}, {"constraint", b.Constraint}} {
		if strings.ContainsAny(k.v, "\n") || strings.HasPrefix(k.v, "-") {
			ch.errorf(l(k.key), p+"."+k.key, b.Name, "%s.%s is %q, which sbatch would not read as a value", p, k.key, k.v)
		}
	}
	for _, line := range b.Prelude {
		if strings.Contains(line, "\n") {
			ch.errorf(l("prelude"), p+".prelude", b.Name, "%s.prelude: give one line per entry", p)
			break
		}
	}
}

// acknowledge splits warnings into those still standing and those an
// acknowledge entry accepts (SPEC V4). An entry matches a warning when it
// is a case-sensitive substring of the warning's text. "NAME: text", where
// NAME is a configured backend, matches text against that backend's
// warnings only. An entry under 12 characters, or one that matches
// nothing, becomes a warning itself. An entry may match a note too (an
// entry written when the note was a warning): the note moves to the
// acknowledged list, and the entry is not reported as matching nothing.
func acknowledge(c *config.Config, warnings, notes []Finding) (standing, acked, left []Finding) {
	standing, acked, left = []Finding{}, []Finding{}, []Finding{}
	nw := len(warnings)
	warnings = append(append([]Finding{}, warnings...), notes...)
	accepted := make([]string, len(warnings))
	var extra []Finding
	for _, a := range c.Acknowledge {
		text, scope := a.Text, ""
		if name, rest, ok := strings.Cut(a.Text, ": "); ok {
			if _, known := c.Backend(name); known && name != "local" {
				text, scope = rest, name
			}
		}
		if utf8.RuneCountInString(text) < ackMinChars {
			extra = append(extra, Finding{File: c.Path, Line: a.Line, Key: "validation.acknowledge", Message: fmt.Sprintf(ackTooShort, a.Text, ackMinChars)})
			continue
		}
		matched := false
		for i, w := range warnings {
			if scope != "" && w.Backend != scope {
				continue
			}
			if strings.Contains(w.Message, text) {
				matched = true
				if accepted[i] == "" {
					accepted[i] = a.Text
				}
			}
		}
		if !matched {
			extra = append(extra, Finding{File: c.Path, Line: a.Line, Key: "validation.acknowledge", Message: fmt.Sprintf(ackMatchesNone, a.Text)})
		}
	}
	for i, w := range warnings {
		switch {
		case accepted[i] != "":
			w.AcknowledgedBy = accepted[i]
			acked = append(acked, w)
		case i >= nw:
			left = append(left, w)
		default:
			standing = append(standing, w)
		}
	}
	standing = append(standing, extra...)
	sort.SliceStable(standing, func(i, j int) bool { return standing[i].Line < standing[j].Line })
	sort.SliceStable(acked, func(i, j int) bool { return acked[i].Line < acked[j].Line })
	return standing, acked, left
}

// WriteText prints the report as potato-validate does without --json:
// one "FILE:LINE: error: ..." line per finding, then the info lines, then
// a summary line, which counts the notes only when there are some (info
// lines are never counted).
func WriteText(w io.Writer, r Report, strict bool) error {
	var b strings.Builder
	for _, f := range r.Errors {
		fmt.Fprintf(&b, "%s:%d: error: %s\n", f.File, f.Line, f.Message)
	}
	for _, f := range r.Warnings {
		fmt.Fprintf(&b, "%s:%d: warning: %s\n", f.File, f.Line, f.Message)
	}
	for _, f := range r.Acknowledged {
		fmt.Fprintf(&b, "%s:%d: acknowledged: %s\n", f.File, f.Line, f.Message)
	}
	for _, f := range r.Notes {
		fmt.Fprintf(&b, "%s:%d: note: %s\n", f.File, f.Line, f.Message)
	}
	for _, f := range r.Info {
		fmt.Fprintf(&b, "%s:%d: info: %s\n", f.File, f.Line, f.Message)
	}
	verdict := "valid"
	switch {
	case len(r.Errors) > 0:
		verdict = "invalid"
	case strict && len(r.Warnings) > 0:
		verdict = "invalid under --strict"
	}
	fmt.Fprintf(&b, "%s: %s: %s, %s, %d acknowledged", r.File, verdict,
		plural(len(r.Errors), "error"), plural(len(r.Warnings), "warning"), len(r.Acknowledged))
	if len(r.Notes) > 0 {
		b.WriteString(", " + plural(len(r.Notes), "note"))
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints the report as one JSON object:
// {file, errors, warnings, acknowledged, notes, info}.
func WriteJSON(w io.Writer, r Report) error {
	return rundir.WriteJSON(w, r)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
