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

// perLabel counts each label's decisions as labelFigures does, over the
// items ids, which the bootstrap draws with repeats.
func perLabel(kind config.Kind, ids []string, gold, pred map[string]string) map[string]*counts {
	per := map[string]*counts{}
	for _, id := range ids {
		g := gold[id]
		p := pred[id]
		if kind == config.KindNominal {
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
	return per
}

// Bootstraps is how many resamples Noise draws.
const Bootstraps = 1000

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
	rng := rand.New(rand.NewPCG(1, uint64(i*64+j)))
	var sum, sum2 float64
	lsum, lsum2 := map[string]float64{}, map[string]float64{}
	ids := make([]string, n)
	gold := make(map[string]string, n)
	pi := make(map[string]string, n)
	pj := make(map[string]string, n)
	for range Bootstraps {
		clear(gold)
		clear(pi)
		clear(pj)
		for k := range ids {
			id := c.ids[rng.IntN(n)]
			// A resampled item may repeat: each copy is an item of its own.
			key := fmt.Sprintf("%s\x00%d", id, k)
			ids[k] = key
			gold[key] = c.gold[id]
			if p, ok := c.preds[i][id]; ok {
				pi[key] = p
			}
			if p, ok := c.preds[j][id]; ok {
				pj[key] = p
			}
		}
		ci, cj := perLabel(c.Kind, ids, gold, pi), perLabel(c.Kind, ids, gold, pj)
		d := macroF1(cj) - macroF1(ci)
		sum += d
		sum2 += d * d
		for _, l := range c.Points[j].Labels {
			var fi, fj float64
			if x := ci[l.Label]; x != nil {
				fi = x.f1()
			}
			if x := cj[l.Label]; x != nil {
				fj = x.f1()
			}
			dl := fj - fi
			lsum[l.Label] += dl
			lsum2[l.Label] += dl * dl
		}
	}
	sd := func(s, s2 float64) float64 {
		m := s / Bootstraps
		return 2 * math.Sqrt(math.Max(0, s2/Bootstraps-m*m))
	}
	for l := range lsum {
		labels[l] = sd(lsum[l], lsum2[l])
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
