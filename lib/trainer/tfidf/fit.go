package tfidf

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"
)

// Fit learns a model from the training documents train, choosing the
// epoch to keep and when to stop by the loss on val, the validation
// documents (by the training loss when val is empty). labels are the
// schema's labels in the order the model reports them; every label a
// document carries must be one of them. progress, when not nil, is called
// after each epoch from the goroutine that called Fit.
//
// Optimisation is mini-batch Adagrad on the sparse rows with lazily
// applied weight decay. The weights kept are those of the epoch with the
// lowest validation loss (a higher validation accuracy breaks a near tie);
// training stops after Options.Patience epochs without such an
// improvement, or after MaxEpochs.
//
// When ctx is done Fit stops at the next mini-batch and returns an error
// wrapping ctx.Err(), together with the best model of the epochs already
// finished (nil when none has). Too few examples give an error wrapping
// ErrTooFewExamples.
func Fit(ctx context.Context, train, val []Doc, labels []string, opt Options, progress func(Epoch)) (*Model, error) {
	began := time.Now()
	index := make(map[string]int32, len(labels))
	for i, l := range labels {
		if _, dup := index[l]; dup {
			return nil, fmt.Errorf("tfidf: label %q is listed twice", l)
		}
		index[l] = int32(i)
	}
	tr, err := prepare(train, index, opt.Multilabel, "training")
	if err != nil {
		return nil, err
	}
	s, err := opt.settings(len(tr.texts))
	if err != nil {
		return nil, err
	}
	if err := tr.enough(len(labels)); err != nil {
		return nil, err
	}
	va, err := prepare(val, index, s.Multilabel, "validation")
	if err != nil {
		return nil, err
	}

	vocab, tok, err := buildVocabulary(ctx, tr.texts, s.MinDF, s.MaxFeatures, !s.RawTF)
	if err != nil {
		return nil, fmt.Errorf("tfidf: building the vocabulary: %w", err)
	}
	tr.x, err = vectorize(ctx, vocab, len(tr.texts), s.Threads, func(i int, _ *scratch) []int32 {
		return tok.ids[tok.off[i]:tok.off[i+1]]
	})
	if err != nil {
		return nil, fmt.Errorf("tfidf: vectorising: %w", err)
	}
	tok = nil
	va.x, err = vectorize(ctx, vocab, len(va.texts), s.Threads, func(i int, sc *scratch) []int32 {
		return vocab.wordIDs(va.texts[i], sc)
	})
	if err != nil {
		return nil, fmt.Errorf("tfidf: vectorising: %w", err)
	}

	t := newTrainer(tr, len(labels), len(vocab.terms), s)
	bestW := make([]float32, len(t.w))
	bestB := make([]float32, len(t.b))
	sum := Summary{TrainDocs: tr.x.n(), ValDocs: va.x.n(), Features: len(vocab.terms)}
	model := func() *Model {
		m := &Model{
			multilabel: s.Multilabel,
			labels:     slices.Clone(labels),
			vocab:      vocab,
			w:          bestW,
			b:          bestB,
			options:    s,
			summary:    sum,
		}
		m.index()
		return m
	}
	rng := rand.New(rand.NewPCG(uint64(s.Seed), 0x9e3779b97f4a7c15))
	perm := make([]int, tr.x.n())
	for i := range perm {
		perm[i] = i
	}
	bestLoss, bestAcc := math.Inf(1), -1.0
	stale := 0
	for epoch := 1; epoch <= s.MaxEpochs; epoch++ {
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		for start := 0; start < len(perm); start += t.batchSize {
			if err := ctx.Err(); err != nil {
				if sum.Epochs == 0 {
					return nil, fmt.Errorf("tfidf: training stopped in epoch %d: %w", epoch, err)
				}
				return model(), fmt.Errorf("tfidf: training stopped in epoch %d: %w", epoch, err)
			}
			t.batch(perm[start:min(start+t.batchSize, len(perm))])
		}
		t.flush()
		e := Epoch{N: epoch, Of: s.MaxEpochs}
		var trainAcc float64
		e.TrainLoss, trainAcc = t.trainStats()
		monLoss, monAcc := e.TrainLoss, trainAcc
		if va.x.n() > 0 {
			e.ValLoss, e.ValAccuracy, e.ValF1 = t.evaluate(va)
			monLoss, monAcc = e.ValLoss, e.ValAccuracy
		}
		if math.IsNaN(monLoss) || math.IsInf(monLoss, 0) || math.IsNaN(e.TrainLoss) {
			return nil, fmt.Errorf("tfidf: training diverged in epoch %d (loss %v); a lower learning rate may help", epoch, monLoss)
		}
		sum.Epochs = epoch
		if monLoss < bestLoss*(1-minImprovement) || monLoss <= bestLoss*(1+minImprovement) && monAcc > bestAcc {
			bestLoss, bestAcc = monLoss, monAcc
			stale = 0
			e.Best = true
			for i, w := range t.w {
				bestW[i] = float32(w)
			}
			for i, b := range t.b {
				bestB[i] = float32(b)
			}
			sum.BestEpoch = epoch
			sum.TrainLoss = e.TrainLoss
			sum.ValLoss, sum.ValAccuracy, sum.ValF1 = e.ValLoss, e.ValAccuracy, e.ValF1
		} else {
			stale++
		}
		e.Elapsed = time.Since(began)
		if progress != nil {
			progress(e)
		}
		if s.Patience >= 0 && stale >= s.Patience {
			break
		}
	}
	return model(), nil
}

// settings returns o with its defaults filled in for a training set of n
// documents, or an error for a value out of range.
func (o Options) settings(n int) (Options, error) {
	switch {
	case o.L2 < 0 || math.IsNaN(o.L2) || math.IsInf(o.L2, 0):
		return o, fmt.Errorf("tfidf: L2 must be a finite number >= 0, not %v", o.L2)
	case o.LearningRate < 0 || math.IsNaN(o.LearningRate) || math.IsInf(o.LearningRate, 0):
		return o, fmt.Errorf("tfidf: learning rate must be a finite number > 0, not %v", o.LearningRate)
	case o.MaxEpochs < 0:
		return o, fmt.Errorf("tfidf: max epochs must be > 0, not %d", o.MaxEpochs)
	case o.MinDF < 0:
		return o, fmt.Errorf("tfidf: min_df must be >= 1, not %d", o.MinDF)
	case o.MaxFeatures < 0:
		return o, fmt.Errorf("tfidf: max_features must be >= 1, not %d", o.MaxFeatures)
	}
	if o.L2 == 0 {
		o.L2 = DefaultL2
	}
	if o.LearningRate == 0 {
		o.LearningRate = DefaultLearningRate
	}
	if o.MaxEpochs == 0 {
		o.MaxEpochs = DefaultMaxEpochs
	}
	if o.Patience == 0 {
		o.Patience = DefaultPatience
	}
	if o.Threads <= 0 {
		o.Threads = runtime.GOMAXPROCS(0)
	}
	if o.MinDF == 0 {
		o.MinDF = DefaultMinDF
		if n < SmallCorpus {
			o.MinDF = 1
		}
	}
	if o.MaxFeatures == 0 {
		o.MaxFeatures = DefaultMaxFeatures
	}
	return o, nil
}

// split is one set of documents ready for training or evaluation.
type split struct {
	texts      []string
	y          []int32 // nominal: label index of each document
	yset       []bool  // multilabel: document i has label k iff yset[i*K+k]
	multilabel bool
	x          *rows
}

func prepare(docs []Doc, index map[string]int32, multilabel bool, name string) (*split, error) {
	sp := &split{multilabel: multilabel}
	for i, d := range docs {
		if !multilabel {
			switch len(d.Labels) {
			case 0:
				continue
			case 1:
			default:
				return nil, fmt.Errorf("tfidf: %s document %d has %d labels; a nominal schema takes one", name, i, len(d.Labels))
			}
		}
		var row []bool
		if multilabel {
			row = make([]bool, len(index))
		}
		for _, l := range d.Labels {
			k, ok := index[l]
			if !ok {
				return nil, fmt.Errorf("tfidf: %s document %d has label %q, which is not one of the schema's labels", name, i, l)
			}
			if multilabel {
				row[k] = true
			} else {
				sp.y = append(sp.y, k)
			}
		}
		sp.yset = append(sp.yset, row...)
		sp.texts = append(sp.texts, d.Text)
	}
	return sp, nil
}

// enough reports ErrTooFewExamples when sp cannot train a model.
func (sp *split) enough(nlabels int) error {
	n := len(sp.texts)
	seen := make([]bool, nlabels)
	distinct := 0
	mark := func(k int) {
		if !seen[k] {
			seen[k] = true
			distinct++
		}
	}
	if sp.multilabel {
		for i, has := range sp.yset {
			if has {
				mark(i % nlabels)
			}
		}
		if n < MinTrainDocs || distinct == 0 {
			return fmt.Errorf("tfidf: %w: %d training documents carrying %d of the %d labels; need at least %d documents and one label carried",
				ErrTooFewExamples, n, distinct, nlabels, MinTrainDocs)
		}
		return nil
	}
	for _, k := range sp.y {
		mark(int(k))
	}
	if n < MinTrainDocs || distinct < 2 {
		return fmt.Errorf("tfidf: %w: %d labelled training documents carrying %d of the %d labels; need at least %d documents and 2 labels",
			ErrTooFewExamples, n, distinct, nlabels, MinTrainDocs)
	}
	return nil
}

func (t *trainer) trainStats() (loss, acc float64) {
	n := 0
	for i, l := range t.loss {
		loss += l
		if t.correct[i] {
			n++
		}
	}
	return loss / float64(len(t.loss)), float64(n) / float64(len(t.loss))
}

// scores sets z to the raw scores (logits) of row d of x.
func (t *trainer) scores(x *rows, d int, z []float64) {
	copy(z, t.b)
	idx, val := x.row(d)
	k := t.k
	for n, f := range idx {
		v := float64(val[n])
		w := t.w[int(f)*k : int(f+1)*k]
		for c := range z {
			z[c] += v * w[c]
		}
	}
}

// evaluate returns the loss, exact-match accuracy and micro-F1 on sp.
func (t *trainer) evaluate(sp *split) (loss, acc, f1 float64) {
	n := sp.x.n()
	losses := make([]float64, n)
	counts := make([]outcome, t.threads)
	t.parallel(func(p int) {
		lo, hi := t.span(p, n)
		z := t.z[p]
		var sum outcome
		for d := lo; d < hi; d++ {
			t.scores(sp.x, d, z)
			var o outcome
			if t.multilabel {
				o = judgeMultilabel(z, sp.yset[d*t.k:(d+1)*t.k], nil)
			} else {
				o = judgeNominal(z, sp.y[d], nil)
			}
			losses[d] = o.loss
			sum.add(o)
		}
		counts[p] = sum
	})
	var all outcome
	for _, c := range counts {
		all.add(c)
	}
	for _, l := range losses {
		loss += l
	}
	return loss / float64(n), float64(all.nexact) / float64(n), all.f1()
}

// outcome is how a prediction compares with the truth, or a sum of such.
type outcome struct {
	loss       float64
	exact      bool
	nexact     int
	tp, fp, fn int
}

func (o *outcome) add(p outcome) {
	if p.exact {
		o.nexact++
	}
	o.nexact += p.nexact
	o.tp += p.tp
	o.fp += p.fp
	o.fn += p.fn
}

func (o *outcome) f1() float64 {
	if o.tp == 0 {
		return 0
	}
	return 2 * float64(o.tp) / float64(2*o.tp+o.fp+o.fn)
}

// judgeNominal scores logits z against label y and, when r is not nil,
// sets r to the gradient of the loss with respect to z.
func judgeNominal(z []float64, y int32, r []float64) outcome {
	lse := logSumExp(z)
	best := 0
	for c, v := range z {
		if v > z[best] {
			best = c
		}
	}
	if r != nil {
		for c, v := range z {
			r[c] = math.Exp(v - lse)
		}
		r[y]--
	}
	o := outcome{loss: lse - z[y], exact: best == int(y)}
	if o.exact {
		o.tp = 1
	} else {
		o.fp, o.fn = 1, 1
	}
	return o
}

// judgeMultilabel is judgeNominal for independent labels; the loss is the
// mean binary cross-entropy over the labels.
func judgeMultilabel(z []float64, y []bool, r []float64) outcome {
	o := outcome{exact: true}
	for c, v := range z {
		// softplus(v) - y·v, computed without overflow.
		l := max(v, 0) + math.Log1p(math.Exp(-math.Abs(v)))
		if y[c] {
			l -= v
		}
		o.loss += l
		pred := v >= 0
		switch {
		case pred && y[c]:
			o.tp++
		case pred:
			o.fp++
		case y[c]:
			o.fn++
		}
		if pred != y[c] {
			o.exact = false
		}
		if r != nil {
			r[c] = sigmoid(v)
			if y[c] {
				r[c]--
			}
		}
	}
	o.loss /= float64(len(z))
	return o
}

func logSumExp(z []float64) float64 {
	m := math.Inf(-1)
	for _, v := range z {
		m = max(m, v)
	}
	var s float64
	for _, v := range z {
		s += math.Exp(v - m)
	}
	return m + math.Log(s)
}

func sigmoid(v float64) float64 {
	if v >= 0 {
		return 1 / (1 + math.Exp(-v))
	}
	e := math.Exp(v)
	return e / (1 + e)
}
