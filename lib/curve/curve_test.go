package curve

import (
	"fmt"
	"math"
	"math/rand/v2"
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

// TestDraws: a curve asks for 1 to MaxDraws draws, and draw d takes the
// order of seed + d, draw 0 that of the seed.
func TestDraws(t *testing.T) {
	for _, n := range []int{1, MaxDraws} {
		if err := CheckDraws(n); err != nil {
			t.Errorf("CheckDraws(%d): %v", n, err)
		}
	}
	for _, n := range []int{0, -1, MaxDraws + 1} {
		if err := CheckDraws(n); err == nil || err.Error() != fmt.Sprintf("a curve has 1 to 20 draws, not %d", n) {
			t.Errorf("CheckDraws(%d): %v", n, err)
		}
	}
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	if !slices.Equal(Order(DrawSeed(42, 0), ids), Order(42, ids)) || !slices.Equal(Order(DrawSeed(42, 3), ids), Order(45, ids)) {
		t.Errorf("draw seeds: %d %d", DrawSeed(42, 0), DrawSeed(42, 3))
	}
}

// TestTQuantile: Student's t against its tables, and the normal at +Inf.
func TestTQuantile(t *testing.T) {
	for _, c := range []struct{ p, df, want float64 }{
		{0.975, 1, 12.706}, {0.975, 2, 4.303}, {0.975, 4, 2.776}, {0.95, 4, 2.132}, {0.975, 7, 2.365},
		{0.95, 10, 1.812}, {0.975, 30, 2.042}, {0.975, 2.5, 3.575}, {0.975, math.Inf(1), 1.960}, {0.95, math.Inf(1), 1.645},
	} {
		if got := tQuantile(c.p, c.df); math.Abs(got-c.want) > 0.002 {
			t.Errorf("tQuantile(%v, %v) = %.4f, want %.3f", c.p, c.df, got, c.want)
		}
	}
	if df := satterthwaite(1, 4, 1, 4); math.Abs(df-8) > 1e-9 {
		t.Errorf("two equal variances of 4 df each: %v, want 8", df)
	}
	if df := satterthwaite(1, math.Inf(1), 0, 2); !math.IsInf(df, 1) {
		t.Errorf("a known variance alone: %v, want +Inf", df)
	}
}

// synth is a curve whose answer is known: at training items ns, draw d
// scores f(n) + drawNoise[d][i] in macro-F1 and in label x's F1, and each
// resample of the test items moves every point of every draw by the same
// normal noise of s.d. testSD, so that the test items' standard error of
// the slope is testSD times the s.d. of a slope of independent unit
// noise. A zero testSD resamples to the scores themselves.
type synth struct {
	ns        []int
	f         func(n float64) float64
	drawNoise [][]float64 // [draw][point]
	testSD    float64
	nTest     int
}

func (c synth) schema() (Schema, Scores) {
	s := Schema{Schema: "s", Kind: "radio", NTrainSplit: c.ns[len(c.ns)-1], NTest: c.nTest}
	draws := len(c.drawNoise)
	y := make([][]float64, len(c.ns))
	for i, n := range c.ns {
		y[i] = make([]float64, draws)
		for d := range draws {
			y[i][d] = c.f(float64(n)) + c.drawNoise[d][i]
		}
		m := mean(y[i])
		s.Points = append(s.Points, Point{Percent: 100 * float64(n) / float64(c.ns[len(c.ns)-1]), NTrain: n, Accuracy: m, MacroF1: m,
			Labels: []PointLabel{{Label: "x", NTrain: n / 2, Support: c.nTest / 2, F1: m}}})
	}
	rng := rand.New(rand.NewPCG(7, 7))
	sc := Scores{Macro: y, Labels: map[string][][]float64{"x": y}}
	sc.Resample = func(fn func(macro [][]float64, labels map[string][][]float64)) {
		r := make([][]float64, len(y))
		for range 1000 {
			for i := range y {
				e := rng.NormFloat64() * c.testSD
				r[i] = make([]float64, draws)
				for d := range draws {
					r[i][d] = y[i][d] + e
				}
			}
			fn(r, map[string][][]float64{"x": r})
		}
	}
	return s, sc
}

// spread is draws of noise whose slopes differ: draw d adds +a or -a at
// the first point, alternating, and nothing elsewhere.
func spread(draws, points int, a float64) [][]float64 {
	out := make([][]float64, draws)
	for d := range out {
		out[d] = make([]float64, points)
		out[d][0] = a
		if d%2 == 1 {
			out[d][0] = -a
		}
	}
	return out
}

// TestJudge is the judge's table: curves whose answer is known.
func TestJudge(t *testing.T) {
	quarter := []int{12, 24, 36, 48}
	for _, c := range []struct {
		name  string
		curve synth
		want  string
		check func(t *testing.T, s Schema)
	}{
		{
			// +0.08 per doubling, the draws' slopes within ±0.01 of each
			// other and the test items' noise 0.01 a point: rising, with
			// both parts of its error reported; the label's estimate of
			// what the next 0.05 of F1 needs keeps its interval.
			name:  "clear rise",
			curve: synth{quarter, func(n float64) float64 { return 0.3 + 0.08*math.Log2(n) }, spread(8, 4, 0.01), 0.01, 300},
			want:  Rising,
			check: func(t *testing.T, s Schema) {
				tr := s.Trend
				if math.Abs(tr.PerDoubling-0.08) > 1e-9 || tr.SETest < 0.005 || tr.SETest > 0.012 || tr.SEDraws <= 0 || tr.Low <= 0 || tr.High <= tr.PerDoubling {
					t.Errorf("trend %+v", tr)
				}
				if !strings.HasPrefix(s.Sentence, "s: macro-F1 rises +0.080 per doubling of the training items over 25% to 100% of the train split (12 to 48 items), 95% interval +0.0") ||
					!strings.Contains(s.Sentence, " from the 300 test items, ") || !strings.Contains(s.Sentence, " from the 8 draws): more annotations of this kind will likely help") {
					t.Errorf("sentence %q", s.Sentence)
				}
				p := s.Points[0]
				if p.SETest < 0.005 || p.SETest > 0.015 || math.Abs(p.SEDraws-0.01*math.Sqrt(8.0/7)/math.Sqrt(8)) > 1e-9 || s.Points[3].SEDraws != 0 {
					t.Errorf("point 25%%: s.e. %v from the test items, %v from the draws", p.SETest, p.SEDraws)
				}
				e := s.Labels[0].Estimate
				if s.Labels[0].Verdict != Rising || e == nil {
					t.Fatalf("label %+v", s.Labels[0])
				}
				// F1 = 0.3 + 0.08 log2(2n) at n label items: a slope of
				// 0.08/ln 2 in ln(n), and the next 0.05 at n exp(0.05/b).
				b := 0.08 / math.Ln2
				need := int(math.Ceil(24*math.Exp(0.05/b))) - 24
				if math.Abs(e.B-b) > 1e-9 || e.More != need || e.MoreLow < 1 || e.MoreLow > e.More || e.MoreHigh < e.More || e.BLow >= b || e.BHigh <= b {
					t.Errorf("estimate %+v, want %d more", e, need)
				}
				want := fmt.Sprintf("about %d more annotations of x (95%% interval %d to %d; %d in all", need, e.MoreLow, e.MoreHigh, 24+need)
				if !strings.Contains(s.Labels[0].Sentence, want) || !strings.Contains(s.Labels[0].Sentence, "an extrapolation") {
					t.Errorf("label sentence %q, want %q", s.Labels[0].Sentence, want)
				}
			},
		},
		{
			// +0.004 per doubling, both parts small: the 90% interval is
			// within ±0.02, an equivalence shown, and said so.
			name:  "flat within epsilon",
			curve: synth{quarter, func(n float64) float64 { return 0.9 + 0.004*math.Log2(n) }, spread(8, 4, 0.004), 0.004, 300},
			want:  Flat,
			check: func(t *testing.T, s Schema) {
				if s.Trend.Low90 <= -Epsilon || s.Trend.High90 >= Epsilon {
					t.Errorf("trend %+v", s.Trend)
				}
				if !strings.HasPrefix(s.Sentence, "s: macro-F1 is flat over 25% to 100% of the train split (12 to 48 items): +0.004 per doubling of the training items, 90% interval ") ||
					!strings.Contains(s.Sentence, ", within ±0.02 (s.e. ") || !strings.HasSuffix(s.Sentence, ": more of the same will not help") {
					t.Errorf("sentence %q", s.Sentence)
				}
			},
		},
		{
			// The curve: +0.077, +0.046, +0.034 a step, but the
			// draws disagree (one of them falls): not significant, and not
			// shown flat either, so unclear, never flat; the sentence says
			// how many draws or test items would tell.
			name: "noisy rise",
			curve: synth{[]int{12, 24, 48, 96}, func(n float64) float64 {
				return map[float64]float64{12: 0.80, 24: 0.877, 48: 0.923, 96: 0.957}[n]
			}, [][]float64{{0.08, 0, 0, 0}, {-0.08, 0, 0, 0}, {0.10, 0, 0, 0.02}}, 0.02, 300},
			want: Unclear,
			check: func(t *testing.T, s Schema) {
				if s.Trend.Low >= 0 || s.Trend.PerDoubling <= 0 {
					t.Errorf("trend %+v", s.Trend)
				}
				if s.DrawsNeeded <= 3 && s.NTestNeeded <= 300 {
					t.Errorf("needs %d test items, %d draws", s.NTestNeeded, s.DrawsNeeded)
				}
				if !strings.Contains(s.Sentence, ": it cannot tell a rise from a flat curve (within ±0.02); were it to stay at +0.0") ||
					!strings.HasSuffix(s.Sentence, " would tell: the curve cannot tell whether more annotations would help") {
					t.Errorf("sentence %q", s.Sentence)
				}
			},
		},
		{
			// 60 labelled items in all: 10 test items that every point
			// predicts alike. The bootstrap says 0, but one item is worth
			// 0.1: unclear, and how many test items it would need.
			name:  "tiny test split",
			curve: synth{[]int{11, 22, 33, 44}, func(n float64) float64 { return 0.8 }, spread(8, 4, 0), 0, 10},
			want:  Unclear,
			check: func(t *testing.T, s Schema) {
				// One item's worth at each point: 0.1/√Sxx, Sxx 2.26 for
				// log2 of 11, 22, 33 and 44; and at n items 1/(n√Sxx),
				// whose 90% interval is within ±0.02 from 56 on.
				if math.Abs(s.Trend.SETest-0.1/math.Sqrt(2.2569)) > 1e-3 || s.NTestNeeded != 56 {
					t.Errorf("trend %+v, needs %d test items", s.Trend, s.NTestNeeded)
				}
				want := "s: macro-F1 +0.000 per doubling of the training items over 25% to 100% of the train split (11 to 44 items), scored on 10 test items: too few to judge a curve, since one item moves it by more than ±0.02; it would need at least 56: the curve cannot tell whether more annotations would help"
				if s.Sentence != want {
					t.Errorf("sentence %q\nwant     %q", s.Sentence, want)
				}
				if l := s.Labels[0]; l.Verdict != Unclear || l.NTestNeeded < MinTest || !strings.Contains(l.Sentence, "scored on 5 test items of x: too few") {
					t.Errorf("label %+v", l)
				}
			},
		},
		{
			// A fall beyond both parts: falling, and only then the advice
			// to look for inconsistent labels.
			name:  "clear fall",
			curve: synth{quarter, func(n float64) float64 { return 0.95 - 0.06*math.Log2(n/12) }, spread(8, 4, 0.01), 0.01, 300},
			want:  Falling,
			check: func(t *testing.T, s Schema) {
				if !strings.Contains(s.Sentence, "macro-F1 falls -0.060 per doubling") || !strings.HasSuffix(s.Sentence, "look for inconsistent labels") {
					t.Errorf("sentence %q", s.Sentence)
				}
			},
		},
		{
			// A fall the draws' spread covers is no fall: unclear.
			name:  "noisy fall",
			curve: synth{quarter, func(n float64) float64 { return 0.9 - 0.03*math.Log2(n/12) }, spread(3, 4, -0.1), 0.01, 300},
			want:  Unclear,
			check: func(t *testing.T, s Schema) {
				if strings.Contains(s.Sentence, "inconsistent") {
					t.Errorf("sentence %q", s.Sentence)
				}
			},
		},
		{
			// One draw of two points cannot measure the draws' part.
			name:  "one draw of two points",
			curve: synth{[]int{24, 48}, func(n float64) float64 { return 0.5 + 0.1*math.Log2(n) }, [][]float64{{0, 0}}, 0.005, 300},
			want:  Unclear,
			check: func(t *testing.T, s Schema) {
				if s.DrawsNeeded != 3 || !strings.Contains(s.Sentence, "one draw of two points cannot measure how much the choice of training items moves it; fit 3 draws or more points") {
					t.Errorf("needs %d draws: %q", s.DrawsNeeded, s.Sentence)
				}
			},
		},
		{
			// One draw of four points: its scatter about its line stands
			// in for the draws' spread, with 2 degrees of freedom.
			name:  "one draw of four points",
			curve: synth{quarter, func(n float64) float64 { return 0.2 + 0.1*math.Log2(n) }, [][]float64{{0.01, -0.01, -0.01, 0.01}}, 0.005, 300},
			want:  Rising,
			check: func(t *testing.T, s Schema) {
				if s.Trend.SEDraws <= 0 || s.Trend.DF > 3 || !strings.Contains(s.Sentence, " from the one draw's scatter)") {
					t.Errorf("trend %+v: %q", s.Trend, s.Sentence)
				}
			},
		},
		{
			// Points of as many items (10% and 11% of 40) have no trend.
			name:  "points of as many items",
			curve: synth{[]int{4, 4}, func(n float64) float64 { return 0.8 }, spread(3, 2, 0.01), 0.01, 300},
			want:  Unclear,
			check: func(t *testing.T, s Schema) {
				if !strings.Contains(s.Sentence, ": every point fitted as many items, so there is no trend to judge; give points further apart") {
					t.Errorf("sentence %q", s.Sentence)
				}
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, sc := c.curve.schema()
			Judge(&s, sc)
			t.Logf("%s", s.Sentence)
			for _, l := range s.Labels {
				t.Logf("  %s", l.Sentence)
			}
			if s.Verdict != c.want {
				t.Errorf("verdict %s, want %s: %q", s.Verdict, c.want, s.Sentence)
			}
			if s.Draws != len(c.curve.drawNoise) {
				t.Errorf("draws %d", s.Draws)
			}
			if (s.Verdict == Unclear) == (s.NTestNeeded == 0 && s.DrawsNeeded == 0) && c.name != "noisy fall" && c.name != "points of as many items" {
				t.Errorf("verdict %s with %d test items and %d draws needed", s.Verdict, s.NTestNeeded, s.DrawsNeeded)
			}
			c.check(t, s)
		})
	}
}

// TestWrite: the report's header names the draws, and its table gives
// macro-F1's two standard errors, the draws' as "-" with one draw; a
// curve recorded before draws had one.
func TestWrite(t *testing.T) {
	s, sc := synth{[]int{12, 24, 36, 48}, func(n float64) float64 { return 0.2 + 0.1*math.Log2(n) }, spread(8, 4, 0.01), 0.005, 300}.schema()
	Judge(&s, sc)
	one, osc := synth{[]int{12, 24, 36, 48}, func(n float64) float64 { return 0.2 + 0.1*math.Log2(n) }, [][]float64{{0.01, -0.01, -0.01, 0.01}}, 0.005, 300}.schema()
	Judge(&one, osc)
	old := one
	old.Draws = 0
	var b strings.Builder
	if err := Write(&b, Curve{Schemas: []Schema{s, one, old}}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	p := s.Points[0]
	for _, want := range []string{
		"s (radio): 48 labelled items in the train split, 8 draws at each point, scored on 300 test items\n",
		"  POINT  ITEMS  ACCURACY  CHANGE  MACRO-F1  SE TEST  SE DRAWS  CHANGE  F1 X (ITEMS)  CHANGE\n",
		fmt.Sprintf("  25%%    12     %.3f     -       %.3f     %.3f    %.3f     -       %.3f (6)     -\n", p.Accuracy, p.MacroF1, p.SETest, p.SEDraws, p.MacroF1),
		"\n" + s.Sentence + "\n  " + s.Labels[0].Sentence + "\n",
		"s (radio): 48 labelled items in the train split, 1 draw at each point, scored on 300 test items\n",
		fmt.Sprintf("  25%%    12     %.3f     -       %.3f     %.3f    -         -  ", one.Points[0].Accuracy, one.Points[0].MacroF1, one.Points[0].SETest),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "1 draw at each point") != 2 {
		t.Errorf("a curve recorded before draws:\n%s", out)
	}
}
