package bundle

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"potato-training/lib/config"
)

// Row is one item of a split file.
type Row struct {
	InstanceID string
	Text       string
	// TextJSON, when set, is the text as a JSON string to copy into the
	// row as it is, in place of Text: one that encoding/json's decoder
	// reads as the encoder would have written Text (project.Item's
	// TextJSON is).
	TextJSON []byte
	// Targets maps a schema name to its target (FORMATS.md, "Targets per
	// kind"). Unlabeled rows have none.
	Targets map[string]any
	// Media is the path of the item's media file on disk, if it has one.
	Media string
}

// rowJSON is a row as <split>.jsonl holds it.
type rowJSON struct {
	InstanceID   string         `json:"instance_id"`
	Text         string         `json:"text"`
	Targets      map[string]any `json:"targets"`
	Media        string         `json:"media,omitempty"`
	MediaMissing bool           `json:"media_missing,omitempty"`
}

const (
	// maxLabels bounds the distinct labels kept for one schema, so a schema
	// whose targets are free text cannot grow the writer's memory.
	maxLabels = 10000
	// maxWarnings bounds the warnings kept; the rest are counted.
	maxWarnings = 100
)

// Writer writes a bundle one row at a time. Rows go straight to buffered
// split files, so memory does not grow with the number of rows. A Writer is
// not safe for concurrent use.
type Writer struct {
	dir    string
	order  []string // split names in config order, then "unlabeled"
	splits map[string]*splitWriter
	buf    bytes.Buffer
	enc    *json.Encoder

	labels   map[string]map[string]struct{}
	full     map[string]bool // schemas that hit maxLabels
	linked   int
	missing  int
	warnings []string
	dropped  int
	buckets  [256]bool // media/<xx> directories made so far
	err      error     // a failed write: the split files are no longer whole
	closed   bool
}

type splitWriter struct {
	path string // relative to the bundle
	f    *os.File
	bw   *bufio.Writer
	n    int
}

// NewWriter creates the bundle directory dir, which must be absent or
// empty, with one empty <split>.jsonl for each name in splitNames, in
// order, and unlabeled.jsonl when includeUnlabeled is set. Split names
// must be plain file names; "unlabeled" is reserved.
func NewWriter(dir string, splitNames []string, includeUnlabeled bool) (*Writer, error) {
	if len(splitNames) == 0 {
		return nil, errors.New("bundle: no splits")
	}
	seen := map[string]bool{}
	for _, s := range splitNames {
		switch {
		case s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\\\x00"):
			return nil, fmt.Errorf("bundle: split name %q is not a plain file name", s)
		case s == UnlabeledSplit:
			return nil, fmt.Errorf("bundle: split name %q is reserved", s)
		case seen[s]:
			return nil, fmt.Errorf("bundle: split %q is listed twice", s)
		}
		seen[s] = true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	if empty, err := isEmptyDir(dir); err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	} else if !empty {
		return nil, fmt.Errorf("bundle: %q is not empty", dir)
	}
	w := &Writer{
		dir:    dir,
		splits: map[string]*splitWriter{},
		labels: map[string]map[string]struct{}{},
		full:   map[string]bool{},
	}
	w.enc = json.NewEncoder(&w.buf)
	w.enc.SetEscapeHTML(false)
	names := append([]string(nil), splitNames...)
	if includeUnlabeled {
		names = append(names, UnlabeledSplit)
	}
	for _, s := range names {
		p := s + ".jsonl"
		f, err := os.OpenFile(filepath.Join(dir, p), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			w.closeFiles()
			return nil, fmt.Errorf("bundle: %w", err)
		}
		w.order = append(w.order, s)
		w.splits[s] = &splitWriter{path: p, f: f, bw: bufio.NewWriterSize(f, 64<<10)}
	}
	return w, nil
}

// Add appends r to split, one JSON line. When r.Media is set the file is
// linked into media/ (a hard link, else a symlink, else a copy) and the row
// names it; a media file that is not there is recorded as media_missing.
// An error from encoding or from media leaves the bundle as it was; an
// error writing a split file is returned again by every later call.
func (w *Writer) Add(split string, r Row) error {
	if w.closed {
		return errors.New("bundle: Add after Close")
	}
	if w.err != nil {
		return w.err
	}
	sw := w.splits[split]
	if sw == nil {
		return fmt.Errorf("bundle: %q is not a split of this bundle", split)
	}
	if r.TextJSON != nil && r.Media == "" {
		return w.addRaw(sw, r)
	}
	row := rowJSON{InstanceID: r.InstanceID, Text: r.Text, Targets: r.Targets}
	if row.Targets == nil {
		row.Targets = map[string]any{}
	}
	if r.Media != "" {
		rel, err := w.placeMedia(r.Media)
		if err != nil {
			return err
		}
		row.Media = rel
		row.MediaMissing = rel == ""
	}
	w.buf.Reset()
	if err := w.enc.Encode(&row); err != nil {
		return fmt.Errorf("bundle: item %q: %w", r.InstanceID, err)
	}
	if _, err := sw.bw.Write(w.buf.Bytes()); err != nil {
		w.err = fmt.Errorf("bundle: writing %s: %w", sw.path, err)
		return w.err
	}
	sw.n++
	switch {
	case row.MediaMissing:
		w.missing++
	case row.Media != "":
		w.linked++
	}
	w.observe(r.Targets)
	return nil
}

// addRaw is Add of a row without media whose text is r.TextJSON: the
// fields of rowJSON in its order, the text copied as it is.
func (w *Writer) addRaw(sw *splitWriter, r Row) error {
	targets := r.Targets
	if targets == nil {
		targets = map[string]any{}
	}
	w.buf.Reset()
	w.buf.WriteString(`{"instance_id":`)
	if err := w.enc.Encode(r.InstanceID); err != nil {
		return fmt.Errorf("bundle: item %q: %w", r.InstanceID, err)
	}
	w.buf.Truncate(w.buf.Len() - 1) // Encode's newline
	w.buf.WriteString(`,"text":`)
	w.buf.Write(r.TextJSON)
	w.buf.WriteString(`,"targets":`)
	if err := w.enc.Encode(targets); err != nil {
		return fmt.Errorf("bundle: item %q: %w", r.InstanceID, err)
	}
	w.buf.Truncate(w.buf.Len() - 1)
	w.buf.WriteString("}\n")
	if _, err := sw.bw.Write(w.buf.Bytes()); err != nil {
		w.err = fmt.Errorf("bundle: writing %s: %w", sw.path, err)
		return w.err
	}
	sw.n++
	w.observe(r.Targets)
	return nil
}

// observe records the labels a row's targets use: a nominal target's
// string and each string of a multilabel target's list.
func (w *Writer) observe(targets map[string]any) {
	for schema, v := range targets {
		switch t := v.(type) {
		case string:
			w.addLabel(schema, t)
		case []string:
			for _, s := range t {
				w.addLabel(schema, s)
			}
		case []any:
			for _, e := range t {
				if s, ok := e.(string); ok {
					w.addLabel(schema, s)
				}
			}
		}
	}
}

func (w *Writer) addLabel(schema, label string) {
	set := w.labels[schema]
	if set == nil {
		set = map[string]struct{}{}
		w.labels[schema] = set
	}
	if _, ok := set[label]; ok || w.full[schema] {
		return
	}
	if len(set) >= maxLabels {
		w.full[schema] = true
		w.warn("schema %q: more than %d distinct labels; the manifest lists the first %d seen", schema, maxLabels, maxLabels)
		return
	}
	set[label] = struct{}{}
}

func (w *Writer) warn(format string, args ...any) {
	if len(w.warnings) >= maxWarnings {
		w.dropped++
		return
	}
	w.warnings = append(w.warnings, fmt.Sprintf(format, args...))
}

// Close finishes the bundle: it flushes and syncs the split files, then
// writes manifest.json atomically. m carries what the caller knows
// (schemas, modality, text_key, split_seed, aggregation,
// stats.n_skipped_no_label, stats.warnings); Close fills in v, splits,
// labels, media_dir, the other stats and digest, and returns the manifest
// it wrote. Labels lists, for each schema, the labels the rows used,
// sorted; a classification schema of m.Schemas gets an entry even when
// empty, and a schema m.Schemas declares with another kind gets none.
func (w *Writer) Close(m Manifest) (Manifest, error) {
	if w.closed {
		return Manifest{}, errors.New("bundle: Close called twice")
	}
	w.closed = true
	err := w.err
	for _, s := range w.order {
		sw := w.splits[s]
		if err == nil {
			err = sw.bw.Flush()
		}
		if err == nil {
			err = sw.f.Sync()
		}
		if cerr := sw.f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("bundle: %w", err)
	}

	m.V = 1
	m.MediaDir = MediaDir
	// A copy, so that filling in empty label lists leaves the caller's
	// schemas alone.
	m.Schemas = append([]Schema{}, m.Schemas...)
	for i := range m.Schemas {
		if m.Schemas[i].Labels == nil {
			m.Schemas[i].Labels = []string{}
		}
	}
	m.Splits = make(map[string]SplitFile, len(w.order))
	m.Stats.Splits = make(map[string]int, len(w.order))
	m.Stats.NAnnotated = 0
	paths := make([]string, 0, len(w.order))
	for _, s := range w.order {
		sw := w.splits[s]
		m.Splits[s] = SplitFile{Path: sw.path, Format: "jsonl", N: sw.n}
		m.Stats.Splits[s] = sw.n
		if s != UnlabeledSplit {
			m.Stats.NAnnotated += sw.n
		}
		paths = append(paths, sw.path)
	}
	m.Stats.NItems = m.Stats.NSkippedNoLabel
	for _, n := range m.Stats.Splits {
		m.Stats.NItems += n
	}
	m.Stats.NMediaLinked = w.linked
	m.Stats.NMediaMissing = w.missing
	m.Stats.Warnings = append(append([]string{}, m.Stats.Warnings...), w.warnings...)
	if w.dropped > 0 {
		m.Stats.Warnings = append(m.Stats.Warnings, fmt.Sprintf("%d more warnings not shown", w.dropped))
	}
	m.Labels = w.labelLists(m.Schemas)

	if m.Digest, _, err = digest(w.dir, paths); err != nil {
		return Manifest{}, err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Manifest{}, fmt.Errorf("bundle: manifest: %w", err)
	}
	if err := writeFileAtomic(w.dir, ManifestName, append(b, '\n')); err != nil {
		return Manifest{}, fmt.Errorf("bundle: %w", err)
	}
	return m, nil
}

func (w *Writer) labelLists(schemas []Schema) map[string][]string {
	kinds := make(map[string]config.Kind, len(schemas))
	for _, s := range schemas {
		kinds[s.Name] = s.Kind
	}
	classification := func(k config.Kind) bool {
		return k == config.KindNominal || k == config.KindMultilabel
	}
	out := map[string][]string{}
	for schema, set := range w.labels {
		if k, ok := kinds[schema]; ok && !classification(k) {
			continue
		}
		list := make([]string, 0, len(set))
		for l := range set {
			list = append(list, l)
		}
		sort.Strings(list)
		out[schema] = list
	}
	for _, s := range schemas {
		if _, ok := out[s.Name]; !ok && classification(s.Kind) {
			out[s.Name] = []string{}
		}
	}
	return out
}

func (w *Writer) closeFiles() {
	for _, sw := range w.splits {
		sw.f.Close()
	}
}

func isEmptyDir(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	if err == io.EOF {
		return true, nil
	}
	return false, err
}

// Abort closes the split files of a bundle that will not be finished; the
// caller removes the directory.
func (w *Writer) Abort() { w.closeFiles() }
