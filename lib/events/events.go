// Package events implements the v1 event stream of a training process,
// described in potato-events(5): JSON Lines {"v":1,"event":E,"t":...}.
package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"
	"unicode/utf8"
)

// Event kinds.
const (
	KindStatus   = "status"
	KindProgress = "progress"
	KindMetric   = "metric"
	KindLog      = "log"
	KindArtifact = "artifact"
	KindResult   = "result"
	KindError    = "error"
)

var known = map[string]bool{KindStatus: true, KindProgress: true, KindMetric: true, KindLog: true,
	KindArtifact: true, KindResult: true, KindError: true}

// MaxLine bounds one event line; a longer line is not an event.
const MaxLine = 1 << 20

// Bounds of a run's metric series (potato-events(5)): a series is a split
// and a name. The dispatch keeps the metric events of the first MaxSeries
// series a run sends, and of none whose split or name is longer than
// MaxMetricName bytes; the run page's reader keeps no more either. A
// trainer that names a new series with every event (a step or a time in
// the name) would otherwise make a series of every event: a run page's
// answer of megabytes, and as many charts.
const (
	MaxSeries     = 256
	MaxMetricName = 256
)

// Event is one v1 event. Fields holds every member other than v, event
// and t, as decoded JSON (numbers are float64).
type Event struct {
	Kind   string
	T      float64
	Fields map[string]any
}

// ErrNotEvent is wrapped by Parse for a line that is not a v1 event: such
// a line is the process's own output, kept as log.
var ErrNotEvent = errors.New("not a v1 event")

// Parse decodes one line. A line that is not a JSON object with "v": 1 and
// a known "event", in UTF-8 and at most MaxLine bytes, gives an error
// wrapping ErrNotEvent.
func Parse(line []byte) (Event, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return Event{}, fmt.Errorf("%w: not a JSON object", ErrNotEvent)
	}
	if len(line) > MaxLine {
		return Event{}, fmt.Errorf("%w: longer than %d bytes", ErrNotEvent, MaxLine)
	}
	// encoding/json would take invalid UTF-8 in a string for U+FFFD; a
	// writer of events writes UTF-8 (or escapes), so such a line is not
	// one of its events.
	if !utf8.Valid(line) {
		return Event{}, fmt.Errorf("%w: not valid UTF-8", ErrNotEvent)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrNotEvent, err)
	}
	if v, _ := m["v"].(float64); v != 1 {
		return Event{}, fmt.Errorf("%w: \"v\" is not 1", ErrNotEvent)
	}
	kind, _ := m["event"].(string)
	if !known[kind] {
		return Event{}, fmt.Errorf("%w: unknown event %q", ErrNotEvent, kind)
	}
	t, _ := m["t"].(float64)
	delete(m, "v")
	delete(m, "event")
	delete(m, "t")
	return Event{Kind: kind, T: t, Fields: m}, nil
}

// MarshalJSON writes v, event and t first, then the fields by name.
func (e Event) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"v":1,"event":%q,"t":%s`, e.Kind, formatTime(e.T))
	keys := make([]string, 0, len(e.Fields))
	for k := range e.Fields {
		if k != "v" && k != "event" && k != "t" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := json.Marshal(e.Fields[k])
		if err != nil {
			return nil, fmt.Errorf("event field %q: %w", k, err)
		}
		kb, _ := json.Marshal(k)
		b.WriteByte(',')
		b.Write(kb)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func formatTime(t float64) string {
	return fmt.Sprintf("%.3f", t)
}

// Line is the event as one line, newline included.
func (e Event) Line() []byte {
	b, err := e.MarshalJSON()
	if err != nil {
		b, _ = Log("error", "unencodable event: "+err.Error()).MarshalJSON()
	}
	return append(b, '\n')
}

// String returns a string field, or "".
func (e Event) String(key string) string {
	s, _ := e.Fields[key].(string)
	return s
}

// Number returns a number field, or 0.
func (e Event) Number(key string) float64 {
	x, _ := e.Fields[key].(float64)
	return x
}

// Decode fills v (a pointer to a struct with json tags) from the fields.
func (e Event) Decode(v any) error {
	b, err := json.Marshal(e.Fields)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// now is replaced in tests.
var now = time.Now

func stamp() float64 { return float64(now().UnixMilli()) / 1000 }

func mk(kind string, fields map[string]any) Event {
	return Event{Kind: kind, T: stamp(), Fields: fields}
}

// Status is {state, step}: the phase the process is in, and the step line.
func Status(state, step string) Event {
	return mk(KindStatus, map[string]any{"state": state, "step": step})
}

// Progress is {phase, current, total, eta_s}; eta_s < 0 is left out.
func Progress(phase string, current, total float64, etaS float64) Event {
	f := map[string]any{"phase": phase, "current": current, "total": total}
	if etaS >= 0 {
		f["eta_s"] = etaS
	}
	return mk(KindProgress, f)
}

// Metric is {split, name, value, step}.
func Metric(split, name string, value float64, step int) Event {
	return mk(KindMetric, map[string]any{"split": split, "name": name, "value": value, "step": step})
}

// Log is {level, msg}.
func Log(level, msg string) Event {
	return mk(KindLog, map[string]any{"level": level, "msg": msg})
}

// Artifact is {path, bytes}.
func Artifact(path string, bytes int64) Event {
	return mk(KindArtifact, map[string]any{"path": path, "bytes": bytes})
}

// Result is what a process that finished reports.
type Result struct {
	Status          string              `json:"status"`
	ModelVersion    string              `json:"model_version,omitempty"`
	Metrics         map[string]float64  `json:"metrics,omitempty"`
	LabelOrder      map[string][]string `json:"label_order,omitempty"`
	PredictionsFile string              `json:"predictions_file,omitempty"`
	NPredictions    int                 `json:"n_predictions"`
	// Precision is what a torch trainer trained in: fp32, bf16 or fp16.
	Precision string `json:"precision,omitempty"`
}

// ResultEvent makes the result event of r.
func ResultEvent(r Result) Event {
	var f map[string]any
	b, _ := json.Marshal(r)
	_ = json.Unmarshal(b, &f)
	return mk(KindResult, f)
}

// Failure is the body of an error event.
type Failure struct {
	Code        string `json:"code"`
	Message     string `json:"message"`
	InstallHint string `json:"install_hint,omitempty"`
}

// Error codes of Potato's trainers (FORMATS.md).
const (
	CodeMissingDependency = "missing_dependency"
	CodeUnknownTrainer    = "unknown_trainer"
	CodeBadBundle         = "bad_bundle"
	CodeValidationFailed  = "validation_failed"
	CodeOutOfMemory       = "out_of_memory"
	CodeFitFailed         = "fit_failed"
	CodeBadSpec           = "bad_spec"
	CodeCancelled         = "cancelled"
)

// ErrorEvent makes an error event.
func ErrorEvent(code, message, hint string) Event {
	f := map[string]any{"code": code, "message": message}
	if hint != "" {
		f["install_hint"] = hint
	}
	return mk(KindError, f)
}

// Exit codes of a training process (potato-events(5)).
const (
	ExitFinished          = 0
	ExitUnexpected        = 1
	ExitBadSpec           = 2
	ExitMissingDependency = 3
	ExitCancelled         = 4
	ExitOutOfMemory       = 5
)

// Writer writes events, one whole line per write, safe for concurrent use.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
	t  *Throttle // nil: every event is written
}

// NewWriter writes events to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// NewThrottledWriter writes events to w through a Throttle of every:
// progress and metric events at a human rate, the last ones always.
// Close it (or Flush it) to write what it holds.
func NewThrottledWriter(w io.Writer, every time.Duration) *Writer {
	tw := &Writer{w: w}
	tw.t = NewThrottle(every, tw.write)
	return tw
}

// Emit writes one event (for a throttled writer: now, later or never,
// when a newer one of its kind replaces it).
func (w *Writer) Emit(e Event) error {
	if w.t != nil {
		return w.t.Emit(e)
	}
	return w.write(e)
}

func (w *Writer) write(e Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err := w.w.Write(e.Line())
	return err
}

// Flush writes what a throttled writer holds.
func (w *Writer) Flush() error {
	if w.t != nil {
		return w.t.Flush()
	}
	return nil
}

// Close writes what a throttled writer holds; it writes nothing after.
// It does not close the underlying writer.
func (w *Writer) Close() error {
	if w.t != nil {
		return w.t.Close()
	}
	return nil
}
