package dispatch

import (
	"fmt"
	"math"
	"slices"

	"potato-training/lib/bundle"
)

// ordinalLearnt is learnt for an ordinal (likert) schema, by absolute
// error in scale points where the others are by accuracy: the model is
// compared with always predicting the val split's median gold point (the
// constant of least absolute error), item by item. Of the N val items on
// which the two are not equally far from the gold point, the model is
// nearer on Correct; the schema passes when a one-sided sign test says
// the model is nearer more often than chance (P(X >= Correct) <
// learntAlpha for X binomial(N, 1/2)); where N is so small that even
// nearer on all would not pass, nearer on more than half is enough. A
// model that always predicts one point is never nearer, and fails. MAE
// and ConstMAE are the two mean absolute errors over all the items
// predicted.
func ordinalLearnt(c *learntCheck, s bundle.Schema, gold, got map[string]string) {
	c.Ordinal = true
	scale := s.Labels
	index := map[string]int{}
	for i, l := range scale {
		index[l] = i
	}
	var golds []int
	for id := range got {
		if g, ok := index[gold[id]]; ok {
			golds = append(golds, g)
		}
	}
	c.Items = len(golds)
	if len(golds) == 0 {
		return
	}
	slices.Sort(golds)
	median := golds[(len(golds)-1)/2]
	c.Label = scale[median]
	if golds[0] == golds[len(golds)-1] {
		return // one point: nothing is above always predicting it
	}
	k := len(scale)
	var sumModel, sumConst float64
	for id, p := range got {
		g, ok := index[gold[id]]
		if !ok {
			continue
		}
		pi, ok := index[p]
		if !ok {
			pi = 0
			if g < k-1-g {
				pi = k - 1
			}
		}
		em, ec := math.Abs(float64(pi-g)), math.Abs(float64(median-g))
		sumModel += em
		sumConst += ec
		if em != ec {
			c.N++
			if em < ec {
				c.Correct++
			}
		}
	}
	c.MAE, c.ConstMAE = sumModel/float64(c.Items), sumConst/float64(c.Items)
	c.Checked = true
	c.P = binomialTail(c.N, c.Correct, 0.5)
	c.LearntEnough = c.N > 0 && c.P < learntAlpha
	if c.N > 0 && binomialTail(c.N, c.N, 0.5) >= learntAlpha {
		c.Few, c.LearntEnough = true, 2*c.Correct > c.N
	}
}

// ordinalReason is reason for an ordinal schema.
func (c learntCheck) ordinalReason() string {
	if !c.Checked {
		return fmt.Sprintf("not checked: the %d labelled val items it predicted are all %s, so no model can be above always predicting it", c.Items, labelText(c.Label))
	}
	verdict := "more often than chance"
	if !c.LearntEnough {
		verdict = "not more often than chance"
	}
	text := fmt.Sprintf("val mean absolute error %.3f points against %.3f of always predicting the median point %s: nearer to the gold point on %d of the %d val items where the two differ",
		c.MAE, c.ConstMAE, labelText(c.Label), c.Correct, c.N)
	if c.Few {
		if c.LearntEnough {
			verdict = "more than half"
		} else {
			verdict = "not more than half"
		}
		return fmt.Sprintf("%s, %s: %d such items are too few for the one-sided sign test, so more than half is enough", text, verdict, c.N)
	}
	return fmt.Sprintf("%s, %s (one-sided sign test: p %.2g, needs < %g)", text, verdict, c.P, learntAlpha)
}
