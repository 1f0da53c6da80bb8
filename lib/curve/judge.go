package curve

import (
	"fmt"
	"math"
)

// Verdicts.
const (
	Rising  = "rising"
	Flat    = "flat"
	Falling = "falling"
	Unclear = "unclear"
)

const (
	// Epsilon is the change of macro-F1 (or a label's F1) per doubling of
	// the training items within which a curve is flat: a flat verdict is
	// an equivalence test (two one-sided tests at 5%: the 90% interval
	// within ±Epsilon).
	Epsilon = 0.02
	// MinTest is the fewest test items (a label's: its test items) a curve
	// is judged on: below 1/Epsilon, one item moves accuracy by more than
	// Epsilon.
	MinTest = 50
	// MaxDF caps the degrees of freedom a Trend records.
	MaxDF = 1000
	// Step is the rise in F1 a label's estimate aims at.
	Step = 0.05
	// MaxFold is how far beyond its present count an estimate may reach.
	MaxFold = 10
	// FitPoints is how many of the last points the estimate's fit uses.
	FitPoints = 3
	// maxNeeded caps how many times the present test items or draws an
	// unclear curve's advice may name.
	maxNeeded = 100
)

// Scores are what Judge weighs beyond a schema's points: each draw's
// scores at each point, and the same on resamples of the test items.
type Scores struct {
	// Macro[i][d] is the macro-F1 of draw d at point i; Labels[l][i][d]
	// label l's F1.
	Macro  [][]float64
	Labels map[string][][]float64
	// Resample scores the same draws on resamples of the test items
	// (drawn with replacement, every point and draw on the same resample),
	// calling fn once per resample; nil leaves the test items' part at its
	// floor, the variance one item's worth of noise at each point gives.
	Resample func(fn func(macro [][]float64, labels map[string][][]float64))
}

// Judge fills in s's changes, standard errors, trends, verdicts and
// sentences from its points and sc. s's points must hold each point's
// figures (the means over the draws), and sc one row per point.
//
// The trend is the slope of the mean over the draws against log2 of the
// training items, over all the points. A curve is flat when its 90%
// interval is within ±Epsilon, rising when its 95% interval is above 0,
// falling when below, and unclear otherwise, or when it is scored on
// fewer than MinTest test items, or when its one draw of two points
// cannot measure the draws' part.
func Judge(s *Schema, sc Scores) {
	ps := s.Points
	for i := 1; i < len(ps); i++ {
		da, dm := ps[i].Accuracy-ps[i-1].Accuracy, ps[i].MacroF1-ps[i-1].MacroF1
		ps[i].DAccuracy, ps[i].DMacroF1 = &da, &dm
		prev := map[string]float64{}
		for _, l := range ps[i-1].Labels {
			prev[l.Label] = l.F1
		}
		for j := range ps[i].Labels {
			if f, ok := prev[ps[i].Labels[j].Label]; ok {
				d := ps[i].Labels[j].F1 - f
				ps[i].Labels[j].DF1 = &d
			}
		}
	}
	s.Labels = nil
	if len(ps) < 2 || len(sc.Macro) != len(ps) || len(sc.Macro[0]) == 0 {
		return
	}
	s.Draws = len(sc.Macro[0])
	k := len(ps) - 1
	xs := make([]float64, len(ps))
	for i, p := range ps {
		xs[i] = math.Log2(float64(max(p.NTrain, 1)))
	}
	var names []string
	for _, l := range ps[k].Labels {
		if sc.Labels[l.Label] != nil {
			names = append(names, l.Label)
		}
	}
	// The estimate's fit: each label's last FitPoints points with
	// training items, F1 against ln(n).
	fits := map[string]labelFit{}
	for _, name := range names {
		fits[name] = fitOf(ps, name)
	}

	// One pass over the resamples: the slope of the mean curve, each
	// point's mean, each label's slope and its estimate's.
	var macroBoot moments
	pointBoot := make([]moments, len(ps))
	labelBoot := map[string]*moments{}
	fitBoot := map[string]*moments{}
	for _, name := range names {
		labelBoot[name], fitBoot[name] = &moments{}, &moments{}
	}
	if sc.Resample != nil {
		sc.Resample(func(macro [][]float64, labels map[string][][]float64) {
			m := rowMeans(macro)
			b, _ := slope(xs, m)
			macroBoot.add(b)
			for i := range m {
				pointBoot[i].add(m[i])
			}
			for _, name := range names {
				y := labels[name]
				if y == nil {
					continue
				}
				b, _ := slope(xs, rowMeans(y))
				labelBoot[name].add(b)
				if f := fits[name]; len(f.idx) >= 2 {
					b, _ := slope(f.xs, rowMeans(pick(y, f.idx)))
					fitBoot[name].add(b)
				}
			}
		})
	}
	for i := range ps {
		ps[i].SETest = math.Sqrt(pointBoot[i].variance())
		if s.Draws > 1 {
			ps[i].SEDraws = math.Sqrt(sampleVar(sc.Macro[i]) / float64(s.Draws))
		}
	}

	t, tp := trendOf(xs, sc.Macro, macroBoot.variance(), s.NTest)
	s.Trend = t
	s.Verdict = verdictOf(t, s.NTest, tp)
	s.NTestNeeded, s.DrawsNeeded = 0, 0
	if s.Verdict == Unclear {
		s.NTestNeeded, s.DrawsNeeded = needs(t, tp, s.NTest, s.Draws)
	}
	span := spanText(ps)
	s.Sentence = s.Schema + ": " + sentence("macro-F1", s.Verdict, t, tp, span, s.NTest, "", s.Draws, s.NTestNeeded, s.DrawsNeeded) + ": " + advice(s.Verdict)

	for _, l := range ps[k].Labels {
		y := sc.Labels[l.Label]
		if y == nil {
			continue
		}
		lt, lp := trendOf(xs, y, labelBoot[l.Label].variance(), l.Support)
		lab := Label{Label: l.Label, Verdict: verdictOf(lt, l.Support, lp), Trend: lt}
		if lab.Verdict == Unclear {
			lab.NTestNeeded, lab.DrawsNeeded = needs(lt, lp, l.Support, s.Draws)
		}
		lab.Sentence = fmt.Sprintf("label %s: %s", l.Label,
			sentence("F1", lab.Verdict, lt, lp, span, l.Support, " of "+l.Label, s.Draws, lab.NTestNeeded, lab.DrawsNeeded))
		if lab.Verdict == Rising {
			lab.Estimate = estimate(ps, fits[l.Label], pick(y, fits[l.Label].idx), fitBoot[l.Label].variance(), l.Support)
			lab.Sentence += "; " + estimateText(lab.Estimate, l.Label, ps[k])
		}
		s.Labels = append(s.Labels, lab)
	}
}

func labelOf(p Point, label string) PointLabel {
	for _, l := range p.Labels {
		if l.Label == label {
			return l
		}
	}
	return PointLabel{Label: label}
}

// pick is the rows idx of y.
func pick(y [][]float64, idx []int) [][]float64 {
	out := make([][]float64, len(idx))
	for j, i := range idx {
		out[j] = y[i]
	}
	return out
}

// parts are what a trend's standard error was made of, for needs.
type parts struct {
	measured bool    // false when one draw of two points leaves the draws' part unknown
	vBoot    float64 // the variance of the slope over the resamples
	sxx      float64 // of the xs
}

// floorVar is the least variance the test items give a slope: one item's
// worth of noise, 1/nTest, at each point. The bootstrap says 0 where no
// resample moves the scores, as with points that predict a few test items
// alike.
func floorVar(nTest int, sxx float64) float64 {
	return 1 / (float64(nTest) * float64(nTest) * sxx)
}

// trendOf is the trend of y[point][draw] against xs, vBoot the variance of
// its slope over the resamples of nTest test items.
func trendOf(xs []float64, y [][]float64, vBoot float64, nTest int) (Trend, parts) {
	b, sxx := slope(xs, rowMeans(y))
	t := Trend{PerDoubling: b}
	p := parts{vBoot: vBoot, sxx: sxx}
	if sxx == 0 {
		return t, p
	}
	vt := math.Max(vBoot, floorVar(nTest, sxx))
	dft := math.Inf(1)
	if nTest > 1 {
		dft = float64(nTest - 1)
	}
	var vd, dfd float64
	draws := len(y[0])
	switch {
	case draws > 1:
		slopes := make([]float64, draws)
		for d := range draws {
			slopes[d], _ = slope(xs, column(y, d))
		}
		vd, dfd = sampleVar(slopes)/float64(draws), float64(draws-1)
	case len(xs) > 2:
		vd, dfd = residualVar(xs, column(y, 0)), float64(len(xs)-2)
	default:
		t.SETest = math.Sqrt(vt)
		return t, p
	}
	df := satterthwaite(vt, dft, vd, dfd)
	se := math.Sqrt(vt + vd)
	t95, t90 := tQuantile(0.975, df), tQuantile(0.95, df)
	t.SETest, t.SEDraws, t.DF = math.Sqrt(vt), math.Sqrt(vd), math.Min(df, MaxDF)
	t.Low, t.High = b-t95*se, b+t95*se
	t.Low90, t.High90 = b-t90*se, b+t90*se
	p.measured = true
	return t, p
}

func verdictOf(t Trend, nTest int, p parts) string {
	switch {
	case nTest < MinTest || !p.measured:
		return Unclear
	case t.Low90 > -Epsilon && t.High90 < Epsilon:
		return Flat
	case t.Low > 0:
		return Rising
	case t.High < 0:
		return Falling
	}
	return Unclear
}

// needs is about how many test items, the draws as they are, or how many
// draws, the test items as they are, would settle an unclear trend, were
// its slope and its parts' variances per item and per draw to stay: its
// 95% interval clear of 0, or its 90% interval within ±Epsilon. 0 where
// that alone would not, or would take more than maxNeeded times as many
// (or more draws than MaxDraws). Never fewer test items than MinTest.
func needs(t Trend, p parts, nTest, draws int) (items, more int) {
	if p.sxx == 0 {
		return 0, 0
	}
	if !p.measured && nTest >= MinTest {
		return 0, max(3, draws+1)
	}
	vt, vd := t.SETest*t.SETest, t.SEDraws*t.SEDraws
	dft, dfd := math.Inf(1), float64(draws-1)
	if nTest > 1 {
		dft = float64(nTest - 1)
	}
	if draws == 1 {
		dfd = 1 // one draw's scatter: as if two draws
	}
	settles := func(vt, dft, vd, dfd float64) bool {
		df := satterthwaite(vt, dft, vd, dfd)
		se := math.Sqrt(vt + vd)
		b := t.PerDoubling
		return math.Abs(b)-tQuantile(0.975, df)*se > 0 || math.Abs(b)+tQuantile(0.95, df)*se < Epsilon
	}
	for n := max(nTest+1, MinTest); n <= maxNeeded*max(nTest, 1); n = next(n) {
		if settles(math.Max(p.vBoot*float64(nTest)/float64(n), floorVar(n, p.sxx)), float64(n-1), vd, dfd) {
			items = n
			break
		}
	}
	if nTest < MinTest && items == 0 {
		items = MinTest
	}
	if nTest >= MinTest {
		for r := draws + 1; r <= MaxDraws; r++ {
			if settles(vt, dft, vd*float64(draws)/float64(r), float64(r-1)) {
				more = r
				break
			}
		}
	}
	return items, more
}

// next is the next count needs tries after n: n+1 while small, then
// about 5% more, rounded to a round number.
func next(n int) int {
	if n < 100 {
		return n + 1
	}
	step := int(math.Pow(10, math.Floor(math.Log10(float64(n)/20))))
	return (n/step + max(1, n/20/step)) * step
}
