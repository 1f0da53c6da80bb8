package tfidf

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
)

// Model is a trained tfidf-logreg model. Its methods are safe for
// concurrent use.
type Model struct {
	multilabel bool
	labels     []string
	vocab      *vocabulary
	w          []float32 // feature-major: w[f*len(labels)+c]
	b          []float32

	// rows holds, feature after feature, the feature's idf and then its
	// weights as float64: w[f*k+c] is rows[f*(k+1)+1+c]. Prediction
	// reads the two for every feature of a text, from one place rather
	// than two arrays some hundreds of kilobytes apart (index).
	rows    []float64
	options Options
	summary Summary
}

// Summary describes how a model was trained.
type Summary struct {
	TrainDocs, ValDocs int // documents used
	Features           int // size of the vocabulary
	Epochs             int // epochs run
	BestEpoch          int // the epoch whose weights the model holds

	// The Epoch figures of BestEpoch; the validation ones are zero when
	// there were no validation documents.
	TrainLoss, ValLoss, ValAccuracy, ValF1 float64
}

// Labels returns the model's labels in the order given to Fit.
func (m *Model) Labels() []string { return slices.Clone(m.labels) }

// Multilabel reports whether the model scores each label independently.
func (m *Model) Multilabel() bool { return m.multilabel }

// Summary returns the figures of the model's training.
func (m *Model) Summary() Summary { return m.summary }

// Options returns the options the model was trained with, defaults filled
// in. Threads is zero in a loaded model.
func (m *Model) Options() Options { return m.options }

// Probabilities returns the probability of each label for text, in the
// order of Labels: softmax probabilities summing to 1 for a nominal model,
// independent sigmoid probabilities for a multilabel one.
func (m *Model) Probabilities(text string) []float64 {
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	feats, counts := m.vocab.termCounts(m.vocab.wordIDs(text, s), s)
	k := len(m.labels)
	z := make([]float64, k)
	// The row's TF-IDF values, scaled to unit norm as vector does; the
	// features in the order the text first has them (vector sorts them,
	// which prediction has no need of).
	stride := k + 1
	var norm float64
	xs := s.val[:0]
	for i, f := range feats {
		x := m.vocab.tf(counts[i]) * m.rows[int(f)*stride]
		norm += x * x
		xs = append(xs, float32(x))
	}
	s.val = xs
	var inv float64
	if norm > 0 {
		inv = 1 / math.Sqrt(norm)
	}
	for c, b := range m.b {
		z[c] = float64(b)
	}
	for i, f := range feats {
		v := float64(xs[i])
		if inv > 0 {
			v = float64(float32(v * inv))
		}
		w := m.rows[int(f)*stride+1 : int(f+1)*stride]
		for c := range z {
			z[c] += v * w[c]
		}
	}
	if m.multilabel {
		for c, v := range z {
			z[c] = sigmoid(v)
		}
		return z
	}
	lse := logSumExp(z)
	for c, v := range z {
		z[c] = math.Exp(v - lse)
	}
	return z
}

// scratchPool holds the working memory of Probabilities, which a
// prediction of every item of a large split calls once an item a schema.
var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// Predict returns every label's probability for text (see Probabilities),
// highest first, equal ones in label order.
func (m *Model) Predict(text string) []Score {
	p := m.Probabilities(text)
	out := make([]Score, len(p))
	for c, v := range p {
		out[c] = Score{m.labels[c], v}
	}
	slices.SortStableFunc(out, func(a, b Score) int { return cmp.Compare(b.P, a.P) })
	return out
}

// PredictNominal returns the most probable label for text and its
// probability; the first in label order wins a tie.
func (m *Model) PredictNominal(text string) (label string, p float64) {
	return m.NominalOf(m.Probabilities(text))
}

// NominalOf is PredictNominal of the probabilities Probabilities gave.
func (m *Model) NominalOf(probs []float64) (label string, p float64) {
	best := 0
	for c, v := range probs {
		if v > probs[best] {
			best = c
		}
	}
	return m.labels[best], probs[best]
}

// PredictMultilabel returns the labels whose probability for text is at
// least threshold, in label order, and the confidence of that whole
// decision: the lowest, over all labels, of the probability of the choice
// made for the label (p when chosen, 1-p when not). The confidence is so
// high only when every label is clearly in or clearly out, which is what
// a caller that writes back only confident predictions needs.
func (m *Model) PredictMultilabel(text string, threshold float64) (chosen []string, confidence float64) {
	return m.MultilabelOf(m.Probabilities(text), threshold)
}

// MultilabelOf is PredictMultilabel of the probabilities Probabilities
// gave.
func (m *Model) MultilabelOf(probs []float64, threshold float64) (chosen []string, confidence float64) {
	confidence = 1
	for c, p := range probs {
		if p >= threshold {
			chosen = append(chosen, m.labels[c])
		} else {
			p = 1 - p
		}
		confidence = min(confidence, p)
	}
	return chosen, confidence
}

// Label is the name of label c, in the order of Labels.
func (m *Model) Label(c int) string { return m.labels[c] }

// Model file format: the names of Save's JSON document.
const (
	FormatName    = "potato-tfidf-logreg"
	FormatVersion = 1
)

// modelFile is version 1 of the model file; see Save.
type modelFile struct {
	Format      string      `json:"format"`
	V           int         `json:"v"`
	Multilabel  bool        `json:"multilabel"`
	Labels      []string    `json:"labels"`
	SublinearTF bool        `json:"sublinear_tf"`
	Options     fileOptions `json:"options"`
	Trained     fileSummary `json:"trained"`
	Vocab       []string    `json:"vocab"`
	IDF         []float64   `json:"idf"`
	Weights     [][]float32 `json:"weights"`
	Bias        []float32   `json:"bias"`
}

type fileOptions struct {
	L2           float64 `json:"l2"`
	LearningRate float64 `json:"learning_rate"`
	MaxEpochs    int     `json:"max_epochs"`
	Patience     int     `json:"patience"`
	Seed         int64   `json:"seed"`
	MinDF        int     `json:"min_df"`
	MaxFeatures  int     `json:"max_features"`
	BatchSize    int     `json:"batch_size"`
}

type fileSummary struct {
	TrainDocs   int     `json:"train_docs"`
	ValDocs     int     `json:"val_docs"`
	Features    int     `json:"features"`
	Epochs      int     `json:"epochs"`
	BestEpoch   int     `json:"best_epoch"`
	TrainLoss   float64 `json:"train_loss"`
	ValLoss     float64 `json:"val_loss"`
	ValAccuracy float64 `json:"val_accuracy"`
	ValF1       float64 `json:"val_f1"`
}

// Save writes the model as one JSON object, version 1 of the
// "potato-tfidf-logreg" format:
//
//	format        "potato-tfidf-logreg"
//	v             1
//	multilabel    false: softmax over labels; true: a sigmoid per label
//	labels        [K] label names, the order of weights and bias
//	sublinear_tf  true: a term's tf is 1+ln(count); false: the count
//	options       the training options (l2, learning_rate, max_epochs,
//	              patience, seed, min_df, max_features, batch_size);
//	              informational
//	trained       train_docs, val_docs, features, epochs, best_epoch,
//	              train_loss, val_loss, val_accuracy, val_f1 (see Summary);
//	              informational
//	vocab         [F] terms in feature order: a word, or two words joined
//	              by one space (a bigram); words as Tokenize makes them
//	idf           [F] the idf of each term
//	weights       [K][F] weights[c][f]: weight of term f for label c
//	bias          [K] the bias of each label
//
// A text is scored by tokenizing it, counting its terms found in vocab,
// weighting each by tf·idf, scaling the row to unit L2 norm, and taking
// bias[c] plus the dot product with weights[c]: the softmax of these
// scores (multilabel: the sigmoid of each) are the probabilities.
// Readers ignore fields they do not know; a change that old readers
// would misread gets a new version.
func (m *Model) Save(w io.Writer) error {
	k, nf := len(m.labels), len(m.vocab.terms)
	f := modelFile{
		Format:      FormatName,
		V:           FormatVersion,
		Multilabel:  m.multilabel,
		Labels:      m.labels,
		SublinearTF: m.vocab.sublinear,
		Options: fileOptions{
			L2:           m.options.L2,
			LearningRate: m.options.LearningRate,
			MaxEpochs:    m.options.MaxEpochs,
			Patience:     m.options.Patience,
			Seed:         m.options.Seed,
			MinDF:        m.options.MinDF,
			MaxFeatures:  m.options.MaxFeatures,
			BatchSize:    batchSize(m.summary.TrainDocs),
		},
		Trained: fileSummary(m.summary),
		Vocab:   m.vocab.terms,
		IDF:     m.vocab.idf,
		Weights: make([][]float32, k),
		Bias:    m.b,
	}
	for c := range f.Weights {
		row := make([]float32, nf)
		for i := range row {
			row[i] = m.w[i*k+c]
		}
		f.Weights[c] = row
	}
	if err := json.NewEncoder(w).Encode(&f); err != nil {
		return fmt.Errorf("tfidf: writing model: %w", err)
	}
	return nil
}

// Load reads a model written by Save. It refuses a document of another
// format or version, and one whose parts do not fit together.
func Load(r io.Reader) (*Model, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("tfidf: reading model: %w", err)
	}
	var head struct {
		Format *string `json:"format"`
		V      int     `json:"v"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("tfidf: reading model: %w", err)
	}
	switch {
	case head.Format == nil:
		return nil, errors.New("tfidf: not a " + FormatName + " model (no \"format\" field)")
	case *head.Format != FormatName:
		return nil, fmt.Errorf("tfidf: not a %s model (format %q)", FormatName, *head.Format)
	case head.V != FormatVersion:
		return nil, fmt.Errorf("tfidf: %s model version %d is not supported (this build reads version %d)", FormatName, head.V, FormatVersion)
	}
	var f modelFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tfidf: reading model: %w", err)
	}
	k, nf := len(f.Labels), len(f.Vocab)
	bad := func(format string, a ...any) error {
		return fmt.Errorf("tfidf: invalid model: "+format, a...)
	}
	if k == 0 {
		return nil, bad("no labels")
	}
	seen := make(map[string]bool, k)
	for _, l := range f.Labels {
		if seen[l] {
			return nil, bad("label %q is listed twice", l)
		}
		seen[l] = true
	}
	if len(f.IDF) != nf {
		return nil, bad("%d idf values for %d vocab terms", len(f.IDF), nf)
	}
	if len(f.Weights) != k || len(f.Bias) != k {
		return nil, bad("%d weight rows and %d biases for %d labels", len(f.Weights), len(f.Bias), k)
	}
	for c, row := range f.Weights {
		if len(row) != nf {
			return nil, bad("weights[%d] has %d values for %d vocab terms", c, len(row), nf)
		}
	}
	v, err := newVocabulary(f.Vocab, f.IDF, f.SublinearTF)
	if err != nil {
		return nil, bad("%w", err)
	}
	m := &Model{
		multilabel: f.Multilabel,
		labels:     f.Labels,
		vocab:      v,
		w:          make([]float32, nf*k),
		b:          f.Bias,
		options: Options{
			Multilabel:   f.Multilabel,
			L2:           f.Options.L2,
			LearningRate: f.Options.LearningRate,
			MaxEpochs:    f.Options.MaxEpochs,
			Patience:     f.Options.Patience,
			Seed:         f.Options.Seed,
			MinDF:        f.Options.MinDF,
			MaxFeatures:  f.Options.MaxFeatures,
			RawTF:        !f.SublinearTF,
		},
		summary: Summary(f.Trained),
	}
	for c, row := range f.Weights {
		for i, x := range row {
			m.w[i*k+c] = x
		}
	}
	m.index()
	return m, nil
}

// index builds m.rows from the vocabulary's idf and m.w.
func (m *Model) index() {
	k := len(m.labels)
	m.rows = make([]float64, len(m.vocab.idf)*(k+1))
	for f, idf := range m.vocab.idf {
		row := m.rows[f*(k+1) : (f+1)*(k+1)]
		row[0] = idf
		for c, x := range m.w[f*k : (f+1)*k] {
			row[1+c] = float64(x)
		}
	}
}
