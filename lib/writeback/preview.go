package writeback

import (
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"strings"
	"time"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

// SchemaPreview is what publishing a run would do to one schema's
// prelabels, counted in (item, schema) prelabels, from the store as it is
// when the preview is made.
type SchemaPreview struct {
	Schema string `json:"schema"`
	// Added: items with no prelabel now that would get one.
	Added int `json:"added"`
	// Changed: items whose prelabel would get other labels.
	Changed int `json:"changed"`
	// Removed: prelabels the write-back would delete. Publishing never
	// deletes a prelabel (retracting a run does), so it is 0; it is
	// counted so that a reader does not have to know that.
	Removed int `json:"removed"`
	// Kept: items whose prelabel would keep its labels; the row is
	// rewritten with this run's id and confidence.
	Kept int `json:"kept"`
	// Untouched: prelabels of other runs that this run makes no prediction
	// for (or none that passes the gates); they stay as they are.
	Untouched int `json:"untouched"`
	// HeldByNewerRun: predictions that pass the gates but that a run
	// created later already holds; its prelabels stay.
	HeldByNewerRun int `json:"held_by_newer_run"`
	// LabeledTouched: of the added and changed prelabels, those on items
	// that at least one annotator has labelled in this schema now.
	LabeledTouched int `json:"labeled_touched"`
}

// Preview is what Publish would do with the same arguments, without
// writing: the counts of its Report, and per schema of opt.Schemas the
// prelabels it would add, change and keep.
type Preview struct {
	RunID   string          `json:"run_id"`
	Report  Report          `json:"report"`
	Schemas []SchemaPreview `json:"schemas"`
}

// current is the part of a stored prelabel a preview compares.
type current struct {
	label     uint64 // the hash of its labelKey
	createdAt float64
}

// next is what the run would store for an item.
type next struct {
	label   uint64
	labeled bool
}

// labeler reads what an annotator sees of a prelabel, its label names,
// as a hash: confidence is not part of it. A payload whose labels cannot
// be read stands for itself.
type labeler struct {
	seed maphash.Seed
	raw  [][]byte
}

var labelField = []string{"label"}

func (l *labeler) key(kind config.Kind, payload []byte) uint64 {
	// A span prelabel stays the same when its spans do (spans.go).
	if kind == config.KindSpan {
		return maphash.String(l.seed, "spans:"+predictedSpans(payload))
	}
	// The common case, {"label": NAME, ...} of a schema that is not
	// multilabel, without decoding the whole payload.
	if kind != config.KindMultilabel && len(payload) > 0 && payload[0] == '{' &&
		scanObject(payload, labelField, l.raw) == nil && len(l.raw[0]) > 0 && l.raw[0][0] == '"' {
		if name, err := stringValue(l.raw[0], "label"); err == nil {
			return maphash.String(l.seed, "labels:"+name)
		}
	}
	if names, ok := PrelabelLabels(kind, payload); ok {
		return maphash.String(l.seed, "labels:"+strings.Join(names, "\x00"))
	}
	return maphash.Bytes(l.seed, append([]byte("payload:"), payload...))
}

// Preview says what Publish(bundleDir, predictionsPath, opt) would do now,
// and writes nothing. It judges each line as Publish does (gates.judge:
// refusal, the train split, opt.Schemas, opt.MinConfidence), applies the
// same rule for a row a later run holds, and, when a file predicts an
// (item, schema) twice, counts the last line, as Publish does. A prelabel is kept when its label names stay
// the same, whatever its confidence. labeled tells whether an annotator
// has labelled the item in the schema now; nil counts none.
//
// Items are held as 64-bit hashes, the prelabels of opt.Schemas now in the
// store and the run's predictions one short entry each: a collision of two
// item ids, about one chance in thirty million for a million items, would
// count one prelabel in the wrong column.
func (s *Store) Preview(bundleDir, predictionsPath string, opt Options, labeled func(item, schema string) bool) (Preview, error) {
	if opt.CreatedAt == 0 {
		opt.CreatedAt = float64(time.Now().UnixNano()) / 1e9
	}
	fail := func(err error) (Preview, error) {
		return Preview{}, fmt.Errorf("writeback: preview of run %q: %w", opt.RunID, err)
	}
	g, err := readGates(bundleDir, opt)
	if err != nil {
		return fail(err)
	}
	pv := newPreviewer(bundleDir, g, labeled)
	now, err := s.storedNow(pv, opt)
	if err != nil {
		return fail(err)
	}
	var p predLine
	err = scanLines(predictionsPath, func(line []byte, n int) error {
		if err := p.parse(line); err != nil {
			return err
		}
		return pv.add(&p, n)
	})
	if err != nil {
		return fail(err)
	}
	return pv.result(opt, now), nil
}

// previewer is Preview's reading of the predictions, one line at a time:
// what the run would store for each (item, schema) that passes the gates.
type previewer struct {
	g       *gates
	kind    func(schema string) config.Kind
	lab     *labeler
	labeled func(item, schema string) bool
	rep     Report
	// nexts[schema][item] is what the run would store.
	nexts map[string]map[uint64]next
	// kept, when not nil, keeps what the run would store, for a publish
	// with the same gates or fewer schemas (RunReading.Publish), and low
	// counts by schema the predictions below min_confidence.
	kept *prelabelSet
	low  map[string]int
}

func newPreviewer(bundleDir string, g *gates, labeled func(item, schema string) bool) *previewer {
	pv := &previewer{g: g, labeled: labeled, nexts: map[string]map[uint64]next{},
		lab: &labeler{seed: maphash.MakeSeed(), raw: make([][]byte, 1)}}
	pv.kind = func(schema string) config.Kind {
		if g.multi[schema] {
			return config.KindMultilabel
		}
		return config.KindNominal
	}
	if m, err := bundle.ReadManifest(bundleDir); err == nil {
		known := map[string]config.Kind{}
		for _, sc := range m.Schemas {
			known[sc.Name] = sc.Kind
		}
		pv.kind = func(schema string) config.Kind { return known[schema] }
	}
	return pv
}

func (pv *previewer) item(id string) uint64 { return maphash.String(pv.lab.seed, id) }

// add judges line n, which p has parsed.
func (pv *previewer) add(p *predLine, n int) error {
	low := pv.rep.NSkippedLowConfidence
	raw, confidence, ok, err := pv.g.judgeParsed(p, n, &pv.rep)
	if pv.rep.NSkippedLowConfidence > low && pv.low != nil {
		pv.low[p.schema]++
	}
	if !ok {
		return err
	}
	if pv.kept != nil {
		pv.kept.add(p.id, p.schema, raw, confidence)
	}
	m := pv.nexts[p.schema]
	if m == nil {
		m = map[uint64]next{}
		pv.nexts[p.schema] = m
	}
	m[pv.item(p.id)] = next{pv.lab.key(pv.kind(p.schema), raw), pv.labeled != nil && pv.labeled(p.id, p.schema)}
	return nil
}

// storedNow reads the prelabels of the schemas the gates enable that the
// store holds now.
func (s *Store) storedNow(pv *previewer, opt Options) (map[string]map[uint64]current, error) {
	now := map[string]map[uint64]current{}
	for _, name := range slices.Sorted(maps.Keys(pv.g.enabled)) {
		rows := map[uint64]current{}
		k := pv.kind(name)
		err := s.SchemaPrelabels(opt.Project, name, func(p StoredPrelabel) error {
			rows[pv.item(p.InstanceID)] = current{pv.lab.key(k, []byte(p.Payload)), p.CreatedAt}
			return nil
		})
		if err != nil {
			return nil, err
		}
		now[name] = rows
	}
	return now, nil
}

// result compares what the run would store with what the store holds.
func (pv *previewer) result(opt Options, now map[string]map[uint64]current) Preview {
	out := Preview{RunID: opt.RunID, Report: pv.rep}
	for _, name := range slices.Sorted(maps.Keys(pv.g.enabled)) {
		sp := SchemaPreview{Schema: name}
		rows := now[name]
		for id, n := range pv.nexts[name] {
			cur, has := rows[id]
			switch {
			case has && cur.createdAt > opt.CreatedAt:
				sp.HeldByNewerRun++
				continue
			case !has:
				sp.Added++
			case cur.label == n.label:
				sp.Kept++
				continue
			default:
				sp.Changed++
			}
			if n.labeled {
				sp.LabeledTouched++
			}
		}
		for id := range rows {
			if _, ok := pv.nexts[name][id]; !ok {
				sp.Untouched++
			}
		}
		out.Report.NWritten += sp.Added + sp.Changed + sp.Kept
		out.Report.NSkippedNewerRun += sp.HeldByNewerRun
		out.Schemas = append(out.Schemas, sp)
	}
	return out
}

// String says it in one line a schema, as the run log and potato-dispatch
// writeback --dry-run print it.
func (sp SchemaPreview) String() string {
	s := fmt.Sprintf("%s: %d added, %d changed, %d removed, %d kept", sp.Schema, sp.Added, sp.Changed, sp.Removed, sp.Kept)
	s += fmt.Sprintf("; %d of the added and changed on items annotators have labelled", sp.LabeledTouched)
	if sp.Untouched > 0 {
		s += fmt.Sprintf("; %d prelabels of other runs left as they are", sp.Untouched)
	}
	if sp.HeldByNewerRun > 0 {
		s += fmt.Sprintf("; %d not written, held by a newer run", sp.HeldByNewerRun)
	}
	return s
}
