// The optimiser: mini-batch Adagrad with lazily applied weight decay, its weights feature-major and each feature updated by one goroutine.

package tfidf

import (
	"math"
	"sync"
)

// adagradEps keeps the first Adagrad step finite.
const adagradEps = 1e-8

// trainer holds the optimiser's state. Weights are stored feature-major,
// w[f*k+c] being the weight of feature f for label c, so a document's
// features touch contiguous memory.
//
// A step runs in two phases, each split over the goroutines: the forward
// pass computes every batch document's residuals (p - y) from the weights
// as they stood at the start of the step; the update then applies them,
// goroutine p owning the features f with owner(f, threads) == p. Every
// weight is so written by one goroutine, in document order, which makes
// the result independent of the number of goroutines.
type trainer struct {
	k, f       int
	multilabel bool
	threads    int
	lr, l2     float64
	tr         *split

	w, b    []float64
	g2, gb2 []float64 // Adagrad sums of squared gradients: per feature, per bias
	rate    []float64 // Adagrad's current learning rate of each feature
	last    []int     // the step up to which a feature's weight decay is applied
	grad    []float64 // per-step gradient, zero outside the step
	stamp   []int     // the last step that touched a feature
	step    int

	// With more than one goroutine, the entries of training row d that
	// goroutine p updates are x.idx[e] for e in ord[seg[d*(threads+1)+p]:
	// seg[d*(threads+1)+p+1]], so that it need not scan the others.
	ord []int32
	seg []int32

	batchSize int
	batchDocs []int
	resid     []float64 // batch position j, label c: resid[j*k+c]
	z         [][]float64
	touched   [][]int32
	loss      []float64 // the latest loss of each training document
	correct   []bool
}

func newTrainer(tr *split, k, f int, s Options) *trainer {
	t := &trainer{
		k: k, f: f, multilabel: s.Multilabel, threads: s.Threads,
		lr: s.LearningRate, l2: s.L2, tr: tr,
		w: make([]float64, f*k), b: make([]float64, k),
		g2: make([]float64, f), gb2: make([]float64, k), rate: make([]float64, f),
		last: make([]int, f), grad: make([]float64, f*k), stamp: make([]int, f),
		batchSize: batchSize(tr.x.n()),
		z:         make([][]float64, s.Threads),
		touched:   make([][]int32, s.Threads),
		loss:      make([]float64, tr.x.n()),
		correct:   make([]bool, tr.x.n()),
	}
	t.resid = make([]float64, t.batchSize*k)
	if n := tr.x.n(); n > 0 && t.batchSize*len(tr.x.idx)/n < minParallelStep {
		// A step of few terms costs less on one goroutine than handed to
		// goroutines twice a step. The result is the same on any number.
		t.threads = 1
	}
	if t.threads > 1 {
		t.partition()
	}
	for p := range t.z {
		t.z[p] = make([]float64, k)
	}
	return t
}

// partition builds ord and seg.
func (t *trainer) partition() {
	x, n := t.tr.x, t.threads
	t.ord = make([]int32, len(x.idx))
	t.seg = make([]int32, x.n()*(n+1))
	fill := make([]int32, n)
	for d := range x.n() {
		seg := t.seg[d*(n+1) : (d+1)*(n+1)]
		for e := x.ptr[d]; e < x.ptr[d+1]; e++ {
			seg[owner(x.idx[e], n)+1]++
		}
		seg[0] = int32(x.ptr[d])
		for p := range n {
			seg[p+1] += seg[p]
		}
		copy(fill, seg[:n])
		for e := x.ptr[d]; e < x.ptr[d+1]; e++ {
			o := owner(x.idx[e], n)
			t.ord[fill[o]] = int32(e)
			fill[o]++
		}
	}
}

// minParallelStep is the fewest terms (non-zero features) a step's
// documents hold on average for the step to be split over goroutines:
// BenchmarkFitThreads fits 320 short documents (4 a step, about 160 terms)
// twice as fast on one goroutine as on two, and 6,400 (64 a step, about
// 2,500 terms) about as fast; emails of a few hundred terms each are
// split from 8 a step.
const minParallelStep = 2048

// batchSize returns the mini-batch size for n training documents: at most
// maxBatch, and small enough for a small corpus to get some 100 steps an
// epoch, which it needs to converge within the epochs allowed.
func batchSize(n int) int {
	return min(maxBatch, max(4, n/100))
}

// parallel runs fn(p) for p in [0, threads) on that many goroutines.
func (t *trainer) parallel(fn func(p int)) {
	if t.threads == 1 {
		fn(0)
		return
	}
	var wg sync.WaitGroup
	for p := range t.threads {
		wg.Go(func() { fn(p) })
	}
	wg.Wait()
}

// span returns the p-th of t.threads near-equal parts of [0, n).
func (t *trainer) span(p, n int) (int, int) {
	return p * n / t.threads, (p + 1) * n / t.threads
}

// batch makes one Adagrad step on the training documents docs.
func (t *trainer) batch(docs []int) {
	t.step++
	t.batchDocs = docs
	t.parallel(t.forward)
	t.parallel(t.update)
	k := t.k
	inv := 1 / float64(len(docs))
	for c := range k {
		var g float64
		for j := range docs {
			g += t.resid[j*k+c]
		}
		g *= inv
		t.gb2[c] += g * g
		t.b[c] -= t.lr / (math.Sqrt(t.gb2[c]) + adagradEps) * g
	}
}

func (t *trainer) forward(p int) {
	lo, hi := t.span(p, len(t.batchDocs))
	z := t.z[p]
	for j := lo; j < hi; j++ {
		d := t.batchDocs[j]
		t.scores(t.tr.x, d, z)
		r := t.resid[j*t.k : (j+1)*t.k]
		var o outcome
		if t.multilabel {
			o = judgeMultilabel(z, t.tr.yset[d*t.k:(d+1)*t.k], r)
		} else {
			o = judgeNominal(z, t.tr.y[d], r)
		}
		t.loss[d], t.correct[d] = o.loss, o.exact
	}
}

func (t *trainer) update(p int) {
	k := t.k
	inv := 1 / float64(len(t.batchDocs))
	touched := t.touched[p][:0]
	x := t.tr.x
	for j, d := range t.batchDocs {
		r := t.resid[j*k : (j+1)*k]
		add := func(e int32) {
			f := x.idx[e]
			if t.stamp[f] != t.step {
				t.stamp[f] = t.step
				touched = append(touched, f)
			}
			v := float64(x.val[e]) * inv
			g := t.grad[int(f)*k : int(f+1)*k]
			for c := range g {
				g[c] += v * r[c]
			}
		}
		if t.threads == 1 {
			for e := x.ptr[d]; e < x.ptr[d+1]; e++ {
				add(int32(e))
			}
			continue
		}
		s := t.seg[d*(t.threads+1)+p:]
		for _, e := range t.ord[s[0]:s[1]] {
			add(e)
		}
	}
	for _, f := range touched {
		// One factor for the decay of the untouched steps since the last
		// update, at the old rate, and this step's, at the new one.
		a := t.l2 * t.rate[f] * float64(t.step-1-t.last[f])
		g := t.grad[int(f)*k : int(f+1)*k]
		var ss float64
		for _, v := range g {
			ss += v * v
		}
		t.g2[f] += ss / float64(k)
		lr := t.lr / (math.Sqrt(t.g2[f]) + adagradEps)
		t.rate[f] = lr
		shrink := shrinkFactor(a + t.l2*lr)
		w := t.w[int(f)*k : int(f+1)*k]
		for c := range w {
			w[c] = w[c]*shrink - lr*g[c]
			g[c] = 0
		}
		t.last[f] = t.step
	}
	t.touched[p] = touched
}

// flush brings every weight's decay up to the current step.
func (t *trainer) flush() {
	t.parallel(func(p int) {
		lo, hi := t.span(p, t.f)
		for f := lo; f < hi; f++ {
			if n := t.step - t.last[f]; n > 0 {
				shrink := shrinkFactor(t.l2 * t.rate[f] * float64(n))
				w := t.w[f*t.k : (f+1)*t.k]
				for c := range w {
					w[c] *= shrink
				}
			}
			t.last[f] = t.step
		}
	})
}

// shrinkFactor returns exp(-a), the weight decay of rate·λ over a number of
// steps. Below 0.01, where a mostly is, it sums the Taylor series to a⁵,
// which is cheaper than math.Exp and off by less than 2e-15.
func shrinkFactor(a float64) float64 {
	if a < 0.01 {
		return 1 - a*(1-a*(1.0/2-a*(1.0/6-a*(1.0/24-a*(1.0/120)))))
	}
	return math.Exp(-a)
}

// owner returns which of n goroutines updates feature f: a multiplicative
// hash mapped onto [0, n), cheaper than a division and even for the
// frequent features, which have the low indices.
func owner(f int32, n int) int {
	return int(uint64(uint32(f)*2654435761) * uint64(n) >> 32)
}
