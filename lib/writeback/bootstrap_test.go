package writeback

import (
	"fmt"
	"path/filepath"
	"testing"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

// compareCase compares predictions that get the first oursWrong of n
// test items wrong with a published run that gets the first theirsWrong
// wrong (labels pos/neg, alternating gold).
func compareCase(t *testing.T, n, oursWrong, theirsWrong int) Comparison {
	t.Helper()
	s := bundle.Schema{Name: "sentiment", Kind: config.KindNominal, Labels: []string{"pos", "neg"}}
	gold := func(i int) string { return []string{"pos", "neg"}[i%2] }
	flip := map[string]string{"pos": "neg", "neg": "pos"}
	bdir := simBundle(t, s, 0, n, func(_ string, i int) any { return gold(i) })
	var lines []any
	theirs := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("test%d", i)
		o, th := gold(i), gold(i)
		if i < oursWrong {
			o = flip[o]
		}
		if i < theirsWrong {
			th = flip[th]
		}
		theirs[id] = th
		lines = append(lines, pred{id, "sentiment", label(o, 0.9), conf(0.9)})
	}
	path := filepath.Join(bdir, "predictions.jsonl")
	writeLines(t, path, lines...)
	c, err := CompareOnCommon(bdir, path, s, theirs)
	if err != nil || c.N != n {
		t.Fatalf("compare: %+v %v", c, err)
	}
	return c
}

// The paired bootstrap: two runs that predict alike are never worse; one
// item's difference in 200 is noise, well inside the interval; a run
// wrong on 40 more items of 200 is worse in every draw. The same seed
// gives the same figures.
func TestBootstrapPaired(t *testing.T) {
	same := compareCase(t, 200, 20, 20).Bootstrap(GateResamples, GateSeed)
	if same.Diff != 0 || same.PWorse != 0 || same.Low != 0 || same.High != 0 {
		t.Errorf("alike: %+v", same)
	}
	c := compareCase(t, 200, 21, 20)
	noise := c.Bootstrap(GateResamples, GateSeed)
	if noise.Diff >= 0 || noise.PWorse >= 0.95 || noise.Low >= noise.Diff || noise.High < 0 {
		t.Errorf("one item worse: %+v", noise)
	}
	if again := c.Bootstrap(GateResamples, GateSeed); again != noise {
		t.Errorf("same seed, other figures: %+v, %+v", noise, again)
	}
	worse := compareCase(t, 200, 60, 20).Bootstrap(GateResamples, GateSeed)
	if worse.PWorse < 0.999 || worse.High >= 0 || worse.Diff > -0.15 {
		t.Errorf("40 items worse: %+v", worse)
	}
	better := compareCase(t, 200, 20, 60).Bootstrap(GateResamples, GateSeed)
	if better.PWorse > 0.001 || better.Low <= 0 {
		t.Errorf("40 items better: %+v", better)
	}
	if empty := (Comparison{}).Bootstrap(GateResamples, GateSeed); empty.Resamples != GateResamples || empty.PWorse != 0 {
		t.Errorf("no items: %+v", empty)
	}
}
