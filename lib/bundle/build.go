package bundle

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"potato-training/lib/config"
	"potato-training/lib/project"
)

// Build writes the bundle of a run into dir: every item of the project's
// data files that has a resolved target for one of schemas goes to its
// split; with writeback.include_unlabeled the others go to unlabeled.jsonl
// (those with votes but no target after the items without votes). Items
// are streamed; only the annotators' labels are held in memory. A build
// that fails removes dir.
func Build(cfg *config.Config, dir string, schemas []string) (Manifest, error) {
	return BuildItems(cfg, dir, schemas, nil)
}

// BuildItems is Build, calling item, when not nil, with the id of every
// row it writes.
func BuildItems(cfg *config.Config, dir string, schemas []string, item func(id string)) (Manifest, error) {
	var specs []Schema
	var schemes []config.Scheme
	for _, name := range schemas {
		s, ok := cfg.Scheme(name)
		if !ok {
			return Manifest{}, fmt.Errorf("schema %q is not in annotation_schemes", name)
		}
		schemes = append(schemes, s)
		specs = append(specs, Schema{Name: s.Name, AnnotationType: s.AnnotationType, Kind: s.Kind, Labels: s.Labels, SourceField: s.SourceField})
	}
	ann, err := project.ReadAnnotations(cfg.AnnotationDir, schemes)
	if err != nil {
		return Manifest{}, err
	}
	src := project.Source{DataFiles: cfg.DataFiles, IDKey: cfg.IDKey, TextKey: cfg.TextKey,
		AnnotationDir: cfg.AnnotationDir, Schemes: schemes, NoDuplicateCheck: true, RawText: true}
	var splits []Split
	var names []string
	for _, s := range cfg.Training.Splits {
		splits = append(splits, Split{Name: s.Name, Fraction: s.Fraction})
		names = append(names, s.Name)
	}
	unlabeled := cfg.Training.Writeback.IncludeUnlabeled
	w, err := NewWriter(dir, names, unlabeled)
	if err != nil {
		return Manifest{}, err
	}
	add := func(split string, r Row) error {
		if err := w.Add(split, r); err != nil {
			return err
		}
		if item != nil {
			item(r.InstanceID)
		}
		return nil
	}
	fail := func(err error) (Manifest, error) {
		w.Abort()
		os.RemoveAll(dir)
		return Manifest{}, err
	}
	// One reading of the data files, where there were two. Potato
	// resolves the votes on the data files' items only (consensus would
	// otherwise weigh votes on items no longer there), so the items with
	// votes wait in a file in the bundle's directory until every item is
	// read and the votes resolved; the others go to unlabeled.jsonl at
	// once. Memory stays flat as items grow.
	voted, err := newItemSpill(dir)
	if err != nil {
		return fail(err)
	}
	defer voted.remove() // again, on an error: a second remove does nothing
	inData := map[string]struct{}{}
	skipped := 0
	err = project.EachItem(src, func(it project.Item) error {
		if ann.Has(it.ID) {
			inData[it.ID] = struct{}{}
			return voted.add(it)
		}
		if unlabeled {
			return add(UnlabeledSplit, Row{InstanceID: it.ID, Text: it.Text, TextJSON: it.TextJSON})
		}
		skipped++
		return nil
	})
	if err != nil {
		return fail(err)
	}
	ann.Retain(func(id string) bool { _, ok := inData[id]; return ok })
	res, err := ann.Resolve(cfg.Training.Aggregation)
	if err != nil {
		return fail(err)
	}
	seed := int64(cfg.Training.SplitSeed)
	// Only labelled ids are checked for duplicates: that set is as large as
	// the labels already in memory, so memory stays flat as items grow.
	labelled := map[string]struct{}{}
	err = voted.each(func(it project.Item) error {
		var targets map[string]any
		for _, s := range schemes {
			if t, ok := res.Target(it.ID, s.Name); ok {
				if targets == nil {
					targets = make(map[string]any, len(schemes))
				}
				targets[s.Name] = t
			}
		}
		if targets == nil {
			if unlabeled {
				return add(UnlabeledSplit, Row{InstanceID: it.ID, Text: it.Text})
			}
			skipped++
			return nil
		}
		if _, dup := labelled[it.ID]; dup {
			return fmt.Errorf("item id %q appears twice in the data files", it.ID)
		}
		labelled[it.ID] = struct{}{}
		return add(SplitOf(seed, it.ID, splits), Row{InstanceID: it.ID, Text: it.Text, Targets: targets})
	})
	if err != nil {
		return fail(err)
	}
	voted.remove()
	m, err := w.Close(Manifest{
		Schemas:     specs,
		Modality:    "text",
		TextKey:     cfg.TextKey,
		SplitSeed:   seed,
		Aggregation: cfg.Training.Aggregation,
		Stats:       Stats{NSkippedNoLabel: skipped},
	})
	if err != nil {
		// Half a bundle is of no use, and on a full disk it keeps the
		// disk full for the run's own end and for Potato.
		os.RemoveAll(dir)
	}
	return m, err
}

// itemSpill holds items in a hidden temporary file, in order, as JSON
// lines of id and text; Build removes it before it closes the bundle.
type itemSpill struct {
	f   *os.File
	buf *bufio.Writer
	enc *json.Encoder
}

type spilledItem struct {
	ID   string          `json:"id"`
	Text json.RawMessage `json:"text"` // a JSON string
}

func newItemSpill(dir string) (*itemSpill, error) {
	// Hidden, and not *.jsonl: no split file's name.
	f, err := os.CreateTemp(dir, ".voted-items-*")
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	s := &itemSpill{f: f, buf: bufio.NewWriterSize(f, 1<<20)}
	s.enc = json.NewEncoder(s.buf)
	s.enc.SetEscapeHTML(false)
	return s, nil
}

func (s *itemSpill) add(it project.Item) error {
	text := it.TextJSON
	if text == nil {
		var err error
		if text, err = json.Marshal(it.Text); err != nil {
			return fmt.Errorf("bundle: item %q: %w", it.ID, err)
		}
	}
	if err := s.enc.Encode(spilledItem{it.ID, text}); err != nil {
		return fmt.Errorf("bundle: %s: %w", s.f.Name(), err)
	}
	return nil
}

// each calls fn with the items added, in order.
func (s *itemSpill) each(fn func(project.Item) error) error {
	if err := s.buf.Flush(); err != nil {
		return fmt.Errorf("bundle: %s: %w", s.f.Name(), err)
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("bundle: %s: %w", s.f.Name(), err)
	}
	dec := json.NewDecoder(bufio.NewReaderSize(s.f, 1<<20))
	for {
		var it spilledItem
		if err := dec.Decode(&it); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("bundle: %s: %w", s.f.Name(), err)
		}
		var text string
		if err := json.Unmarshal(it.Text, &text); err != nil {
			return fmt.Errorf("bundle: %s: %w", s.f.Name(), err)
		}
		if err := fn(project.Item{ID: it.ID, Text: text}); err != nil {
			return err
		}
	}
}

func (s *itemSpill) remove() {
	s.f.Close()
	os.Remove(s.f.Name())
}
