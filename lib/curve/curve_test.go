package curve

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestParsePoints(t *testing.T) {
	got, err := ParsePoints(" 10, 12.5%,100")
	if err != nil || !slices.Equal(got, []float64{10, 12.5, 100}) {
		t.Errorf("got %v, %v", got, err)
	}
	for in, want := range map[string]string{
		"50":     "a curve has 2 to 20 points, not 1",
		"50,50":  "points must rise: 50 after 50",
		"0,100":  "point 0 is outside (0, 100]",
		"50,101": "point 101 is outside (0, 100]",
		"a,100":  `point "a" is not a number`,
		"NaN,50": `point "NaN" is not a number`,
	} {
		if _, err := ParsePoints(in); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

// TestOrderNested: the order depends on the seed and the ids alone, not
// on the order the ids come in, so each point's items hold the previous
// point's; Size rounds half up and keeps at least one item.
func TestOrderNested(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	rev := slices.Clone(ids)
	slices.Reverse(rev)
	// potato_hf's test_curve pins the same order: every trainer takes the
	// same items.
	if got := Order(42, ids); !slices.Equal(got, []string{"d", "e", "c", "f", "a", "h", "g", "b"}) {
		t.Errorf("Order(42) = %v", got)
	}
	o := Order(7, ids)
	if !slices.Equal(o, Order(7, rev)) {
		t.Errorf("order depends on the input's order: %v, %v", o, Order(7, rev))
	}
	if slices.Equal(o, Order(8, ids)) {
		t.Errorf("seeds 7 and 8 give the same order %v", o)
	}
	for _, c := range []struct {
		n    int
		p    float64
		want int
	}{{48, 25, 12}, {10, 25, 3}, {10, 24, 2}, {3, 10, 1}, {0, 50, 0}, {7, 100, 7}} {
		if got := Size(c.n, c.p); got != c.want && !(c.n == 0 && got <= 1) {
			t.Errorf("Size(%d, %v) = %d, want %d", c.n, c.p, got, c.want)
		}
	}
}

func point(p float64, n int, macro float64, labels ...PointLabel) Point {
	return Point{Percent: p, NTrain: n, MacroF1: macro, Accuracy: macro, Labels: labels}
}

func constNoise(band float64) Noise {
	return func(i, j int) (float64, map[string]float64) {
		return band, map[string]float64{"x": band}
	}
}

// TestJudge: curves whose answer is known. A rise beyond the noise is
// rising, and a label whose F1 follows 0.5 + 0.1 ln(n) exactly gets the
// count that formula gives for its F1 plus 0.05; a curve within the noise
// is flat from the earliest point within it; a wide noise band is
// unclear, never flat; a fall is a fall.
func TestJudge(t *testing.T) {
	f := func(n int) float64 { return 0.5 + 0.1*math.Log(float64(n)) }
	s := Schema{Schema: "s", NTest: 300, Points: []Point{
		point(25, 10, 0.60, PointLabel{Label: "x", NTrain: 10, F1: f(10), Support: 100}),
		point(50, 20, 0.70, PointLabel{Label: "x", NTrain: 20, F1: f(20), Support: 100}),
		point(100, 40, 0.78, PointLabel{Label: "x", NTrain: 40, F1: f(40), Support: 100}),
	}}
	Judge(&s, constNoise(0.03))
	want := "s: macro-F1 still rose 0.08 over the last half of the train split (50% to 100%, 20 to 40 items); the test split's noise is ±0.03 on 300 items: more annotations of this kind will likely help"
	if s.Verdict != Rising || s.Sentence != want {
		t.Errorf("%s: %q, want %q", s.Verdict, s.Sentence, want)
	}
	if d := s.Points[2].DMacroF1; d == nil || math.Abs(*d-0.08) > 1e-9 || s.Points[0].DMacroF1 != nil {
		t.Errorf("changes %v %v", s.Points[0].DMacroF1, d)
	}
	e := s.Labels[0].Estimate
	need := int(math.Ceil(math.Exp((f(40) + Step - 0.5) / 0.1)))
	if e == nil || math.Abs(e.A-0.5) > 1e-9 || math.Abs(e.B-0.1) > 1e-9 || e.NNeeded != need || e.More != need-40 {
		t.Errorf("estimate %+v, want %d in all", e, need)
	}
	if !strings.Contains(s.Labels[0].Sentence, "about 26 more annotations of x (66 in all) would take its F1 from 0.87 to 0.92, an extrapolation") {
		t.Errorf("label sentence %q", s.Labels[0].Sentence)
	}

	flat := Schema{Schema: "s", NTest: 300, Points: []Point{
		point(25, 10, 0.80), point(50, 20, 0.90), point(75, 30, 0.91), point(100, 40, 0.905),
	}}
	Judge(&flat, constNoise(0.02))
	if flat.Verdict != Flat || flat.FlatFrom != 50 || !strings.HasSuffix(flat.Sentence, "over the last half of the train split (50% to 100%, 20 to 40 items), +0.01, within the test split's noise of ±0.02 on 300 items: more of the same will not") {
		t.Errorf("%s from %v: %q", flat.Verdict, flat.FlatFrom, flat.Sentence)
	}
	Judge(&flat, constNoise(0.08))
	if flat.Verdict != Unclear || !strings.Contains(flat.Sentence, "within the test split's noise of ±0.08 on 300 items: the curve cannot tell") {
		t.Errorf("wide noise: %s: %q", flat.Verdict, flat.Sentence)
	}
	fall := Schema{Schema: "s", NTest: 300, Points: []Point{point(50, 20, 0.90), point(100, 40, 0.85)}}
	Judge(&fall, constNoise(0.02))
	if fall.Verdict != Falling || !strings.Contains(fall.Sentence, "macro-F1 fell 0.05 over the last half") {
		t.Errorf("%s: %q", fall.Verdict, fall.Sentence)
	}
}
