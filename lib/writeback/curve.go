package writeback

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

// CurveScore is one schema's learning curve scored on the test split of
// its bundle: each point's predictions scored as Score scores a run's,
// its labels' figures too.
type CurveScore struct {
	Kind   config.Kind
	Points []PointScore

	ids   []string            // the scored test items, sorted
	gold  map[string]string   // item -> gold label
	preds []map[string]string // per point, item -> predicted label
}

// PointScore is the score of one point's predictions.
type PointScore struct {
	Percent float64
	// Found is whether the predictions had any line for the point.
	Found bool
	// NTrain is the n_train its lines gave, -1 when none did.
	NTrain int
	Score  SchemaScore
	// Labels are Score's figures of the labels with test items.
	Labels []LabelFigures
}

// ScoreCurve scores a curve run's predictions: the lines with a
// curve_point (potato-events(5)), per schema and point, on the test split
// of the bundle in bundleDir. Lines without a curve_point are ignored. A
// point the predictions have no line for is scored as all missing, and
// its Found is false: the caller decides what that means.
func ScoreCurve(bundleDir, predictionsPath string, schemas []bundle.Schema, points []float64) (map[string]*CurveScore, error) {
	out := map[string]*CurveScore{}
	var scored []bundle.Schema
	for _, s := range schemas {
		if s.Kind == config.KindNominal || s.Kind == config.KindMultilabel {
			scored = append(scored, s)
		}
	}
	if len(scored) == 0 {
		return out, nil
	}
	path, _, err := splitPath(bundleDir, "test")
	if err != nil {
		return nil, fmt.Errorf("writeback: curve: %w", err)
	}
	if path == "" {
		return nil, fmt.Errorf("writeback: curve: the bundle has no test split to score a curve on")
	}
	gold, err := readGold(path, scored)
	if err != nil {
		return nil, fmt.Errorf("writeback: curve: test split: %w", err)
	}
	for _, s := range scored {
		c := &CurveScore{Kind: s.Kind, gold: gold[s.Name], ids: slices.Sorted(maps.Keys(gold[s.Name]))}
		for _, p := range points {
			c.Points = append(c.Points, PointScore{Percent: p, NTrain: -1})
			c.preds = append(c.preds, map[string]string{})
		}
		out[s.Name] = c
	}
	err = scanLines(predictionsPath, func(line []byte, _ int) error {
		var r struct {
			InstanceID string          `json:"instance_id"`
			SchemaName string          `json:"schema_name"`
			Payload    json.RawMessage `json:"payload"`
			CurvePoint *float64        `json:"curve_point"`
			NTrain     *int            `json:"n_train"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		c, ok := out[r.SchemaName]
		if !ok || r.CurvePoint == nil {
			return nil
		}
		i := slices.IndexFunc(points, func(p float64) bool { return math.Abs(p-*r.CurvePoint) < 1e-9 })
		if i < 0 {
			return fmt.Errorf("curve_point %v is not a point of the curve", *r.CurvePoint)
		}
		c.Points[i].Found = true
		if r.NTrain != nil {
			c.Points[i].NTrain = *r.NTrain
		}
		if _, ok := c.gold[r.InstanceID]; ok {
			c.preds[i][r.InstanceID] = labelOf(r.Payload)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("writeback: curve: %w", err)
	}
	for _, s := range scored {
		c := out[s.Name]
		for i := range c.Points {
			if s.Kind == config.KindNominal {
				c.Points[i].Score = scoreNominal(c.gold, c.preds[i])
			} else {
				c.Points[i].Score = scoreMultilabel(c.gold, c.preds[i])
			}
			figs, _ := labelFigures(s, c.gold, c.preds[i])
			for _, f := range figs {
				if f.Support > 0 {
					c.Points[i].Labels = append(c.Points[i].Labels, f)
				}
			}
		}
	}
	return out, nil
}

// Bootstraps is how many resamples Noise draws.
const Bootstraps = 1000

// decision is one item's effect on one label's counts: 0 a true
// positive, 1 a false positive, 2 a false negative.
type decision struct{ label, kind int }

// decisions are each item's decisions at point i, as labelFigures
// tallies them, with labels numbered in index.
func (c *CurveScore) decisions(i int, index map[string]int) [][]decision {
	num := func(l string) int {
		n, ok := index[l]
		if !ok {
			n = len(index)
			index[l] = n
		}
		return n
	}
	out := make([][]decision, len(c.ids))
	for k, id := range c.ids {
		g, p := c.gold[id], c.preds[i][id]
		var ds []decision
		if c.Kind == config.KindNominal {
			switch {
			case p == g && p != "":
				ds = append(ds, decision{num(g), 0})
			default:
				ds = append(ds, decision{num(g), 2})
				if p != "" {
					ds = append(ds, decision{num(p), 1})
				}
			}
		} else {
			gs, ps := labelSet(g), labelSet(p)
			for _, l := range slices.Sorted(maps.Keys(gs)) {
				if ps[l] {
					ds = append(ds, decision{num(l), 0})
				} else {
					ds = append(ds, decision{num(l), 2})
				}
			}
			for _, l := range slices.Sorted(maps.Keys(ps)) {
				if !gs[l] {
					ds = append(ds, decision{num(l), 1})
				}
			}
		}
		out[k] = ds
	}
	return out
}

// Noise is the noise band, two standard errors, of the change in macro-F1
// and in each label's F1 from point i to point j: a paired bootstrap over
// the test items (both points are scored on the same items, so their
// scores are resampled together), with a fixed seed so that a curve's
// report is the same each time it is made.
func (c *CurveScore) Noise(i, j int) (float64, map[string]float64) {
	n := len(c.ids)
	labels := map[string]float64{}
	if n == 0 {
		return 0, labels
	}
	index := map[string]int{}
	di, dj := c.decisions(i, index), c.decisions(j, index)
	names := make([]string, len(index))
	for l, k := range index {
		names[k] = l
	}
	rng := rand.New(rand.NewPCG(1, uint64(i*64+j)))
	ci, cj := make([]counts, len(index)), make([]counts, len(index))
	var sum, sum2 float64
	lsum, lsum2 := make([]float64, len(index)), make([]float64, len(index))
	tallyAll := func(cs []counts, ds []decision) {
		for _, d := range ds {
			switch d.kind {
			case 0:
				cs[d.label].tp++
			case 1:
				cs[d.label].fp++
			default:
				cs[d.label].fn++
			}
		}
	}
	// macro is macro-F1 over the labels with any decision, as macroF1
	// takes the labels tallied.
	macro := func(cs []counts) float64 {
		var s float64
		m := 0
		for _, c := range cs {
			if c.tp+c.fp+c.fn > 0 {
				s += c.f1()
				m++
			}
		}
		if m == 0 {
			return 0
		}
		return s / float64(m)
	}
	for range Bootstraps {
		clear(ci)
		clear(cj)
		for range n {
			k := rng.IntN(n)
			tallyAll(ci, di[k])
			tallyAll(cj, dj[k])
		}
		d := macro(cj) - macro(ci)
		sum += d
		sum2 += d * d
		for l := range names {
			dl := cj[l].f1() - ci[l].f1()
			lsum[l] += dl
			lsum2[l] += dl * dl
		}
	}
	sd := func(s, s2 float64) float64 {
		m := s / Bootstraps
		return 2 * math.Sqrt(math.Max(0, s2/Bootstraps-m*m))
	}
	for l, name := range names {
		labels[name] = sd(lsum[l], lsum2[l])
	}
	return sd(sum, sum2), labels
}

// TrainLabels is the labels of the schemas in the train split of the
// bundle in bundleDir, per schema and item, in the form predictions use
// (a multilabel label as its names joined by "|").
func TrainLabels(bundleDir string, schemas []bundle.Schema) (map[string]map[string]string, error) {
	path, _, err := splitPath(bundleDir, "train")
	if err != nil || path == "" {
		return map[string]map[string]string{}, err
	}
	return readGold(path, schemas)
}
