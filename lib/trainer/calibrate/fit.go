// Package calibrate is the decision-calibrate trainer: it calibrates the
// confidences of the predictions a project already holds against the
// labels people gave since, and finds the write-back min_confidence that
// reaches a target precision. It runs only on the annotation server, which
// holds Potato's store (SPEC B4). potato-agent(1) describes it.
package calibrate

import (
	"errors"
	"math"
	"sort"
)

// IsotonicAbove is the item count above which the calibration is isotonic
// regression rather than Platt scaling: below it, a two-parameter curve
// overfits less than a free step function.
const IsotonicAbove = 1000

// Point is one stored prediction with a human label: its confidence, and
// whether its label is the human one.
type Point struct {
	Confidence float64
	Correct    bool
}

// Block is one step of an isotonic calibration: the confidences from Lo to
// Hi, both observed, map to P.
type Block struct {
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
	P  float64 `json:"p"`
	N  int     `json:"n"`
}

// Calibration maps a confidence to the probability that the prediction is
// right.
type Calibration struct {
	// Method is "platt" (P = 1 / (1 + exp(-(A*c + B)))) or "isotonic"
	// (the step function of Blocks).
	Method string  `json:"method"`
	A      float64 `json:"a,omitempty"`
	B      float64 `json:"b,omitempty"`
	Blocks []Block `json:"blocks,omitempty"`
}

// Prob is the calibrated probability of confidence c. Isotonic: the P of
// the last block whose Lo is at or below c (the first block's below all).
func (c Calibration) Prob(x float64) float64 {
	if c.Method == "platt" {
		return sigmoid(c.A*x + c.B)
	}
	if len(c.Blocks) == 0 {
		return math.NaN()
	}
	i := sort.Search(len(c.Blocks), func(i int) bool { return c.Blocks[i].Lo > x })
	if i == 0 {
		return c.Blocks[0].P
	}
	return c.Blocks[i-1].P
}

func sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}

// ErrNoPoints is returned by the fits for an empty sample.
var ErrNoPoints = errors.New("no predictions to calibrate")

// FitPlatt is Platt scaling with Platt's smoothed targets ((N+ + 1) /
// (N+ + 2) for a right prediction, 1 / (N- + 2) for a wrong one) fitted by
// Newton's method with backtracking, as in Lin, Lin and Weng, "A note on
// Platt's probabilistic outputs for support vector machines" (2007).
func FitPlatt(pts []Point) (Calibration, error) {
	if len(pts) == 0 {
		return Calibration{}, ErrNoPoints
	}
	var pos, neg float64
	for _, p := range pts {
		if p.Correct {
			pos++
		} else {
			neg++
		}
	}
	hi, lo := (pos+1)/(pos+2), 1/(neg+2)
	t := make([]float64, len(pts))
	for i, p := range pts {
		t[i] = lo
		if p.Correct {
			t[i] = hi
		}
	}
	// Lin et al. write P = 1 / (1 + exp(A*f + B)); the result turns the
	// signs round.
	objective := func(a, b float64) float64 {
		var f float64
		for i, p := range pts {
			z := p.Confidence*a + b
			if z >= 0 {
				f += t[i]*z + math.Log1p(math.Exp(-z))
			} else {
				f += (t[i]-1)*z + math.Log1p(math.Exp(z))
			}
		}
		return f
	}
	a, b := 0.0, math.Log((neg+1)/(pos+1))
	fval := objective(a, b)
	for it := 0; it < 200; it++ {
		h11, h22, h21, g1, g2 := 1e-12, 1e-12, 0.0, 0.0, 0.0
		for i, p := range pts {
			z := p.Confidence*a + b
			var pp, q float64 // pp = P(right), q = 1 - pp
			if z >= 0 {
				e := math.Exp(-z)
				pp, q = e/(1+e), 1/(1+e)
			} else {
				e := math.Exp(z)
				pp, q = 1/(1+e), e/(1+e)
			}
			d2 := pp * q
			f := p.Confidence
			h11 += f * f * d2
			h22 += d2
			h21 += f * d2
			d1 := t[i] - pp
			g1 += f * d1
			g2 += d1
		}
		if math.Abs(g1) < 1e-10 && math.Abs(g2) < 1e-10 {
			break
		}
		det := h11*h22 - h21*h21
		da := -(h22*g1 - h21*g2) / det
		db := -(-h21*g1 + h11*g2) / det
		gd := g1*da + g2*db
		step := 1.0
		for ; step >= 1e-12; step /= 2 {
			na, nb := a+step*da, b+step*db
			if nf := objective(na, nb); nf < fval+1e-4*step*gd {
				a, b, fval = na, nb, nf
				break
			}
		}
		if step < 1e-12 {
			break
		}
	}
	return Calibration{Method: "platt", A: -a, B: -b}, nil
}

// FitIsotonic is isotonic regression by pool-adjacent-violators: the
// non-decreasing step function of confidence closest, in squared error, to
// the 0/1 outcomes. Equal confidences start in one block.
func FitIsotonic(pts []Point) (Calibration, error) {
	if len(pts) == 0 {
		return Calibration{}, ErrNoPoints
	}
	s := append([]Point(nil), pts...)
	sort.Slice(s, func(i, j int) bool { return s[i].Confidence < s[j].Confidence })
	type blk struct {
		lo, hi, sum float64
		n           int
	}
	var st []blk
	for i := 0; i < len(s); {
		b := blk{lo: s[i].Confidence, hi: s[i].Confidence}
		for ; i < len(s) && s[i].Confidence == b.lo; i++ {
			b.n++
			if s[i].Correct {
				b.sum++
			}
		}
		st = append(st, b)
		// Pool while the last block's mean is below its predecessor's.
		for len(st) > 1 {
			x, y := st[len(st)-2], st[len(st)-1]
			if x.sum/float64(x.n) <= y.sum/float64(y.n) {
				break
			}
			st = st[:len(st)-2]
			st = append(st, blk{lo: x.lo, hi: y.hi, sum: x.sum + y.sum, n: x.n + y.n})
		}
	}
	c := Calibration{Method: "isotonic"}
	for _, b := range st {
		c.Blocks = append(c.Blocks, Block{Lo: b.lo, Hi: b.hi, P: b.sum / float64(b.n), N: b.n})
	}
	return c, nil
}

// Fit chooses the method: "platt" or "isotonic" as asked, or, for "auto"
// or "", isotonic above IsotonicAbove points and Platt otherwise.
func Fit(pts []Point, method string) (Calibration, error) {
	switch {
	case method == "isotonic" || (method == "auto" || method == "") && len(pts) > IsotonicAbove:
		return FitIsotonic(pts)
	default:
		return FitPlatt(pts)
	}
}

// CurvePoint is the outcome of publishing the predictions at or above a
// threshold.
type CurvePoint struct {
	Threshold float64 `json:"threshold"`
	// Precision is the mean calibrated probability of the predictions at
	// or above Threshold: the expected share of right prelabels.
	Precision float64 `json:"precision"`
	// Empirical is the share of them that are right.
	Empirical float64 `json:"empirical_precision"`
	// Coverage is the share of all the points at or above Threshold.
	Coverage float64 `json:"coverage"`
	N        int     `json:"n"`
}

// Curve is the precision and coverage of each threshold, over pts.
// A threshold above every confidence has N 0 and Precision NaN.
func Curve(pts []Point, c Calibration, thresholds []float64) []CurvePoint {
	out := make([]CurvePoint, 0, len(thresholds))
	for _, th := range thresholds {
		cp := CurvePoint{Threshold: th, Precision: math.NaN(), Empirical: math.NaN()}
		var sp, right float64
		for _, p := range pts {
			if p.Confidence >= th {
				cp.N++
				sp += c.Prob(p.Confidence)
				if p.Correct {
					right++
				}
			}
		}
		if cp.N > 0 {
			cp.Precision, cp.Empirical = sp/float64(cp.N), right/float64(cp.N)
		}
		if len(pts) > 0 {
			cp.Coverage = float64(cp.N) / float64(len(pts))
		}
		out = append(out, cp)
	}
	return out
}

// Threshold finds the lowest observed confidence whose curve point reaches
// target precision (calibrated), and that point; ok is false when none
// does. With a calibration that rises with confidence, every higher
// threshold reaches the target too.
func Threshold(pts []Point, c Calibration, target float64) (CurvePoint, bool) {
	s := append([]Point(nil), pts...)
	sort.Slice(s, func(i, j int) bool { return s[i].Confidence > s[j].Confidence })
	var best CurvePoint
	found := false
	var sp, right float64
	for i := 0; i < len(s); {
		th := s[i].Confidence
		for ; i < len(s) && s[i].Confidence == th; i++ {
			sp += c.Prob(s[i].Confidence)
			if s[i].Correct {
				right++
			}
		}
		n := float64(i)
		if prec := sp / n; prec >= target-1e-12 {
			best = CurvePoint{Threshold: th, Precision: prec, Empirical: right / n, Coverage: n / float64(len(s)), N: i}
			found = true
		}
	}
	return best, found
}
