package report

import "math"

// Tally counts human labels given on items that showed a prelabel, and
// how many of them were equal to it. The page and the command line print
// the same fields.
type Tally struct {
	Name     string  `json:"name"`
	N        int     `json:"n"`
	Accepted int     `json:"accepted"`
	Share    float64 `json:"share"`
	// CILow and CIHigh bound Share: the Wilson score interval at 95%, a
	// fair interval for a proportion even when N is small or Share is 0
	// or 1.
	CILow  float64 `json:"ci95_low"`
	CIHigh float64 `json:"ci95_high"`
	// Flag says why this row deserves a look; empty when it does not.
	Flag string `json:"flag,omitempty"`
	// Bias is an annotator's automation-bias test (BiasRule); nil on
	// other rows.
	Bias *BiasTest `json:"bias,omitempty"`
}

func (t *Tally) add(accepted bool) {
	t.N++
	if accepted {
		t.Accepted++
	}
}

// finish fills Share and the interval from the counts.
func (t *Tally) finish() {
	if t.N == 0 {
		t.Share, t.CILow, t.CIHigh = 0, 0, 0
		return
	}
	t.Share = float64(t.Accepted) / float64(t.N)
	t.CILow, t.CIHigh = wilson(t.Accepted, t.N)
}

// wilson is the 95% Wilson score interval of k successes in n trials.
func wilson(k, n int) (lo, hi float64) {
	const z = 1.959963984540054
	p := float64(k) / float64(n)
	nn := float64(n)
	d := 1 + z*z/nn
	c := (p + z*z/(2*nn)) / d
	h := z * math.Sqrt(p*(1-p)/nn+z*z/(4*nn*nn)) / d
	lo, hi = math.Max(0, c-h), math.Min(1, c+h)
	// Exactly, the bound is 0 when k is 0 and 1 when k is n; rounding
	// would leave 0.9999999999999999.
	if k == 0 {
		lo = 0
	}
	if k == n {
		hi = 1
	}
	return lo, hi
}

// lchoose is log C(n, k) for real n and k, 0 <= k <= n.
func lchoose(n, k float64) float64 {
	a, _ := math.Lgamma(n + 1)
	b, _ := math.Lgamma(k + 1)
	c, _ := math.Lgamma(n - k + 1)
	return a - b - c
}

// stratum is one predicted label's figures in the automation-bias test:
// an annotator's N labels on items whose prelabel has that label, X of
// them equal to it; and the run's T test items predicted that label, TP
// of them labelled it by the people who labelled the test split.
type stratum struct {
	N, X  int
	T, TP int
}

// rate is the stratum's held-out agreement: TP of T.
func (s stratum) rate() float64 { return float64(s.TP) / float64(s.T) }

// pmf is a distribution over the integers Lo, Lo+1, ...
type pmf struct {
	Lo int
	P  []float64
}

// hypergeometric is the number of successes among n draws, without
// replacement, from N of which K are successes. It starts at the mode, in
// logs, and steps outwards by the ratio of neighbouring terms, until they
// are too small for a float64.
func hypergeometric(N, K, n int) pmf {
	lo, hi := max(0, n-(N-K)), min(n, K)
	mode := min(hi, max(lo, int(float64(n+1)*float64(K+1)/float64(N+2))))
	at := math.Exp(lchoose(float64(K), float64(mode)) + lchoose(float64(N-K), float64(n-mode)) - lchoose(float64(N), float64(n)))
	// term(k+1)/term(k) = (K-k)(n-k) / ((k+1)(N-K-n+k+1)).
	var up, down []float64
	for k, v := mode, at; k < hi; k++ {
		v *= float64(K-k) * float64(n-k) / (float64(k+1) * float64(N-K-n+k+1))
		if v == 0 {
			break
		}
		up = append(up, v)
	}
	for k, v := mode, at; k > lo; k-- {
		v *= float64(k) * float64(N-K-n+k) / (float64(K-k+1) * float64(n-k+1))
		if v == 0 {
			break
		}
		down = append(down, v)
	}
	d := pmf{Lo: mode - len(down), P: make([]float64, 0, len(down)+1+len(up))}
	for i := len(down) - 1; i >= 0; i-- {
		d.P = append(d.P, down[i])
	}
	d.P = append(d.P, at)
	d.P = append(d.P, up...)
	return d
}

func (d pmf) trim() pmf {
	for len(d.P) > 1 && d.P[0] == 0 {
		d.P, d.Lo = d.P[1:], d.Lo+1
	}
	for len(d.P) > 1 && d.P[len(d.P)-1] == 0 {
		d.P = d.P[:len(d.P)-1]
	}
	return d
}

// convolve is the distribution of the sum of two independent variables.
func convolve(a, b pmf) pmf {
	out := pmf{Lo: a.Lo + b.Lo, P: make([]float64, len(a.P)+len(b.P)-1)}
	for i, x := range a.P {
		if x == 0 {
			continue
		}
		for j, y := range b.P {
			out.P[i+j] += x * y
		}
	}
	return out.trim()
}

// tail is P(X >= k).
func (d pmf) tail(k int) float64 {
	sum := 0.0
	for i := len(d.P) - 1; i >= 0 && d.Lo+i >= k; i-- {
		sum += d.P[i]
	}
	return math.Min(1, sum)
}

// stratifiedP is the one-sided p-value of the exact stratified test that
// the annotator agrees with the prelabels more often than the test split's
// labellers agreed with the model's predictions: in each stratum, given
// its totals (N+T labels, X+TP of them agreeing), the annotator's count of
// agreements is hypergeometric when the annotator is no different from the
// test split's labellers (Fisher's exact test), and the strata are
// independent; the p-value is the chance of the sum of those counts
// reaching the annotator's. A stratum with no test item says nothing and
// must not be passed.
func stratifiedP(ss []stratum) float64 {
	sum := pmf{P: []float64{1}}
	x := 0
	for _, s := range ss {
		sum = convolve(sum, hypergeometric(s.N+s.T, s.X+s.TP, s.N))
		x += s.X
	}
	return sum.tail(x)
}

// logPAll is the log of the test's p-value were each of n[i] labels of
// stratum i equal to the prelabel: the smallest p-value the test can give
// labels so spread, whatever they are (so it depends on the design alone,
// which Tarone's refinement needs). It takes real counts, for the power
// calculation. Per stratum it is C(n+TP, n) / C(n+T, n).
func logPAll(ss []stratum, n []float64) float64 {
	lp := 0.0
	for i, s := range ss {
		lp += lchoose(n[i]+float64(s.TP), n[i]) - lchoose(n[i]+float64(s.T), n[i])
	}
	return lp
}

// normalCDF is the standard normal distribution function.
func normalCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// upperZ is the z whose upper tail is p.
func upperZ(p float64) float64 { return math.Sqrt2 * math.Erfinv(1-2*p) }

// approxPower is the approximate chance that the stratified test at level
// reaches significance for an annotator of n labels, spread over the
// strata as share says, who agrees with the prelabel on a share c of the
// items a careful annotator disagrees on (agreement TP/T + c(1-TP/T) in
// each stratum), the test split staying as it is. It is the normal
// approximation of the test's statistic, the annotator's agreements minus
// their conditional expectation: sum of T n (a - TP/T) / (n + T) over the
// strata, a the annotator's share agreeing.
func approxPower(ss []stratum, share []float64, n, c, level float64) float64 {
	var mean, v0, v1 float64
	for i, s := range ss {
		nl, t, tp := n*share[i], float64(s.T), float64(s.TP)
		if nl == 0 {
			continue
		}
		pi := tp / t
		q := pi + c*(1-pi)
		all, agree := nl+t, nl*q+tp
		mean += t * nl * (q - pi) / all
		if all > 1 {
			v0 += nl * t * agree * (all - agree) / (all * all * (all - 1))
		}
		v1 += (t / all) * (t / all) * nl * q * (1 - q)
	}
	d := mean - upperZ(level)*math.Sqrt(v0)
	if v1 <= 0 {
		if d > 0 {
			return 1
		}
		return 0
	}
	return normalCDF(d / math.Sqrt(v1))
}
