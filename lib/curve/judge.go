package curve

import (
	"fmt"
	"math"
	"strings"
)

// Curve is run.json's curve: the points a curve run was asked for and,
// once it is scored, each schema's curve. New fields may be added.
type Curve struct {
	// Points are percentages of each schema's labelled train items.
	Points []float64 `json:"points"`
	// Seed orders the items (Order): the spec's seed.
	Seed int64 `json:"seed"`
	// Draws is how many nested draws the trainer was asked to fit at each
	// point (DrawSeed); absent in a curve of one draw made before draws.
	Draws int `json:"draws,omitempty"`
	// Metric is the score the sentences judge: macro_f1.
	Metric string `json:"metric,omitempty"`
	// Epsilon is the change of the metric per doubling of the training
	// items within which a curve is flat (Judge).
	Epsilon float64  `json:"epsilon,omitempty"`
	Schemas []Schema `json:"schemas,omitempty"`
}

// Schema is one schema's curve.
type Schema struct {
	Schema string `json:"schema"`
	Kind   string `json:"kind"`
	// NTrainSplit is the schema's labelled items in the train split, 100%.
	NTrainSplit int `json:"n_train_split"`
	// NTest is the test items with a label for the schema: every point is
	// scored on the same ones.
	NTest int `json:"n_test"`
	// Draws is how many draws were fitted and scored at every point.
	Draws  int     `json:"draws"`
	Points []Point `json:"points"`
	// Verdict is rising, flat, falling or unclear (Judge).
	Verdict string `json:"verdict"`
	// Trend is macro-F1's change per doubling of the training items over
	// all the points, with its uncertainty.
	Trend Trend `json:"trend"`
	// NTestNeeded and DrawsNeeded, for an unclear curve, are about how
	// many labelled test items (the draws as they are) or how many draws
	// (the test split as it is) would tell, were the trend to stay as it
	// is; absent where that alone would not.
	NTestNeeded int     `json:"n_test_needed,omitempty"`
	DrawsNeeded int     `json:"draws_needed,omitempty"`
	Sentence    string  `json:"sentence"`
	Labels      []Label `json:"labels"`
}

// Trend is the least-squares slope of a score, averaged over the draws,
// against log2 of each point's training items: its change per doubling of
// them. Its uncertainty has two parts: SETest, from which items the test
// split holds (a paired bootstrap of the test items, every point and
// draw resampled together), and SEDraws, from which training items the
// draws took (the spread of the draws' own slopes over √draws; with one
// draw, the scatter of its points about its line). Low and High bound its
// 95% interval, Low90 and High90 its 90% one, with Student's t at DF
// degrees of freedom (Welch-Satterthwaite; at most 1000).
type Trend struct {
	PerDoubling float64 `json:"per_doubling"`
	SETest      float64 `json:"se_test"`
	SEDraws     float64 `json:"se_draws"`
	DF          float64 `json:"df"`
	Low         float64 `json:"low"`
	High        float64 `json:"high"`
	Low90       float64 `json:"low90"`
	High90      float64 `json:"high90"`
}

// Point is the score of the models fitted at one point: the mean over
// its draws.
type Point struct {
	Percent float64 `json:"percent"`
	NTrain  int     `json:"n_train"`
	// NMissing is the test items without a prediction, in the draw that
	// missed most.
	NMissing int     `json:"n_missing"`
	Accuracy float64 `json:"accuracy"`
	MacroF1  float64 `json:"macro_f1"`
	// SETest and SEDraws are the two parts of MacroF1's standard error:
	// the test items' and the draws' (the draws' spread over √draws; 0
	// with one draw).
	SETest  float64 `json:"se_test"`
	SEDraws float64 `json:"se_draws"`
	// Draws are each draw's scores.
	Draws []DrawScore `json:"draws,omitempty"`
	// DAccuracy and DMacroF1 are the changes from the previous point;
	// absent at the first.
	DAccuracy *float64     `json:"d_accuracy,omitempty"`
	DMacroF1  *float64     `json:"d_macro_f1,omitempty"`
	Labels    []PointLabel `json:"labels"`
}

// DrawScore is one draw's score at one point.
type DrawScore struct {
	Draw     int     `json:"draw"`
	Accuracy float64 `json:"accuracy"`
	MacroF1  float64 `json:"macro_f1"`
}

// PointLabel is one label's score at one point, the mean over its draws.
type PointLabel struct {
	Label string `json:"label"`
	// NTrain is the point's training items with the label (the mean
	// over the draws, rounded).
	NTrain int `json:"n_train"`
	// Support is the test items with the label.
	Support   int      `json:"support"`
	Precision float64  `json:"precision"`
	Recall    float64  `json:"recall"`
	F1        float64  `json:"f1"`
	DF1       *float64 `json:"d_f1,omitempty"`
}

// Label is the judgement of one label's F1 over the curve.
type Label struct {
	Label       string    `json:"label"`
	Verdict     string    `json:"verdict"`
	Trend       Trend     `json:"trend"`
	NTestNeeded int       `json:"n_test_needed,omitempty"`
	DrawsNeeded int       `json:"draws_needed,omitempty"`
	Sentence    string    `json:"sentence"`
	Estimate    *Estimate `json:"estimate,omitempty"`
}

// Estimate is how many more training items with a label its F1 would need
// to reach Target, were F1 = A + B ln(n) to hold beyond the last points,
// n the label's training items. It is an extrapolation.
type Estimate struct {
	Target float64 `json:"target"`
	NNow   int     `json:"n_now"`
	// NNeeded is 0, and More too, when the fit puts Target beyond
	// MaxFold times NNow: the curve cannot say.
	NNeeded int `json:"n_needed,omitempty"`
	More    int `json:"more,omitempty"`
	// MoreLow and MoreHigh bound More by the 95% interval of B, BLow to
	// BHigh (its test items' and its draws' parts, as Trend's); MoreHigh
	// is absent when BLow puts Target beyond MaxFold times NNow, or
	// never reaches it.
	MoreLow  int       `json:"more_low,omitempty"`
	MoreHigh int       `json:"more_high,omitempty"`
	A        float64   `json:"a"`
	B        float64   `json:"b"`
	BLow     float64   `json:"b_low"`
	BHigh    float64   `json:"b_high"`
	Fitted   []float64 `json:"fitted"` // the points the fit used
}

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

// spanText names the span of the curve: "25% to 100% of the train split
// (12 to 48 items)".
func spanText(ps []Point) string {
	first, last := ps[0], ps[len(ps)-1]
	return fmt.Sprintf("%s%% to %s%% of the train split (%d to %d items)", Format(first.Percent), Format(last.Percent), first.NTrain, last.NTrain)
}

// noiseText gives the trend's two standard errors: "s.e. 0.010 from the
// 392 test items, 0.011 from the 3 draws".
func noiseText(t Trend, nTest int, of string, draws int) string {
	d := fmt.Sprintf("%.3f from the %d draws", t.SEDraws, draws)
	if draws == 1 {
		d = fmt.Sprintf("%.3f from the one draw's scatter", t.SEDraws)
	}
	return fmt.Sprintf("s.e. %.3f from the %d test items%s, %s", t.SETest, nTest, of, d)
}

func sentence(metric, verdict string, t Trend, p parts, span string, nTest int, of string, draws int, items, more int) string {
	per := fmt.Sprintf("%+.3f per doubling of the training items", t.PerDoubling)
	switch {
	case p.sxx == 0:
		return fmt.Sprintf("%s over %s: every point fitted as many items, so there is no trend to judge; give points further apart", metric, span)
	case nTest < MinTest:
		return fmt.Sprintf("%s %s over %s, scored on %d test items%s: too few to judge a curve, since one item moves it by more than ±%.2f; it would need at least %d",
			metric, per, span, nTest, of, Epsilon, items)
	case !p.measured:
		return fmt.Sprintf("%s %s over %s: one draw of two points cannot measure how much the choice of training items moves it; fit %d draws or more points",
			metric, per, span, more)
	}
	noise := noiseText(t, nTest, of, draws)
	switch verdict {
	case Rising:
		return fmt.Sprintf("%s rises %s over %s, 95%% interval %+.3f to %+.3f (%s)", metric, per, span, t.Low, t.High, noise)
	case Falling:
		return fmt.Sprintf("%s falls %s over %s, 95%% interval %+.3f to %+.3f, beyond the noise of both the test items and the draws (%s)", metric, per, span, t.Low, t.High, noise)
	case Flat:
		return fmt.Sprintf("%s is flat over %s: %s, 90%% interval %+.3f to %+.3f, within ±%.2f (%s)", metric, span, per, t.Low90, t.High90, Epsilon, noise)
	}
	out := fmt.Sprintf("%s changes %s over %s, 95%% interval %+.3f to %+.3f (%s): it cannot tell a rise from a flat curve (within ±%.2f)",
		metric, per, span, t.Low, t.High, noise, Epsilon)
	var ways []string
	if items > 0 {
		ways = append(ways, fmt.Sprintf("about %d labelled test items%s (it has %d)", items, of, nTest))
	}
	if more > 0 {
		ways = append(ways, fmt.Sprintf("%d draws", more))
	}
	if len(ways) > 0 {
		out += fmt.Sprintf("; were it to stay at %+.3f, %s would tell", t.PerDoubling, strings.Join(ways, " or "))
	}
	return out
}

func advice(verdict string) string {
	switch verdict {
	case Rising:
		return "more annotations of this kind will likely help"
	case Falling:
		return "more of the same will not help; look for inconsistent labels"
	case Unclear:
		return "the curve cannot tell whether more annotations would help"
	}
	return "more of the same will not help"
}

// labelFit is the points an estimate fits: the indexes of the label's last
// FitPoints points with training items, and ln of those items.
type labelFit struct {
	idx []int
	xs  []float64
}

func fitOf(ps []Point, label string) labelFit {
	var f labelFit
	k := len(ps) - 1
	for i := max(0, k+1-FitPoints); i <= k; i++ {
		if n := labelOf(ps[i], label).NTrain; n > 0 {
			f.idx = append(f.idx, i)
			f.xs = append(f.xs, math.Log(float64(n)))
		}
	}
	return f
}

// estimate fits F1 = A + B ln(n) to the label's mean F1 at the fit's
// points and solves it for the last F1 plus Step; B's 95% interval, from
// the resampled slopes' variance vBoot and the draws' spread, bounds the
// count.
func estimate(ps []Point, f labelFit, y [][]float64, vBoot float64, support int) *Estimate {
	if len(f.idx) < 2 {
		return nil
	}
	var fitted []float64
	for _, i := range f.idx {
		fitted = append(fitted, ps[i].Percent)
	}
	m := rowMeans(y)
	b, sxx := slope(f.xs, m)
	if sxx == 0 {
		return nil
	}
	mx, my := mean(f.xs), mean(m)
	lastF1 := m[len(m)-1]
	e := &Estimate{Target: lastF1 + Step, NNow: int(math.Round(math.Exp(f.xs[len(f.xs)-1]))), Fitted: fitted, B: b, A: my - b*mx}
	t, tp := trendOf(f.xs, y, vBoot, support)
	e.BLow, e.BHigh = b, b
	if tp.measured {
		e.BLow, e.BHigh = t.Low, t.High
	}
	if e.B <= 0 || e.Target > 1 {
		return e
	}
	// n(B) solves A + B ln(n) = Target with the line through the fit's
	// mean: a steeper B needs fewer.
	need := func(b float64) (int, bool) {
		if b <= 0 {
			return 0, false
		}
		n := math.Exp(mx + (e.Target-my)/b)
		if n > float64(MaxFold*e.NNow) {
			return 0, false
		}
		return max(1, int(math.Ceil(n))-e.NNow), true
	}
	more, ok := need(e.B)
	if !ok {
		return e
	}
	e.More = more
	e.NNeeded = e.NNow + e.More
	e.MoreLow, _ = need(e.BHigh)
	e.MoreLow = min(max(e.MoreLow, 1), e.More)
	if hi, ok := need(e.BLow); ok {
		e.MoreHigh = max(hi, e.More)
	}
	return e
}

func estimateText(e *Estimate, label string, last Point) string {
	l := labelOf(last, label)
	switch {
	case e == nil:
		return "too few points to estimate how many more it needs"
	case e.Target > 1:
		return fmt.Sprintf("at %.2f it is within %.2f of the ceiling: no estimate", l.F1, Step)
	case e.B <= 0:
		return "its last points do not fit a rise with log(n): no estimate"
	case e.More == 0:
		return fmt.Sprintf("reaching F1 %.2f would take more than %d times its %d training items: the curve cannot say how many", e.Target, MaxFold, e.NNow)
	}
	items := ""
	if last.NTrain > 0 && l.NTrain > 0 && l.NTrain < last.NTrain {
		items = fmt.Sprintf(", about %d more items at its present share of %.0f%%", int(math.Ceil(float64(e.More)*float64(last.NTrain)/float64(l.NTrain))), 100*float64(l.NTrain)/float64(last.NTrain))
	}
	noun := "annotations"
	if e.More == 1 {
		noun = "annotation"
	}
	// Beyond MaxFold times its count, or where the slope's interval
	// reaches no rise at all, the curve cannot say how many.
	interval := fmt.Sprintf("95%% interval %d to over %d", e.MoreLow, MaxFold*e.NNow-e.NNow)
	if e.MoreHigh > 0 {
		interval = fmt.Sprintf("95%% interval %d to %d", e.MoreLow, e.MoreHigh)
	}
	return fmt.Sprintf("about %d more %s of %s (%s; %d in all%s) would take its F1 from %.2f to %.2f, an extrapolation: F1 = %.2f + %.3f ln(n) fitted to the points %s%%, assuming new items like these and the same test split",
		e.More, noun, label, interval, e.NNeeded, items, l.F1, e.Target, e.A, e.B, joinPoints(e.Fitted))
}

func joinPoints(ps []float64) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = Format(p)
	}
	return strings.Join(s, ", ")
}
