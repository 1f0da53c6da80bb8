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
// its bundle: each point's predictions, draw by draw, scored as Score
// scores a run's, its labels' figures too.
type CurveScore struct {
	Kind   config.Kind
	Points []PointScore

	ids   []string              // the scored test items, sorted
	gold  map[string]string     // item -> gold label
	preds [][]map[string]string // per point and draw, item -> predicted label
}

// PointScore is the score of one point's predictions, one per draw asked
// for.
type PointScore struct {
	Percent float64
	Draws   []DrawScore
}

// DrawScore is the score of one draw's predictions at one point.
type DrawScore struct {
	// Found is whether the predictions had any line for the point and
	// draw.
	Found bool
	// NTrain is the n_train its lines gave, -1 when none did.
	NTrain int
	Score  SchemaScore
	// Labels are Score's figures of the labels with test items.
	Labels []LabelFigures
}

// ScoreCurve scores a curve run's predictions: the lines with a
// curve_point (potato-events(5)), per schema, point and draw (curve_draw,
// 0 when absent), on the test split of the bundle in bundleDir. Lines
// without a curve_point are ignored; a curve_point or curve_draw that is
// not one of the curve's is an error. A point and draw the predictions
// have no line for is scored as all missing, and its Found is false: the
// caller decides what that means.
func ScoreCurve(bundleDir, predictionsPath string, schemas []bundle.Schema, points []float64, draws int) (map[string]*CurveScore, error) {
	out := map[string]*CurveScore{}
	draws = max(draws, 1)
	var scored []bundle.Schema
	for _, s := range schemas {
		if scoredKind(s.Kind) || s.Kind == config.KindSpan {
			scored = append(scored, s)
		}
	}
	if len(scored) == 0 {
		return out, nil
	}
	ordinal := ordinalScales(scored)
	path, _, err := splitPath(bundleDir, "test")
	if err != nil {
		return nil, fmt.Errorf("writeback: curve: %w", err)
	}
	if path == "" {
		return nil, fmt.Errorf("writeback: curve: the bundle has no test split to score a curve on")
	}
	gold, err := readCurveGold(path, scored)
	if err != nil {
		return nil, fmt.Errorf("writeback: curve: test split: %w", err)
	}
	for _, s := range scored {
		c := &CurveScore{Kind: s.Kind, gold: gold[s.Name], ids: slices.Sorted(maps.Keys(gold[s.Name]))}
		for _, p := range points {
			ps := PointScore{Percent: p}
			var preds []map[string]string
			for range draws {
				ps.Draws = append(ps.Draws, DrawScore{NTrain: -1})
				preds = append(preds, map[string]string{})
			}
			c.Points = append(c.Points, ps)
			c.preds = append(c.preds, preds)
		}
		out[s.Name] = c
	}
	err = scanLines(predictionsPath, func(line []byte, _ int) error {
		var r struct {
			InstanceID string          `json:"instance_id"`
			SchemaName string          `json:"schema_name"`
			Payload    json.RawMessage `json:"payload"`
			CurvePoint *float64        `json:"curve_point"`
			CurveDraw  int             `json:"curve_draw"`
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
		d := r.CurveDraw
		if d < 0 || d >= draws {
			return fmt.Errorf("curve_draw %d is not a draw of the curve, which has %d (0 to %d)", d, draws, draws-1)
		}
		ds := &c.Points[i].Draws[d]
		ds.Found = true
		if r.NTrain != nil {
			ds.NTrain = *r.NTrain
		}
		if _, ok := c.gold[r.InstanceID]; ok {
			l := curveLabel(c.Kind, r.Payload)
			if scale, ok := ordinal[r.SchemaName]; ok && l != "" {
				l = ordinalLabel(scale, l)
			}
			c.preds[i][d][r.InstanceID] = l
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("writeback: curve: %w", err)
	}
	for _, s := range scored {
		c := out[s.Name]
		for i := range c.Points {
			for d := range c.Points[i].Draws {
				ds := &c.Points[i].Draws[d]
				switch s.Kind {
				case config.KindSpan:
					ds.Score, ds.Labels = scoreSpanDraw(s, c.gold, c.preds[i][d])
					continue
				case config.KindNominal:
					ds.Score = scoreNominal(c.gold, c.preds[i][d])
				case config.KindOrdinal:
					// An ordinal schema's curve is of macro-F1 over its
					// points, as the others'; its MAE is in its scores.
					ds.Score = scoreOrdinal(s, c.gold, c.preds[i][d])
				default:
					ds.Score = scoreMultilabel(c.gold, c.preds[i][d])
				}
				figs, _ := labelFigures(s, c.gold, c.preds[i][d])
				for _, f := range figs {
					if f.Support > 0 {
						ds.Labels = append(ds.Labels, f)
					}
				}
			}
		}
	}
	return out, nil
}

// Bootstraps is how many resamples Resample draws, at most: fewer for a
// curve whose points, draws and test items make one resample long, so
// that one resample's tallies times their number stay near
// bootstrapWork, and never fewer than MinBootstraps.
const (
	Bootstraps    = 1000
	MinBootstraps = 200
	bootstrapWork = 200_000_000
)

// decision is one item's effect on one label's counts: kind 0 a true
// positive, 1 a false positive, 2 a false negative.
type decision struct {
	label int32
	kind  uint8
}

// decisions are every item's decisions at one point and draw, in one
// slice: item k's are ds[off[k]:off[k+1]]. One slice, not one per item,
// since a curve of 20 points, 20 draws and 10,000 test items has four
// million of them.
type decisions struct {
	ds  []decision
	off []int32
}

func (x decisions) of(k int) []decision { return x.ds[x.off[k]:x.off[k+1]] }

// decisions are each item's decisions at point i and draw d, as
// labelFigures tallies them, with labels numbered in index.
func (c *CurveScore) decisions(i, d int, index map[string]int) decisions {
	num := func(l string) int32 {
		n, ok := index[l]
		if !ok {
			n = len(index)
			index[l] = n
		}
		return int32(n)
	}
	out := decisions{ds: make([]decision, 0, len(c.ids)), off: make([]int32, 1, len(c.ids)+1)}
	for _, id := range c.ids {
		g, p := c.gold[id], c.preds[i][d][id]
		if c.Kind == config.KindSpan {
			for _, x := range spanContributions(g, p, 0, num) {
				out.ds = append(out.ds, decision{x.label, uint8(x.what)})
			}
		} else if c.Kind != config.KindMultilabel {
			switch {
			case p == g && p != "":
				out.ds = append(out.ds, decision{num(g), 0})
			default:
				out.ds = append(out.ds, decision{num(g), 2})
				if p != "" {
					out.ds = append(out.ds, decision{num(p), 1})
				}
			}
		} else {
			gs, ps := labelSet(g), labelSet(p)
			for _, l := range slices.Sorted(maps.Keys(gs)) {
				if ps[l] {
					out.ds = append(out.ds, decision{num(l), 0})
				} else {
					out.ds = append(out.ds, decision{num(l), 2})
				}
			}
			for _, l := range slices.Sorted(maps.Keys(ps)) {
				if !gs[l] {
					out.ds = append(out.ds, decision{num(l), 1})
				}
			}
		}
		out.off = append(out.off, int32(len(out.ds)))
	}
	return out
}

// Resample is a paired bootstrap of the test items: each resample draws
// as many items as the test split has, with replacement, and scores every
// point and draw of draws on the same items, calling fn with macro-F1,
// macro[point][j] for draws[j], and each label's F1 the same way. A label
// with no decision in a resample has F1 0 there; macro-F1 is the mean
// over the labels with any, as Score takes them. The seed is fixed, so
// that a curve's report is the same each time it is made. fn must not
// keep the slices: the next resample reuses them.
func (c *CurveScore) Resample(draws []int, fn func(macro [][]float64, labels map[string][][]float64)) {
	n := len(c.ids)
	if n == 0 || len(draws) == 0 {
		return
	}
	index := map[string]int{}
	dec := make([][]decisions, len(c.Points))
	for i := range c.Points {
		for _, d := range draws {
			dec[i] = append(dec[i], c.decisions(i, d, index))
		}
	}
	names := make([]string, len(index))
	for l, k := range index {
		names[k] = l
	}
	macro := make([][]float64, len(c.Points))
	labels := map[string][][]float64{}
	for _, name := range names {
		labels[name] = make([][]float64, len(c.Points))
	}
	for i := range c.Points {
		macro[i] = make([]float64, len(draws))
		for _, name := range names {
			labels[name][i] = make([]float64, len(draws))
		}
	}
	b := min(Bootstraps, max(MinBootstraps, bootstrapWork/max(1, n*len(c.Points)*len(draws))))
	rng := rand.New(rand.NewPCG(1, uint64(len(c.Points)*64+len(draws))))
	sample := make([]int, n)
	cs := make([]counts, len(index))
	for range b {
		for k := range sample {
			sample[k] = rng.IntN(n)
		}
		for i := range c.Points {
			for j := range draws {
				clear(cs)
				for _, k := range sample {
					for _, d := range dec[i][j].of(k) {
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
				var sum float64
				m := 0
				for l, c := range cs {
					f := c.f1()
					labels[names[l]][i][j] = f
					if c.tp+c.fp+c.fn > 0 {
						sum += f
						m++
					}
				}
				macro[i][j] = 0
				if m > 0 {
					macro[i][j] = sum / float64(m)
				}
			}
		}
		fn(macro, labels)
	}
}

// TrainLabels is the labels of the schemas in the train split of the
// bundle in bundleDir, per schema and item, in the form predictions use
// (a multilabel label as its names joined by "|"; a span schema's, the
// labels of its spans, sorted, without repeats, joined by "|").
func TrainLabels(bundleDir string, schemas []bundle.Schema) (map[string]map[string]string, error) {
	path, _, err := splitPath(bundleDir, "train")
	if err != nil || path == "" {
		return map[string]map[string]string{}, err
	}
	return readTrainLabels(path, schemas)
}
