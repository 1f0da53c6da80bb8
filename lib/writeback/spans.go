package writeback

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

// A span schema's target is a list of spans, {schema, name, title, start,
// end, id} (FORMATS.md), and its prediction's payload the list of spans
// that Potato 2.12 renders as a span pre-annotation, {start, end, label,
// confidence}: characters [start, end) of the item's text, as Potato
// counts them. Score compares them two ways:
//
//   - exact: a predicted span is right when a gold span of the item has
//     its start, its end and its label;
//   - overlap: when a gold span of the item has its label and shares a
//     character with it; each gold span is matched once, to the first
//     prediction of its label, in text order, that overlaps it and is not
//     matched yet.
//
// Precision is the right predicted spans over the predicted ones, recall
// the matched gold spans over the gold ones, per label and over all
// (micro); MacroF1 is the mean F1 of the labels with a gold or predicted
// span. SchemaScore of a span schema gives the exact figures (MacroF1,
// MicroF1, Labels; Accuracy the items whose predicted spans are their gold
// spans exactly) and both in Spans; the gate compares exact MacroF1.

// String says the figures in a line of the run log.
func (s *SpanScore) String() string {
	return fmt.Sprintf("exact-match precision %.3f, recall %.3f, F1 %.3f (macro-F1 %.3f); overlap precision %.3f, recall %.3f, F1 %.3f (macro-F1 %.3f), over %d gold and %d predicted spans",
		s.Exact.Precision, s.Exact.Recall, s.Exact.F1, s.Exact.MacroF1, s.Overlap.Precision, s.Overlap.Recall, s.Overlap.F1, s.Overlap.MacroF1, s.Exact.Gold, s.Exact.Predicted)
}

// spanKey is one span as the scores compare them.
type spanKey struct {
	Start, End int
	Label      string
}

// SpanScore is a span schema's held-out figures, exact and by overlap.
type SpanScore struct {
	Exact   SpanMatch `json:"exact"`
	Overlap SpanMatch `json:"overlap"`
}

// SpanMatch is the figures of one way of matching spans: over all spans
// (micro) and per label (TN is 0: a span schema has no negatives to
// count).
type SpanMatch struct {
	Gold      int            `json:"gold"`
	Predicted int            `json:"predicted"`
	Precision float64        `json:"precision"`
	Recall    float64        `json:"recall"`
	F1        float64        `json:"f1"`
	MacroF1   float64        `json:"macro_f1"`
	Labels    []LabelFigures `json:"labels"`
}

// spanList reads spans from JSON: a list of objects with integer start and
// end and a name or label (a target's name, a prediction's label). ok is
// false for any other form; a span with end not after start, a negative
// start or no label is an error.
func spanList(raw []byte) ([]spanKey, error) {
	var list []struct {
		Start *float64 `json:"start"`
		End   *float64 `json:"end"`
		Name  string   `json:"name"`
		Label string   `json:"label"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("not a list of spans: %w", err)
	}
	out := make([]spanKey, 0, len(list))
	for i, s := range list {
		l := s.Name
		if l == "" {
			l = s.Label
		}
		switch {
		case s.Start == nil || s.End == nil:
			return nil, fmt.Errorf("span %d has no start or end", i)
		case *s.Start != float64(int(*s.Start)) || *s.End != float64(int(*s.End)):
			return nil, fmt.Errorf("span %d: start and end are not whole numbers", i)
		case *s.Start < 0 || *s.End <= *s.Start:
			return nil, fmt.Errorf("span %d: [%g, %g) is not a span of characters", i, *s.Start, *s.End)
		case l == "":
			return nil, fmt.Errorf("span %d has no label", i)
		}
		out = append(out, spanKey{int(*s.Start), int(*s.End), l})
	}
	sortSpans(out)
	return out, nil
}

func sortSpans(s []spanKey) {
	slices.SortFunc(s, func(a, b spanKey) int {
		if a.Start != b.Start {
			return a.Start - b.Start
		}
		if a.End != b.End {
			return a.End - b.End
		}
		if a.Label < b.Label {
			return -1
		} else if a.Label > b.Label {
			return 1
		}
		return 0
	})
}

// encodeSpans is the form the gate's maps hold a span set in: JSON of
// [[start, end, label], ...], sorted.
func encodeSpans(s []spanKey) string {
	out := make([][3]any, len(s))
	for i, k := range s {
		out[i] = [3]any{k.Start, k.End, k.Label}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

func decodeSpans(s string) []spanKey {
	var list [][3]any
	if json.Unmarshal([]byte(s), &list) != nil {
		return nil
	}
	out := make([]spanKey, 0, len(list))
	for _, e := range list {
		a, _ := e[0].(float64)
		b, _ := e[1].(float64)
		l, _ := e[2].(string)
		out = append(out, spanKey{int(a), int(b), l})
	}
	return out
}

// spanSchemas are the span schemas of schemas.
func spanSchemas(schemas []bundle.Schema) []bundle.Schema {
	var out []bundle.Schema
	for _, s := range schemas {
		if s.Kind == config.KindSpan {
			out = append(out, s)
		}
	}
	return out
}

// readSpanGold reads the span targets of schemas from a split file, each
// encoded (encodeSpans); an item with an empty list has no target.
func readSpanGold(path string, schemas []bundle.Schema) (map[string]map[string]string, error) {
	gold := make(map[string]map[string]string, len(schemas))
	for _, s := range schemas {
		gold[s.Name] = map[string]string{}
	}
	err := scanLines(path, func(line []byte, _ int) error {
		var r struct {
			InstanceID string                     `json:"instance_id"`
			Targets    map[string]json.RawMessage `json:"targets"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		for name, raw := range r.Targets {
			g, ok := gold[name]
			if !ok || string(raw) == "null" {
				continue
			}
			s, err := spanList(raw)
			if err != nil {
				return fmt.Errorf("item %q, schema %q: span target: %w", r.InstanceID, name, err)
			}
			if len(s) > 0 {
				g[r.InstanceID] = encodeSpans(s)
			}
		}
		return nil
	})
	return gold, err
}

// predictedSpans is a prediction payload's spans, encoded; a payload that
// is not a list of spans predicts none.
func predictedSpans(payload []byte) string {
	s, err := spanList(payload)
	if err != nil {
		return encodeSpans(nil)
	}
	return encodeSpans(s)
}

// SpanKey is a span prediction payload's spans in the form
// CompareOnCommon takes another run's labels of a span schema in.
func SpanKey(payload []byte) string { return predictedSpans(payload) }

// scoreSpanSchemas adds to out the score of each span schema of schemas
// on the test split at path.
func scoreSpanSchemas(path, predictionsPath string, schemas []bundle.Schema, out map[string]SchemaScore) error {
	spans := spanSchemas(schemas)
	if len(spans) == 0 || path == "" {
		return nil
	}
	gold, err := readSpanGold(path, spans)
	if err != nil {
		return fmt.Errorf("writeback: score: test split: %w", err)
	}
	pred := make(map[string]map[string]string, len(spans))
	for _, s := range spans {
		pred[s.Name] = map[string]string{}
	}
	var p predLine
	err = scanLines(predictionsPath, func(line []byte, _ int) error {
		if err := p.parse(line); err != nil {
			return err
		}
		if g, ok := gold[p.schema]; ok {
			if _, ok := g[p.id]; ok {
				pred[p.schema][p.id] = predictedSpans(p.raw[2])
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("writeback: score: %w", err)
	}
	for _, s := range spans {
		out[s.Name] = scoreSpans(s.Labels, gold[s.Name], pred[s.Name])
	}
	return nil
}

// scoreSpans scores encoded span sets; labels (the schema's) come first in
// the per-label figures, then any other, sorted. An item without a
// prediction predicts no span and counts in NMissing.
func scoreSpans(labels []string, gold, pred map[string]string) SchemaScore {
	sc := SchemaScore{Kind: config.KindSpan, N: len(gold)}
	exact, overlap := map[string]*counts{}, map[string]*counts{}
	for _, l := range labels {
		tally(exact, l)
		tally(overlap, l)
	}
	right := 0
	for id, g := range gold {
		p, ok := pred[id]
		if !ok {
			sc.NMissing++
		}
		if p == g {
			right++
		}
		gs, ps := decodeSpans(g), decodeSpans(p)
		matchExact(gs, ps, exact)
		matchOverlap(gs, ps, overlap)
	}
	sc.Accuracy = ratio(right, len(gold))
	sc.Spans = &SpanScore{Exact: spanMatch(labels, exact), Overlap: spanMatch(labels, overlap)}
	sc.MacroF1 = sc.Spans.Exact.MacroF1
	micro := sc.Spans.Exact.F1
	sc.MicroF1 = &micro
	sc.Labels = sc.Spans.Exact.Labels
	return sc
}

// matchExact tallies the spans of one item matched exactly.
func matchExact(gold, pred []spanKey, per map[string]*counts) {
	left := map[spanKey]int{}
	for _, g := range gold {
		left[g]++
	}
	for _, p := range pred {
		if left[p] > 0 {
			left[p]--
			tally(per, p.Label).tp++
		} else {
			tally(per, p.Label).fp++
		}
	}
	for g, n := range left {
		tally(per, g.Label).fn += n
	}
}

// matchOverlap tallies the spans of one item matched by overlap.
func matchOverlap(gold, pred []spanKey, per map[string]*counts) {
	used := make([]bool, len(pred))
	for _, g := range gold {
		hit := false
		for j, p := range pred {
			if !used[j] && p.Label == g.Label && max(p.Start, g.Start) < min(p.End, g.End) {
				used[j], hit = true, true
				break
			}
		}
		if hit {
			tally(per, g.Label).tp++
		} else {
			tally(per, g.Label).fn++
		}
	}
	for j, p := range pred {
		if !used[j] {
			tally(per, p.Label).fp++
		}
	}
}

// spanMatch is the figures of per, labels first.
func spanMatch(labels []string, per map[string]*counts) SpanMatch {
	var m SpanMatch
	var all counts
	order := slices.Clone(labels)
	for _, l := range slices.Sorted(maps.Keys(per)) {
		if !slices.Contains(order, l) {
			order = append(order, l)
		}
	}
	var sum float64
	n := 0
	for _, l := range order {
		c := per[l]
		if c == nil {
			c = &counts{}
		}
		all.tp += c.tp
		all.fp += c.fp
		all.fn += c.fn
		if c.tp+c.fp+c.fn > 0 {
			sum += c.f1()
			n++
		}
		m.Labels = append(m.Labels, LabelFigures{Label: l, Support: c.tp + c.fn, TP: c.tp, FP: c.fp, FN: c.fn,
			Precision: ratio(c.tp, c.tp+c.fp), Recall: ratio(c.tp, c.tp+c.fn), F1: c.f1()})
	}
	m.Gold, m.Predicted = all.tp+all.fn, all.tp+all.fp
	m.Precision, m.Recall, m.F1 = ratio(all.tp, all.tp+all.fp), ratio(all.tp, all.tp+all.fn), all.f1()
	if n > 0 {
		m.MacroF1 = sum / float64(n)
	}
	return m
}

// spanContributions are one item's exact-match decisions for the gate's
// bootstrap: for each span, its label and whether it is a true positive
// (0), a false positive (1) or a false negative (2).
func spanContributions(gold, pred string, run int32, label func(string) int32) []contribution {
	per := map[string]*counts{}
	matchExact(decodeSpans(gold), decodeSpans(pred), per)
	var out []contribution
	for _, l := range slices.Sorted(maps.Keys(per)) {
		c := per[l]
		for what, n := range [3]int{c.tp, c.fp, c.fn} {
			for range n {
				out = append(out, contribution{run, label(l), int32(what)})
			}
		}
	}
	return out
}

// spanRefusal says why a span schema's prediction payload is not one
// Potato renders: a list of objects of start, end (whole numbers, 0 <=
// start < end), a label of the schema and an optional confidence in [0,
// 1], and no other key. An empty list (no span) is kept.
func spanRefusal(raw []byte, sc bundle.Schema, name func() string) (reason, why string) {
	var list []map[string]json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return RefusedLabel, fmt.Sprintf("the payload of %s is not a list of spans, as a span schema's is", name())
	}
	for _, obj := range list {
		for k := range obj {
			if !spanKeys[k] {
				return RefusedKeys, fmt.Sprintf("a span of the payload of %s has the key %q, which a span prelabel does not have (only start, end, label and confidence)", name(), clip(k))
			}
		}
		if !unitOrNull(obj["confidence"]) {
			return RefusedConfidence, fmt.Sprintf("a span's confidence of %s is not a number in [0, 1]", name())
		}
	}
	spans, err := spanList(raw)
	if err != nil {
		return RefusedLabel, fmt.Sprintf("the payload of %s: %v", name(), err)
	}
	for _, s := range spans {
		if !slices.Contains(sc.Labels, s.Label) {
			return RefusedLabel, fmt.Sprintf("%q is not a label of %q", clip(s.Label), sc.Name)
		}
	}
	return "", ""
}

// spanKeys are the keys of a span prelabel's objects.
var spanKeys = map[string]bool{"start": true, "end": true, "label": true, "confidence": true}

// readCurveGold is readGold for the classification schemas of schemas
// and readSpanGold for the span ones, in one map.
func readCurveGold(path string, schemas []bundle.Schema) (map[string]map[string]string, error) {
	var spans, others []bundle.Schema
	for _, s := range schemas {
		if s.Kind == config.KindSpan {
			spans = append(spans, s)
		} else {
			others = append(others, s)
		}
	}
	gold := map[string]map[string]string{}
	if len(others) > 0 {
		g, err := readGold(path, others)
		if err != nil {
			return nil, err
		}
		maps.Copy(gold, g)
	}
	if len(spans) > 0 {
		g, err := readSpanGold(path, spans)
		if err != nil {
			return nil, err
		}
		maps.Copy(gold, g)
	}
	return gold, nil
}

// curveLabel is a curve prediction's label as the curve's maps hold it:
// a span schema's spans encoded, another's labelOf.
func curveLabel(kind config.Kind, payload []byte) string {
	if kind == config.KindSpan {
		return predictedSpans(payload)
	}
	return labelOf(payload)
}

// scoreSpanDraw is a curve draw's score of a span schema, and the
// figures of its labels with gold spans.
func scoreSpanDraw(s bundle.Schema, gold, pred map[string]string) (SchemaScore, []LabelFigures) {
	sc := scoreSpans(s.Labels, gold, pred)
	var figs []LabelFigures
	for _, f := range sc.Labels {
		if f.Support > 0 {
			figs = append(figs, f)
		}
	}
	return sc, figs
}

// readTrainLabels is readCurveGold with a span schema's spans given as
// their labels, sorted, without repeats, joined by "|": what a curve
// counts the training items of each label by.
func readTrainLabels(path string, schemas []bundle.Schema) (map[string]map[string]string, error) {
	gold, err := readCurveGold(path, schemas)
	if err != nil {
		return nil, err
	}
	for _, s := range schemas {
		if s.Kind != config.KindSpan {
			continue
		}
		for id, enc := range gold[s.Name] {
			var names []string
			for _, k := range decodeSpans(enc) {
				names = append(names, k.Label)
			}
			slices.Sort(names)
			gold[s.Name][id] = strings.Join(slices.Compact(names), "|")
		}
	}
	return gold, nil
}
