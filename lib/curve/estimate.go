// A rising label's estimate: F1 = A + B ln(n) fitted to its last points
// and solved for how many more annotations would raise its F1 by Step,
// and the sentence that gives it.

package curve

import (
	"fmt"
	"math"
	"strings"
)

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
