package writeback

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/curve"
)

// IncompleteCurveError is JudgeCurve's refusal of a trainer's curve
// that lacks a point, or a draw at some points: a trainer that ignores
// spec.json's curve, whose one model must not pass for a flat curve.
type IncompleteCurveError struct{ msg string }

func (e *IncompleteCurveError) Error() string { return e.msg }

// JudgeCurve scores the curve run's predictions at pred on the test split
// of the bundle in bdir, and judges each schema's curve (curve.Judge).
// The training items of each point and draw are the first curve.Size of
// the schema's labelled train items in the curve.Order of the draw's
// seed, as every trainer takes them: they give each label's count at each
// point. warnings are a trainer's n_train that differ from that count,
// and draws asked for that the trainer did not fit (it is judged on those
// it did). A point without predictions of draw 0, or a draw fitted at
// some points and not others, is an error that names the trainer.
func JudgeCurve(bdir, pred string, schemas []bundle.Schema, want curve.Curve, trainerName string) (curve.Curve, []string, error) {
	asked := max(want.Draws, 1)
	c := curve.Curve{Points: want.Points, Seed: want.Seed, Draws: asked, Metric: "macro_f1", Epsilon: curve.Epsilon}
	scores, err := ScoreCurve(bdir, pred, schemas, want.Points, asked)
	if err != nil {
		return c, nil, err
	}
	train, err := TrainLabels(bdir, schemas)
	if err != nil {
		return c, nil, fmt.Errorf("train split: %w", err)
	}
	var warnings []string
	for _, s := range schemas {
		cs, ok := scores[s.Name]
		if !ok {
			continue
		}
		for _, p := range cs.Points {
			if !p.Draws[0].Found {
				return c, warnings, &IncompleteCurveError{fmt.Sprintf("the trainer wrote no predictions for curve point %s%% of schema %s: %s does not fit learning curves (spec.json curve, potato-events(5)), and one model must not pass for a flat curve",
					curve.Format(p.Percent), s.Name, trainerName)}
			}
		}
		draws := []int{0}
		for d := 1; d < asked; d++ {
			var have, lack []string
			for _, p := range cs.Points {
				if p.Draws[d].Found {
					have = append(have, curve.Format(p.Percent)+"%")
				} else {
					lack = append(lack, curve.Format(p.Percent)+"%")
				}
			}
			switch {
			case len(lack) == 0:
				draws = append(draws, d)
			case len(have) > 0:
				return c, warnings, &IncompleteCurveError{fmt.Sprintf("the trainer wrote curve draw %d of schema %s at %s but not at %s: %s fitted a draw at some points only (spec.json curve_draws, potato-events(5))",
					d, s.Name, strings.Join(have, ", "), strings.Join(lack, ", "), trainerName)}
			}
		}
		if len(draws) < asked {
			warnings = append(warnings, fmt.Sprintf("%s: the trainer fitted %d of the %d curve draws asked for (spec.json curve_draws); the curve is judged on %d", s.Name, len(draws), asked, len(draws)))
		}
		if len(cs.Points) == 0 || cs.Points[0].Draws[0].Score.N == 0 {
			return c, warnings, fmt.Errorf("schema %s has no labelled item in the test split to score the curve on", s.Name)
		}
		labelled := train[s.Name]
		var ids []string
		for id, l := range labelled {
			if s.Kind == config.KindMultilabel || l != "" {
				ids = append(ids, id)
			}
		}
		orders := make([][]string, len(draws))
		for j, d := range draws {
			orders[j] = curve.Order(curve.DrawSeed(want.Seed, d), ids)
		}
		sc := curve.Schema{Schema: s.Name, Kind: s.AnnotationType, NTrainSplit: len(ids), NTest: cs.Points[0].Draws[0].Score.N, Draws: len(draws)}
		judged := curve.Scores{Labels: map[string][][]float64{}}
		for i, p := range cs.Points {
			n := curve.Size(len(ids), p.Percent)
			pt := curve.Point{Percent: p.Percent, NTrain: n}
			have := map[string]float64{}
			sums := map[string]*LabelFigures{}
			var names []string
			f1s := map[string][]float64{}
			macro := make([]float64, len(draws))
			for j, d := range draws {
				ds := p.Draws[d]
				if ds.NTrain >= 0 && ds.NTrain != n {
					warnings = append(warnings, fmt.Sprintf("curve point %s%% of %s, draw %d: the trainer fitted %d items, not the %d of potato-events(5); the label counts are those of the %d", curve.Format(p.Percent), s.Name, d, ds.NTrain, n, n))
				}
				if d == 0 && ds.NTrain >= 0 {
					pt.NTrain = ds.NTrain
				}
				for _, id := range orders[j][:min(n, len(ids))] {
					for name := range strings.SplitSeq(labelled[id], "|") {
						if name != "" {
							have[name]++
						}
					}
				}
				pt.NMissing = max(pt.NMissing, ds.Score.NMissing)
				pt.Accuracy += ds.Score.Accuracy / float64(len(draws))
				pt.MacroF1 += ds.Score.MacroF1 / float64(len(draws))
				macro[j] = ds.Score.MacroF1
				pt.Draws = append(pt.Draws, curve.DrawScore{Draw: d, Accuracy: ds.Score.Accuracy, MacroF1: ds.Score.MacroF1})
				for _, l := range ds.Labels {
					sum, ok := sums[l.Label]
					if !ok {
						sum = &LabelFigures{Label: l.Label, Support: l.Support}
						sums[l.Label] = sum
						names = append(names, l.Label)
						f1s[l.Label] = make([]float64, len(draws))
					}
					sum.Precision += l.Precision / float64(len(draws))
					sum.Recall += l.Recall / float64(len(draws))
					sum.F1 += l.F1 / float64(len(draws))
					f1s[l.Label][j] = l.F1
				}
			}
			for _, name := range names {
				l := sums[name]
				pt.Labels = append(pt.Labels, curve.PointLabel{Label: name, NTrain: int(math.Round(have[name] / float64(len(draws)))), Support: l.Support,
					Precision: l.Precision, Recall: l.Recall, F1: l.F1})
				if judged.Labels[name] == nil {
					judged.Labels[name] = make([][]float64, len(cs.Points))
				}
				judged.Labels[name][i] = f1s[name]
			}
			judged.Macro = append(judged.Macro, macro)
			sc.Points = append(sc.Points, pt)
		}
		// A label every point scores; one some point lacks is left out.
		for name, rows := range judged.Labels {
			if slices.ContainsFunc(rows, func(r []float64) bool { return r == nil }) {
				delete(judged.Labels, name)
			}
		}
		judged.Resample = func(fn func(macro [][]float64, labels map[string][][]float64)) { cs.Resample(draws, fn) }
		curve.Judge(&sc, judged)
		c.Schemas = append(c.Schemas, sc)
	}
	return c, warnings, nil
}
