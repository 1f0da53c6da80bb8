package dispatch

import (
	"fmt"
	"strings"
	"testing"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

// TestOrdinalLearnt: a likert model is checked against always predicting
// the val split's median point, by absolute error. Always predicting the
// median fails; a model nearer on most items where the two differ
// passes; a model no nearer than chance fails; val items all of one point
// are not checked.
func TestOrdinalLearnt(t *testing.T) {
	s := bundle.Schema{Name: "r", Kind: config.KindOrdinal, Labels: []string{"1", "2", "3", "4", "5"}}
	golds := func(n int) map[string]string {
		g := map[string]string{}
		for i := range n {
			g[fmt.Sprint(i)] = s.Labels[i%5]
		}
		return g
	}
	check := func(gold, got map[string]string) learntCheck {
		c := learntCheck{Schema: "r"}
		ordinalLearnt(&c, s, gold, got)
		return c
	}
	gold := golds(50)
	constant := map[string]string{}
	perfect := map[string]string{}
	for id, g := range gold {
		constant[id], perfect[id] = "3", g
	}
	if c := check(gold, constant); !c.Checked || c.LearntEnough || c.Label != "3" || c.N != 0 {
		t.Errorf("always the median: %+v", c)
	}
	c := check(gold, perfect)
	if !c.Checked || !c.LearntEnough || c.MAE != 0 || c.ConstMAE != 1.2 {
		t.Errorf("always right: %+v", c)
	}
	if r := c.reason(); !strings.Contains(r, "val mean absolute error 0.000 points against 1.200 of always predicting the median point 3") {
		t.Errorf("reason %q", r)
	}
	// Nearer on half of the items where it differs, farther on the rest.
	half := map[string]string{}
	for id, g := range gold {
		half[id] = "3"
		switch g {
		case "1":
			half[id] = "1"
		case "5":
			half[id] = "1"
		}
	}
	if c := check(gold, half); c.LearntEnough {
		t.Errorf("no nearer than chance: %+v", c)
	}
	one := map[string]string{"a": "2", "b": "2"}
	if c := check(one, one); c.Checked {
		t.Errorf("one point: %+v", c)
	}
}
