package curve

import "math"

// means are the means of xs and ys.
func means(xs, ys []float64) (mx, my float64) {
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	return mx / float64(len(xs)), my / float64(len(ys))
}

// slope is the least-squares slope of ys against xs, and Sxx, the sum of
// the squared deviations of xs, which its variance divides.
func slope(xs, ys []float64) (b, sxx float64) {
	mx, my := means(xs, ys)
	var sxy float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return 0, 0
	}
	return sxy / sxx, sxx
}

// residualVar is the variance of the slope of ys against xs that the
// scatter of ys about its line gives, with len(xs)-2 degrees of freedom.
func residualVar(xs, ys []float64) float64 {
	b, sxx := slope(xs, ys)
	if sxx == 0 || len(xs) < 3 {
		return math.NaN()
	}
	mx, my := means(xs, ys)
	var rss float64
	for i := range xs {
		r := ys[i] - my - b*(xs[i]-mx)
		rss += r * r
	}
	return rss / float64(len(xs)-2) / sxx
}

// rowMeans is the mean over draws of each point: y[point][draw].
func rowMeans(y [][]float64) []float64 {
	out := make([]float64, len(y))
	for i, row := range y {
		out[i] = mean(row)
	}
	return out
}

// column is draw d of y[point][draw].
func column(y [][]float64, d int) []float64 {
	out := make([]float64, len(y))
	for i, row := range y {
		out[i] = row[d]
	}
	return out
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// sampleVar is the variance of xs with len(xs)-1 in the denominator.
func sampleVar(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	m := mean(xs)
	var s float64
	for _, x := range xs {
		s += (x - m) * (x - m)
	}
	return s / float64(len(xs)-1)
}

// moments accumulates a statistic's resampled values.
type moments struct{ n, sum, sum2 float64 }

func (m *moments) add(x float64) { m.n++; m.sum += x; m.sum2 += x * x }

func (m moments) variance() float64 {
	if m.n < 2 {
		return 0
	}
	mu := m.sum / m.n
	return math.Max(0, m.sum2/m.n-mu*mu)
}

// satterthwaite is the degrees of freedom of a sum of two variances, each
// estimated with its own degrees of freedom (+Inf for a known one).
func satterthwaite(v1, df1, v2, df2 float64) float64 {
	num := (v1 + v2) * (v1 + v2)
	den := 0.0
	if !math.IsInf(df1, 1) {
		den += v1 * v1 / df1
	}
	if !math.IsInf(df2, 1) {
		den += v2 * v2 / df2
	}
	if den == 0 {
		return math.Inf(1)
	}
	return num / den
}

// tQuantile is the p quantile of Student's t with df degrees of freedom
// (df above 0, +Inf the normal), for p in (0.5, 1).
func tQuantile(p, df float64) float64 {
	if math.IsInf(df, 1) || df > 1e7 {
		return math.Sqrt2 * math.Erfinv(2*p-1)
	}
	lo, hi := 0.0, 1.0
	for tCDF(hi, df) < p {
		hi *= 2
	}
	for range 100 {
		mid := (lo + hi) / 2
		if tCDF(mid, df) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// tCDF is P(T <= t) for t >= 0.
func tCDF(t, df float64) float64 {
	x := df / (df + t*t)
	return 1 - 0.5*betaInc(df/2, 0.5, x)
}

// betaInc is the regularised incomplete beta function I_x(a, b).
func betaInc(a, b, x float64) float64 {
	if x <= 0 {
		return 0
	}
	if x >= 1 {
		return 1
	}
	la, _ := math.Lgamma(a + b)
	lb, _ := math.Lgamma(a)
	lc, _ := math.Lgamma(b)
	front := math.Exp(la - lb - lc + a*math.Log(x) + b*math.Log(1-x))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(a, b, x) / a
	}
	return 1 - front*betaCF(b, a, 1-x)/b
}

// betaCF is the continued fraction of the incomplete beta function
// (modified Lentz).
func betaCF(a, b, x float64) float64 {
	const tiny = 1e-300
	c, d := 1.0, 1-(a+b)*x/(a+1)
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= 300; m++ {
		fm := float64(m)
		aa := fm * (b - fm) * x / ((a + 2*fm - 1) * (a + 2*fm))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		h *= d * c
		aa = -(a + fm) * (a + b + fm) * x / ((a + 2*fm) * (a + 2*fm + 1))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-14 {
			break
		}
	}
	return h
}
