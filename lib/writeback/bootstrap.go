package writeback

import (
	"maps"
	"math/rand/v2"
	"slices"

	"potato-training/lib/config"
	"potato-training/lib/rundir"
)

// GateResamples and GateSeed are the promotion gate's paired bootstrap:
// how many draws of the common test items, and the seed of the draws, so
// that the same runs on the same labels always get the same decision.
const (
	GateResamples = 2000
	GateSeed      = 34
)

// contribution is one count an item adds to a run's per-label decisions:
// run 0 (ours) or 1 (theirs), the label's index, and 0 for a true
// positive, 1 a false positive, 2 a false negative.
type contribution struct {
	run, label, what int32
}

// Bootstrap is a paired bootstrap of the comparison: resamples draws,
// with replacement, of the N common test items, each scoring both runs'
// macro-F1 on the same draw as Score does. Diff is the macro-F1 on all
// the items (ours less theirs), Low and High the 2.5th and 97.5th
// percentiles of the drawn differences, PWorse the share of draws in
// which ours scored below theirs. A comparison of no items has a zero
// Bootstrap. An ordinal schema's is of MAE instead (ordinal_gate.go).
func (c Comparison) Bootstrap(resamples int, seed uint64) rundir.Bootstrap {
	if c.kind == config.KindOrdinal {
		return c.bootstrapOrdinal(resamples, seed)
	}
	b := rundir.Bootstrap{Resamples: resamples, Seed: seed, Diff: c.Ours.MacroF1 - c.Theirs.MacroF1}
	if c.N == 0 || resamples <= 0 {
		return b
	}
	ids := slices.Sorted(maps.Keys(c.gold))
	index := map[string]int32{}
	label := func(l string) int32 {
		k, ok := index[l]
		if !ok {
			k = int32(len(index))
			index[l] = k
		}
		return k
	}
	items := make([][]contribution, len(ids))
	for i, id := range ids {
		g := c.gold[id]
		for run, p := range []string{c.ours[id], c.theirs[id]} {
			r := int32(run)
			if c.kind == config.KindSpan {
				items[i] = append(items[i], spanContributions(g, p, r, label)...)
				continue
			}
			if c.kind == config.KindMultilabel {
				gs, ps := labelSet(g), labelSet(p)
				for _, l := range slices.Sorted(maps.Keys(gs)) {
					if ps[l] {
						items[i] = append(items[i], contribution{r, label(l), 0})
					} else {
						items[i] = append(items[i], contribution{r, label(l), 2})
					}
				}
				for _, l := range slices.Sorted(maps.Keys(ps)) {
					if !gs[l] {
						items[i] = append(items[i], contribution{r, label(l), 1})
					}
				}
				continue
			}
			if p == g && p != "" {
				items[i] = append(items[i], contribution{r, label(g), 0})
				continue
			}
			items[i] = append(items[i], contribution{r, label(g), 2})
			if p != "" {
				items[i] = append(items[i], contribution{r, label(p), 1})
			}
		}
	}
	nl := len(index)
	counts := make([][3]int, 2*nl)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	diffs := make([]float64, resamples)
	worse := 0
	for k := range diffs {
		clear(counts)
		for range ids {
			for _, x := range items[rng.IntN(len(ids))] {
				counts[int(x.run)*nl+int(x.label)][x.what]++
			}
		}
		var f1 [2]float64
		for run := range 2 {
			var sum float64
			n := 0
			for l := range nl {
				ct := counts[run*nl+l]
				if ct[0]+ct[1]+ct[2] == 0 {
					continue
				}
				sum += ratio(2*ct[0], 2*ct[0]+ct[1]+ct[2])
				n++
			}
			if n > 0 {
				f1[run] = sum / float64(n)
			}
		}
		diffs[k] = f1[0] - f1[1]
		if diffs[k] < -1e-9 {
			worse++
		}
	}
	slices.Sort(diffs)
	b.Low, b.High = quantile(diffs, 0.025), quantile(diffs, 0.975)
	b.PWorse = float64(worse) / float64(resamples)
	return b
}

// quantile of sorted values, by linear interpolation.
func quantile(sorted []float64, q float64) float64 {
	pos := q * float64(len(sorted)-1)
	i := int(pos)
	if i+1 >= len(sorted) {
		return sorted[len(sorted)-1]
	}
	return sorted[i] + (pos-float64(i))*(sorted[i+1]-sorted[i])
}
