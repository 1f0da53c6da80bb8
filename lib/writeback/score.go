package writeback

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

// SchemaScore is the held-out score of one classification schema: the
// run's predictions on the test split against the human labels.
//
// N is the test items with a label for the schema. A test item the run made
// no prediction for counts as wrong and is also counted in NMissing: it is
// a miss for its gold label(s) and a prediction of no label.
//
// Nominal schemas have Accuracy, MacroF1 (the mean per-label F1 over the
// labels present in the gold labels or the predictions) and CohenKappa.
// Multilabel schemas have Accuracy (subset accuracy: the predicted set is
// the gold set), MicroF1 (F1 over all item-label decisions) and MacroF1 (per
// label, over the labels present in the gold sets or the predicted sets).
// A ratio whose denominator is zero is 0, and so is CohenKappa when chance
// agreement is 1, where it is undefined.
//
// Score also gives Labels, each label's decisions, and for a nominal
// schema Confusion; a score made before they existed has neither.
type SchemaScore struct {
	Kind       config.Kind `json:"kind"`
	N          int         `json:"n"`
	NMissing   int         `json:"n_missing"`
	Accuracy   float64     `json:"accuracy"`
	MacroF1    float64     `json:"macro_f1"`
	CohenKappa *float64    `json:"cohen_kappa,omitempty"`
	MicroF1    *float64    `json:"micro_f1,omitempty"`
	// MAE and QWK are an ordinal schema's (ordinal.go).
	MAE       *float64       `json:"mae,omitempty"`
	QWK       *float64       `json:"qwk,omitempty"`
	Labels    []LabelFigures `json:"labels,omitempty"`
	Confusion *Confusion     `json:"confusion,omitempty"`
	// Spans is a span schema's figures, exact and by overlap (spans.go).
	Spans *SpanScore `json:"spans,omitempty"`
}

// LabelFigures are one label's decisions on the test split, one against
// the rest: TP+FN is its Support (the items whose gold label is, or gold
// set holds, the label), TP+FP the items predicted with it, and TN the
// other items of N. Precision, Recall and F1 are 0 where their
// denominator is; TP, FP and FN tell when. MacroF1 is the mean F1 of the
// labels with TP+FP+FN above 0.
type LabelFigures struct {
	Label     string  `json:"label"`
	Support   int     `json:"support"`
	TP        int     `json:"tp"`
	FP        int     `json:"fp"`
	FN        int     `json:"fn"`
	TN        int     `json:"tn"`
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	F1        float64 `json:"f1"`
	// MAE is, for a point of an ordinal schema, the mean absolute error
	// of the items whose gold label it is (ordinal.go).
	MAE *float64 `json:"mae,omitempty"`
}

// Confusion is a nominal schema's confusion matrix on the test split:
// Counts[i][j] is the items whose gold label is Labels[i] predicted
// Labels[j], and NoLabel[i] those predicted no label (no prediction, or
// ""). Rows and columns are in the order of Labels. A schema of more than
// MaxConfusion labels has none: its matrix would outgrow run.json.
type Confusion struct {
	Labels  []string `json:"labels"`
	Counts  [][]int  `json:"counts"`
	NoLabel []int    `json:"no_label"`
}

// Heldout is the summary run.json keeps as its heldout field.
type Heldout struct {
	N        int     `json:"n"`
	Accuracy float64 `json:"accuracy"`
	MacroF1  float64 `json:"macro_f1"`
}

// HeldoutOf summarises the score of the first schema, in schemas order,
// that scores has. It reports false when there is none.
func HeldoutOf(schemas []bundle.Schema, scores map[string]SchemaScore) (Heldout, bool) {
	for _, s := range schemas {
		if sc, ok := scores[s.Name]; ok {
			return Heldout{N: sc.N, Accuracy: sc.Accuracy, MacroF1: sc.MacroF1}, true
		}
	}
	return Heldout{}, false
}

// Score scores the predictions in predictionsPath on the test split of the
// bundle in bundleDir, for each nominal, multilabel or span schema of
// schemas (a span schema as spans.go says); other kinds are left out of
// the result. A prediction's label is
// payload.label (a multilabel label is the names joined by "|", "" for
// none); when an item has several predictions for a schema the last counts.
// A bundle whose manifest lists no test split scores nothing.
//
// The test split's labels are held in memory; the predictions are streamed.
func Score(bundleDir, predictionsPath string, schemas []bundle.Schema) (map[string]SchemaScore, error) {
	scored := scoredSchemas(schemas)
	out := map[string]SchemaScore{}
	if len(scored) == 0 && len(spanSchemas(schemas)) == 0 {
		return out, nil
	}
	path, _, err := splitPath(bundleDir, "test")
	if err != nil {
		return nil, fmt.Errorf("writeback: score: %w", err)
	}
	if err := scoreSpanSchemas(path, predictionsPath, schemas, out); err != nil {
		return nil, err
	}
	if path == "" || len(scored) == 0 {
		return out, nil
	}
	gold, err := readGold(path, scored)
	if err != nil {
		return nil, fmt.Errorf("writeback: score: test split: %w", err)
	}

	// pred[schema][item] is the predicted label; an item absent was not
	// predicted.
	pred := make(map[string]map[string]string, len(scored))
	ordinal := ordinalScales(scored)
	for _, s := range scored {
		pred[s.Name] = make(map[string]string, len(gold[s.Name]))
	}
	var p predLine
	err = scanLines(predictionsPath, func(line []byte, _ int) error {
		if err := p.parse(line); err != nil {
			return err
		}
		g, ok := gold[p.schema]
		if !ok {
			return nil
		}
		if _, ok := g[p.id]; !ok {
			return nil
		}
		l := labelOf(p.raw[2])
		if scale, ok := ordinal[p.schema]; ok && l != "" {
			l = ordinalLabel(scale, l)
		}
		pred[p.schema][p.id] = l
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("writeback: score: %w", err)
	}

	return scoreAll(scored, gold, pred), nil
}

// scoredSchemas are the schemas of schemas that Score scores.
func scoredSchemas(schemas []bundle.Schema) []bundle.Schema {
	var scored []bundle.Schema
	for _, s := range schemas {
		if scoredKind(s.Kind) {
			scored = append(scored, s)
		}
	}
	return scored
}

// scoreAll scores each schema of scored on its gold labels of the test
// split and the labels predicted for them (schema, item, label).
func scoreAll(scored []bundle.Schema, gold, pred map[string]map[string]string) map[string]SchemaScore {
	out := make(map[string]SchemaScore, len(scored))
	for _, s := range scored {
		var sc SchemaScore
		if s.Ordinal() {
			out[s.Name] = scoreOrdinal(s, gold[s.Name], pred[s.Name])
			continue
		}
		if s.Kind == config.KindNominal {
			sc = scoreNominal(gold[s.Name], pred[s.Name])
		} else {
			sc = scoreMultilabel(gold[s.Name], pred[s.Name])
		}
		sc.Labels, sc.Confusion = labelFigures(s, gold[s.Name], pred[s.Name])
		out[s.Name] = sc
	}
	return out
}

// MaxConfusion is the most labels a schema's confusion matrix is kept for.
const MaxConfusion = 100

// labelFigures tallies each label's decisions as scoreNominal and
// scoreMultilabel do, and a nominal schema's confusion matrix. The labels
// are the schema's, in its order, then any other label of the gold labels
// or the predictions, sorted: a label of the schema the test split lacks
// is a row of zeros, which says it was not tested.
func labelFigures(s bundle.Schema, gold, pred map[string]string) ([]LabelFigures, *Confusion) {
	per := map[string]*counts{}
	for _, l := range s.Labels {
		tally(per, l)
	}
	nominal := s.Kind == config.KindNominal
	type cell struct{ g, p string }
	cells := map[cell]int{}
	for id, g := range gold {
		p := pred[id]
		if nominal {
			cells[cell{g, p}]++
			if p == g && p != "" {
				tally(per, g).tp++
				continue
			}
			tally(per, g).fn++
			if p != "" {
				tally(per, p).fp++
			}
			continue
		}
		gs, ps := labelSet(g), labelSet(p)
		for l := range gs {
			if ps[l] {
				tally(per, l).tp++
			} else {
				tally(per, l).fn++
			}
		}
		for l := range ps {
			if !gs[l] {
				tally(per, l).fp++
			}
		}
	}
	var order []string
	seen := map[string]bool{}
	for _, l := range s.Labels {
		if !seen[l] {
			seen[l] = true
			order = append(order, l)
		}
	}
	for _, l := range slices.Sorted(maps.Keys(per)) {
		if !seen[l] {
			order = append(order, l)
		}
	}
	figs := make([]LabelFigures, 0, len(order))
	for _, l := range order {
		c := per[l]
		figs = append(figs, LabelFigures{Label: l, Support: c.tp + c.fn, TP: c.tp, FP: c.fp, FN: c.fn,
			TN: len(gold) - c.tp - c.fp - c.fn, Precision: ratio(c.tp, c.tp+c.fp), Recall: ratio(c.tp, c.tp+c.fn), F1: c.f1()})
	}
	if !nominal || len(order) > MaxConfusion {
		return figs, nil
	}
	conf := &Confusion{Labels: order, Counts: make([][]int, len(order)), NoLabel: make([]int, len(order))}
	for i, g := range order {
		conf.Counts[i] = make([]int, len(order))
		for j, p := range order {
			conf.Counts[i][j] = cells[cell{g, p}]
		}
		conf.NoLabel[i] = cells[cell{g, ""}]
	}
	return figs, conf
}

// readGold reads the targets of the scored schemas from a split file. A
// nominal target is kept as its label and a multilabel one as its names
// joined by "|", the form predictions use.
func readGold(path string, schemas []bundle.Schema) (map[string]map[string]string, error) {
	g := newGoldReader(schemas)
	err := scanLines(path, func(line []byte, _ int) error { return g.line(line) })
	return g.gold, err
}

// goldReader is readGold's reading of one line at a time, into gold:
// schema, item, label.
type goldReader struct {
	kinds   map[string]config.Kind
	ordinal map[string][]string // a likert schema's scale
	gold    map[string]map[string]string
}

func newGoldReader(schemas []bundle.Schema) *goldReader {
	g := &goldReader{kinds: make(map[string]config.Kind, len(schemas)), ordinal: ordinalScales(schemas), gold: make(map[string]map[string]string, len(schemas))}
	for _, s := range schemas {
		g.kinds[s.Name] = s.Kind
		g.gold[s.Name] = map[string]string{}
	}
	return g
}

func (g *goldReader) line(line []byte) error {
	var r struct {
		InstanceID string                     `json:"instance_id"`
		Targets    map[string]json.RawMessage `json:"targets"`
	}
	if err := json.Unmarshal(line, &r); err != nil {
		return err
	}
	if r.InstanceID == "" {
		return errors.New("row has no instance_id")
	}
	for name, raw := range r.Targets {
		kind, ok := g.kinds[name]
		if !ok || string(raw) == "null" {
			continue
		}
		if kind == config.KindOrdinal {
			if l := ordinalGold(g.ordinal[name], raw); l != "" {
				g.gold[name][r.InstanceID] = l
			}
			continue
		}
		if kind == config.KindNominal {
			var label string
			if err := json.Unmarshal(raw, &label); err != nil {
				return fmt.Errorf("schema %q: nominal target: %w", name, err)
			}
			g.gold[name][r.InstanceID] = label
			continue
		}
		var names []string
		if err := json.Unmarshal(raw, &names); err != nil {
			return fmt.Errorf("schema %q: multilabel target: %w", name, err)
		}
		g.gold[name][r.InstanceID] = strings.Join(names, "|")
	}
	return nil
}

// labelOf is a prediction payload's label: payload.label, or the payload
// itself when it is a bare string. A label given as a list of names is
// taken as those names joined by "|". Anything else predicts no label.
func labelOf(payload json.RawMessage) string {
	var obj struct {
		Label json.RawMessage `json:"label"`
	}
	raw := payload
	if json.Unmarshal(payload, &obj) == nil {
		raw = obj.Label
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var names []string
	if json.Unmarshal(raw, &names) == nil {
		return strings.Join(names, "|")
	}
	return ""
}

// counts are one label's decisions.
type counts struct{ tp, fp, fn int }

func (c counts) f1() float64 {
	return ratio(2*c.tp, 2*c.tp+c.fp+c.fn)
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// macroF1 sums in label order, so that the same input gives the same bits.
func macroF1(per map[string]*counts) float64 {
	if len(per) == 0 {
		return 0
	}
	var sum float64
	for _, label := range slices.Sorted(maps.Keys(per)) {
		sum += per[label].f1()
	}
	return sum / float64(len(per))
}

func tally(per map[string]*counts, label string) *counts {
	c := per[label]
	if c == nil {
		c = &counts{}
		per[label] = c
	}
	return c
}

// scoreNominal scores single labels. A missing prediction, and a predicted
// "", are no label: they take part in no label's counts except as a miss of
// the gold label, and they never agree.
func scoreNominal(gold, pred map[string]string) SchemaScore {
	sc := SchemaScore{Kind: config.KindNominal, N: len(gold)}
	per := map[string]*counts{}
	goldN := map[string]int{}
	predN := map[string]int{}
	correct := 0
	for id, g := range gold {
		goldN[g]++
		p, ok := pred[id]
		if !ok {
			sc.NMissing++
		}
		if p != "" {
			predN[p]++
		}
		if ok && p == g {
			correct++
			tally(per, g).tp++
			continue
		}
		tally(per, g).fn++
		if p != "" {
			tally(per, p).fp++
		}
	}
	sc.Accuracy = ratio(correct, sc.N)
	sc.MacroF1 = macroF1(per)
	kappa := 0.0
	if sc.N > 0 {
		n := float64(sc.N)
		var pe float64
		for _, label := range slices.Sorted(maps.Keys(goldN)) {
			pe += float64(goldN[label]) / n * float64(predN[label]) / n
		}
		if pe < 1 {
			kappa = (sc.Accuracy - pe) / (1 - pe)
		}
	}
	sc.CohenKappa = &kappa
	return sc
}

// scoreMultilabel scores label sets. A missing prediction is the empty set
// and is wrong for subset accuracy even when the gold set is empty.
func scoreMultilabel(gold, pred map[string]string) SchemaScore {
	sc := SchemaScore{Kind: config.KindMultilabel, N: len(gold)}
	per := map[string]*counts{}
	var total counts
	exact := 0
	for id, g := range gold {
		gs := labelSet(g)
		p, ok := pred[id]
		if !ok {
			sc.NMissing++
		}
		ps := labelSet(p)
		same := ok && len(gs) == len(ps)
		for l := range gs {
			if ps[l] {
				tally(per, l).tp++
				total.tp++
			} else {
				tally(per, l).fn++
				total.fn++
				same = false
			}
		}
		for l := range ps {
			if !gs[l] {
				tally(per, l).fp++
				total.fp++
				same = false
			}
		}
		if same {
			exact++
		}
	}
	sc.Accuracy = ratio(exact, sc.N)
	sc.MacroF1 = macroF1(per)
	micro := total.f1()
	sc.MicroF1 = &micro
	return sc
}

// labelSet splits a multilabel label into its names, ignoring empty ones.
func labelSet(label string) map[string]bool {
	set := map[string]bool{}
	for name := range strings.SplitSeq(label, "|") {
		if name != "" {
			set[name] = true
		}
	}
	return set
}
