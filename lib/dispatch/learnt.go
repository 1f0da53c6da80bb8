package dispatch

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/writeback"
)

// learntHeld starts the reason of a schema learnt holds back.
const learntHeld = "not published: the model learnt nothing the val split shows: "

// learntAlpha is the chance that a model no better than its val split's
// most common label passes learnt's test.
const learntAlpha = 0.05

// learntCheck is learnt's finding for one schema. Of a nominal schema,
// on the N labelled items of the val split the run predicted, Correct of
// its predictions are right, and Majority of the items have the most
// common gold label, Label. Of a multiselect schema, the same counts are
// of its N decisions, one per item (Items of them) and label: a label
// chosen or not, right when the gold set agrees; Majority is the
// decisions right when each label is chosen as most of the items have
// it, and Label the labels most of them have. P is the chance of Correct
// or more right under a model right as often as that.
type learntCheck struct {
	Schema                string
	Multi                 bool
	Items                 int
	N, Correct, Majority  int
	Label                 string
	P                     float64
	Checked, LearntEnough bool
	// Few is set when the val items are too few for the test: even all
	// right, P would not be below learntAlpha.
	Few bool
	// Ordinal is an ordinal schema's check, by absolute error
	// (learnt_ordinal.go), with its MAE and the constant's.
	Ordinal       bool
	MAE, ConstMAE float64
}

// learnt is the check that keeps a model that learnt nothing from
// publishing: a schema's predictions are published only when the run's
// accuracy on its val split is above that of a model that always
// predicts the split's most common label, by more than chance. The test
// is one-sided and exact: with n the labelled val items the run predicted
// (of a multiselect schema, its n decisions, one per item and label), k
// its right predictions and p0 the share of the most common gold label
// (of a multiselect schema, the decisions right when each label is chosen
// as most of the items have it), the schema passes when P(X >= k) <
// learntAlpha for X binomial(n, p0). A model that predicts one label gets
// k = p0 n and never passes, nor does one whose k is within chance of it;
// on few val items only a model close to always right passes (on 10
// items of two labels half each, 9 right). Where the val items are so few
// that even all right would not pass (p0^n >= learntAlpha: 4 items of two
// labels half each), the test cannot tell and k > p0 n is enough: a
// one-label model still fails. A val split the run predicted no labelled
// item of, or whose items it predicted all have one label (p0 = 1), is not
// checked: the schema is published, and the run log says it was not
// checked.
func learnt(r *writeback.RunReading, s bundle.Schema) (learntCheck, error) {
	c := learntCheck{Schema: s.Name, Multi: s.Kind == config.KindMultilabel}
	if s.Kind != config.KindNominal && s.Kind != config.KindMultilabel && s.Kind != config.KindOrdinal {
		return c, nil
	}
	gold, got, err := r.Split("val", s)
	if err != nil {
		return c, err
	}
	if s.Ordinal() {
		ordinalLearnt(&c, s, gold, got)
		return c, nil
	}
	c.Items = len(got)
	if c.Multi {
		c.multiselect(s, gold, got)
	} else {
		count := map[string]int{}
		for id, p := range got {
			c.N++
			count[gold[id]]++
			if p == gold[id] {
				c.Correct++
			}
		}
		for _, l := range slices.Sorted(maps.Keys(count)) {
			if count[l] > c.Majority {
				c.Majority, c.Label = count[l], l
			}
		}
	}
	if c.N == 0 || c.Majority == c.N {
		return c, nil // nothing predicted, or one label: nothing is above it
	}
	c.Checked = true
	p0 := float64(c.Majority) / float64(c.N)
	c.P = binomialTail(c.N, c.Correct, p0)
	c.LearntEnough = c.P < learntAlpha
	if binomialTail(c.N, c.N, p0) >= learntAlpha {
		c.Few, c.LearntEnough = true, c.Correct > c.Majority
	}
	return c, nil
}

// multiselect counts a multiselect schema's decisions: one per item and
// label, of the schema's labels and any other in the gold sets or the
// predictions.
func (c *learntCheck) multiselect(s bundle.Schema, gold, got map[string]string) {
	set := func(l string) map[string]bool {
		out := map[string]bool{}
		for n := range strings.SplitSeq(l, "|") {
			if n != "" {
				out[n] = true
			}
		}
		return out
	}
	labels := map[string]bool{}
	for _, l := range s.Labels {
		labels[l] = true
	}
	present := map[string]int{}
	type pair struct{ g, p map[string]bool }
	var items []pair
	for id, p := range got {
		it := pair{set(gold[id]), set(p)}
		for l := range it.g {
			labels[l] = true
			present[l]++
		}
		for l := range it.p {
			labels[l] = true
		}
		items = append(items, it)
	}
	var most []string
	for _, l := range slices.Sorted(maps.Keys(labels)) {
		for _, it := range items {
			c.N++
			if it.g[l] == it.p[l] {
				c.Correct++
			}
		}
		c.Majority += max(present[l], len(items)-present[l])
		if 2*present[l] > len(items) {
			most = append(most, l)
		}
	}
	c.Label = strings.Join(most, ", ")
}

// binomialTail is P(X >= k) for X binomial(n, p), summed in logs.
func binomialTail(n, k int, p float64) float64 {
	switch {
	case k <= 0:
		return 1
	case k > n:
		return 0
	case p >= 1:
		return 1
	case p <= 0:
		return 0
	}
	lgN, _ := math.Lgamma(float64(n + 1))
	lp, lq := math.Log(p), math.Log1p(-p)
	var sum float64
	for i := k; i <= n; i++ {
		a, _ := math.Lgamma(float64(i + 1))
		b, _ := math.Lgamma(float64(n - i + 1))
		sum += math.Exp(lgN - a - b + float64(i)*lp + float64(n-i)*lq)
	}
	return math.Min(1, sum)
}

// labelText is a label as the run log writes it: "(no label)" for none.
func labelText(l string) string {
	if l == "" {
		return "(no label)"
	}
	return l
}

// reason is the check's finding as a promotion decision's reason and as
// the run log's line.
func (c learntCheck) reason() string {
	if c.Ordinal && c.Items > 0 {
		return c.ordinalReason()
	}
	switch {
	case c.Items == 0:
		return "not checked: the run predicted no labelled item of the val split"
	case !c.Checked:
		return fmt.Sprintf("not checked: the %d labelled val items it predicted are all %s, so no model can be above always predicting it", c.Items, labelText(c.Label))
	}
	verdict := "above"
	if !c.LearntEnough {
		verdict = "not above"
	}
	of := fmt.Sprintf("%d of %d", c.Correct, c.N)
	if c.Multi {
		of += fmt.Sprintf(" label decisions on %d items", c.Items)
	}
	acc := fmt.Sprintf("val accuracy %.3f (%s) is %s the %.3f of always predicting %s",
		float64(c.Correct)/float64(c.N), of, verdict, float64(c.Majority)/float64(c.N), labelText(c.Label))
	if c.Few {
		return fmt.Sprintf("%s; %d val items are too few for the one-sided binomial test (all right would give p %.2g, not < %g), so above it is enough",
			acc, c.N, binomialTail(c.N, c.N, float64(c.Majority)/float64(c.N)), learntAlpha)
	}
	return fmt.Sprintf("%s by more than chance (one-sided binomial test: p %.2g, needs < %g)", acc, c.P, learntAlpha)
}
