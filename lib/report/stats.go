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

// binomialTail is P(X >= k) for X ~ Binomial(n, p).
func binomialTail(k, n int, p float64) float64 {
	switch {
	case k <= 0:
		return 1
	case k > n:
		return 0
	case p <= 0:
		return 0
	case p >= 1:
		return 1
	}
	lgN, _ := math.Lgamma(float64(n + 1))
	sum := 0.0
	for i := k; i <= n; i++ {
		a, _ := math.Lgamma(float64(i + 1))
		b, _ := math.Lgamma(float64(n - i + 1))
		sum += math.Exp(lgN - a - b + float64(i)*math.Log(p) + float64(n-i)*math.Log1p(-p))
	}
	return math.Min(1, sum)
}
