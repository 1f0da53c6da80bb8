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
	// Metric is the score the sentences judge: macro_f1.
	Metric  string   `json:"metric,omitempty"`
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
	NTest  int     `json:"n_test"`
	Points []Point `json:"points"`
	// Verdict is rising, flat, falling or unclear (Judge).
	Verdict string `json:"verdict"`
	// Change is the macro-F1 of the last point less that of the point
	// before it; Noise, the half-width of the band within which such a
	// change is the test split's noise (two standard errors).
	Change float64 `json:"change"`
	Noise  float64 `json:"noise"`
	// FlatFrom is the point from which the curve is flat, when it is.
	FlatFrom float64 `json:"flat_from,omitempty"`
	Sentence string  `json:"sentence"`
	Labels   []Label `json:"labels"`
}

// Point is the score of the model fitted at one point.
type Point struct {
	Percent  float64 `json:"percent"`
	NTrain   int     `json:"n_train"`
	NMissing int     `json:"n_missing"`
	Accuracy float64 `json:"accuracy"`
	MacroF1  float64 `json:"macro_f1"`
	// DAccuracy and DMacroF1 are the changes from the previous point;
	// absent at the first.
	DAccuracy *float64     `json:"d_accuracy,omitempty"`
	DMacroF1  *float64     `json:"d_macro_f1,omitempty"`
	Labels    []PointLabel `json:"labels"`
}

// PointLabel is one label's score at one point.
type PointLabel struct {
	Label string `json:"label"`
	// NTrain is the point's training items with the label.
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
	Label    string    `json:"label"`
	Verdict  string    `json:"verdict"`
	Change   float64   `json:"change"`
	Noise    float64   `json:"noise"`
	Sentence string    `json:"sentence"`
	Estimate *Estimate `json:"estimate,omitempty"`
}

// Estimate is how many more training items with a label its F1 would need
// to reach Target, were F1 = A + B ln(n) to hold beyond the last points,
// n the label's training items. It is an extrapolation.
type Estimate struct {
	Target float64 `json:"target"`
	NNow   int     `json:"n_now"`
	// NNeeded is 0, and More too, when the fit puts Target beyond
	// MaxFold times NNow: the curve cannot say.
	NNeeded int       `json:"n_needed,omitempty"`
	More    int       `json:"more,omitempty"`
	A       float64   `json:"a"`
	B       float64   `json:"b"`
	Fitted  []float64 `json:"fitted"` // the points the fit used
}

// Verdicts.
const (
	Rising  = "rising"
	Flat    = "flat"
	Falling = "falling"
	Unclear = "unclear"
)

const (
	// MinChange is the smallest change of a score that counts as one,
	// however large the test split.
	MinChange = 0.01
	// WideNoise is the noise band beyond which a test split is too small
	// to call a curve flat: it would miss a real rise of that size.
	WideNoise = 0.05
	// Step is the rise in F1 a label's estimate aims at.
	Step = 0.05
	// MaxFold is how far beyond its present count an estimate may reach.
	MaxFold = 10
	// FitPoints is how many of the last points the estimate's fit uses.
	FitPoints = 3
)

// Noise gives the noise band (two standard errors) of the change in
// macro-F1, and of each label's F1, from point i to point j.
type Noise func(i, j int) (macro float64, labels map[string]float64)

// Judge fills in s's changes, verdicts and sentences from its points.
// noise says which changes the test split can tell from chance: a change
// counts when it exceeds both MinChange and its noise band.
func Judge(s *Schema, noise Noise) {
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
	if len(ps) < 2 {
		return
	}
	k := len(ps) - 1
	bands := make([]map[string]float64, k)
	macro := make([]float64, k)
	for i := range k {
		macro[i], bands[i] = noise(i, k)
	}
	score := func(i int) float64 { return ps[i].MacroF1 }
	j := judge(len(ps), score, func(i int) float64 { return macro[i] })
	s.Verdict, s.Change, s.Noise, s.FlatFrom = j.verdict, j.change, j.noise, 0
	if j.verdict == Flat {
		s.FlatFrom = ps[j.from].Percent
	}
	s.Sentence = s.Schema + ": " + sentence("macro-F1", j, ps, s.NTest) + ": " + advice(j.verdict)

	for _, l := range ps[k].Labels {
		f1 := func(i int) float64 { return labelOf(ps[i], l.Label).F1 }
		lj := judge(len(ps), f1, func(i int) float64 { return bands[i][l.Label] })
		lab := Label{Label: l.Label, Verdict: lj.verdict, Change: lj.change, Noise: lj.noise}
		lab.Sentence = fmt.Sprintf("label %s: %s", l.Label, sentence("F1", lj, ps, l.Support))
		if lj.verdict == Rising {
			lab.Estimate = estimate(ps, l.Label)
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

type judgement struct {
	verdict       string
	change, noise float64
	from          int // the first point of the span the sentence covers
}

// judge looks at the last segment of a curve of n points: a change beyond
// its band is a rise or a fall; else the curve is flat from the earliest
// point whose score is within band of the last, as is every point after
// it, unless the band is too wide to tell (unclear).
func judge(n int, score func(int) float64, band func(int) float64) judgement {
	k := n - 1
	limit := func(i int) float64 { return math.Max(MinChange, band(i)) }
	d := score(k) - score(k-1)
	j := judgement{change: d, noise: band(k - 1), from: k - 1}
	switch {
	case d > limit(k-1):
		j.verdict = Rising
		return j
	case d < -limit(k-1):
		j.verdict = Falling
		return j
	case band(k-1) > WideNoise:
		j.verdict = Unclear
		return j
	}
	j.verdict = Flat
	for i := k - 2; i >= 0; i-- {
		if math.Abs(score(k)-score(i)) > limit(i) || band(i) > WideNoise {
			break
		}
		j.from = i
	}
	j.change, j.noise = score(k)-score(j.from), band(j.from)
	return j
}

// share names a span of the train split: "quarter" for 25 points.
func share(span float64) string {
	for _, s := range []struct {
		p    float64
		name string
	}{{10, "tenth"}, {20, "fifth"}, {25, "quarter"}, {100.0 / 3, "third"}, {40, "two fifths"}, {50, "half"},
		{200.0 / 3, "two thirds"}, {75, "three quarters"}} {
		if math.Abs(span-s.p) < 0.01 {
			return s.name
		}
	}
	return Format(math.Round(span*10)/10) + "%"
}

func sentence(metric string, j judgement, ps []Point, n int) string {
	k := len(ps) - 1
	from := ps[j.from]
	span := fmt.Sprintf("the last %s of the train split (%s%% to %s%%, %d to %d items)",
		share(ps[k].Percent-from.Percent), Format(from.Percent), Format(ps[k].Percent), from.NTrain, ps[k].NTrain)
	noise := fmt.Sprintf("the test split's noise is ±%.2f on %d items", j.noise, n)
	switch j.verdict {
	case Rising:
		return fmt.Sprintf("%s still rose %.2f over %s; %s", metric, j.change, span, noise)
	case Falling:
		return fmt.Sprintf("%s fell %.2f over %s; %s", metric, -j.change, span, noise)
	case Unclear:
		return fmt.Sprintf("%s changed %+.2f over %s, within the test split's noise of ±%.2f on %d items", metric, j.change, span, j.noise, n)
	}
	return fmt.Sprintf("%s flat over %s, %+.2f, within the test split's noise of ±%.2f on %d items", metric, span, j.change, math.Max(MinChange, j.noise), n)
}

func advice(verdict string) string {
	switch verdict {
	case Rising:
		return "more annotations of this kind will likely help"
	case Falling:
		return "more of the same will not help; look for inconsistent labels"
	case Unclear:
		return "the curve cannot tell whether more annotations would help; more labelled test items would tell"
	}
	return "more of the same will not"
}

// estimate fits F1 = A + B ln(n) to the label's last FitPoints points and
// solves it for the last F1 plus Step.
func estimate(ps []Point, label string) *Estimate {
	k := len(ps) - 1
	var xs, ys, fitted []float64
	for i := max(0, k+1-FitPoints); i <= k; i++ {
		l := labelOf(ps[i], label)
		if l.NTrain > 0 {
			xs = append(xs, math.Log(float64(l.NTrain)))
			ys = append(ys, l.F1)
			fitted = append(fitted, ps[i].Percent)
		}
	}
	last := labelOf(ps[k], label)
	e := &Estimate{Target: last.F1 + Step, NNow: last.NTrain, Fitted: fitted}
	if len(xs) < 2 {
		return nil
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(ys))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return nil
	}
	e.B = sxy / sxx
	e.A = my - e.B*mx
	if e.B <= 0 || e.Target > 1 {
		return e
	}
	need := math.Exp((e.Target - e.A) / e.B)
	if need > float64(MaxFold*e.NNow) {
		return e
	}
	e.NNeeded = int(math.Ceil(need))
	e.More = max(1, e.NNeeded-e.NNow)
	e.NNeeded = e.NNow + e.More
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
	return fmt.Sprintf("about %d more %s of %s (%d in all%s) would take its F1 from %.2f to %.2f, an extrapolation: F1 = %.2f + %.3f ln(n) fitted to the points %s%%, assuming new items like these and the same test split",
		e.More, noun, label, e.NNeeded, items, l.F1, e.Target, e.A, e.B, joinPoints(e.Fitted))
}

func joinPoints(ps []float64) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = Format(p)
	}
	return strings.Join(s, ", ")
}
