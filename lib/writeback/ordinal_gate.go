package writeback

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"

	"potato-training/lib/bundle"
	"potato-training/lib/rundir"
)

// The promotion gate judges an ordinal (likert) schema by its mean
// absolute error in scale points, lower being better, where it judges the
// other kinds by macro-F1: on an ordered scale a prediction one point off
// is nearer than one four points off, which MAE counts and macro-F1 does
// not. Its paired bootstrap draws the common test items as for macro-F1;
// Diff is the published run's MAE less this run's (above 0 when this run
// is better, as for macro-F1), PWorse the share of draws in which this
// run's MAE is above the published run's.

// compareOrdinal fills a comparison of an ordinal schema: the labels on
// the scale, and both runs' ordinal scores.
func compareOrdinal(c *Comparison, s bundle.Schema) {
	for _, m := range []map[string]string{c.ours, c.theirs} {
		for id, l := range m {
			m[id] = ordinalLabel(s.Labels, l)
		}
	}
	c.scale = ordinalScale(s, c.gold, c.ours)
	c.Ours = scoreOrdinal(s, c.gold, c.ours)
	c.Theirs = scoreOrdinal(s, c.gold, c.theirs)
}

// bootstrapOrdinal is Bootstrap for an ordinal schema, by MAE.
func (c Comparison) bootstrapOrdinal(resamples int, seed uint64) rundir.Bootstrap {
	b := rundir.Bootstrap{Resamples: resamples, Seed: seed}
	if c.Ours.MAE != nil && c.Theirs.MAE != nil {
		b.Diff = *c.Theirs.MAE - *c.Ours.MAE
	}
	if c.N == 0 || resamples <= 0 {
		return b
	}
	index := make(map[string]int, len(c.scale))
	for i, l := range c.scale {
		index[l] = i
	}
	k := len(c.scale)
	// err is one item's absolute error, as ordinalFigures counts it.
	err := func(g, p string) float64 {
		gi, ok := index[g]
		if !ok {
			return 0
		}
		pi, ok := index[p]
		if !ok {
			pi = 0
			if gi < k-1-gi {
				pi = k - 1
			}
		}
		return math.Abs(float64(gi - pi))
	}
	ids := slices.Sorted(maps.Keys(c.gold))
	delta := make([]float64, len(ids)) // theirs less ours, per item
	for i, id := range ids {
		delta[i] = err(c.gold[id], c.theirs[id]) - err(c.gold[id], c.ours[id])
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	diffs := make([]float64, resamples)
	worse := 0
	for r := range diffs {
		var sum float64
		for range ids {
			sum += delta[rng.IntN(len(ids))]
		}
		diffs[r] = sum / float64(len(ids))
		if diffs[r] < -1e-9 {
			worse++
		}
	}
	slices.Sort(diffs)
	b.Low, b.High = quantile(diffs, 0.025), quantile(diffs, 0.975)
	b.PWorse = float64(worse) / float64(resamples)
	return b
}
