// Package tfidf implements the tfidf-logreg trainer's model: TF-IDF over
// word unigrams and bigrams with L2-regularised logistic regression.
//
// Fit learns a Model from labelled documents; the model predicts label
// probabilities for a text and is saved and loaded as versioned JSON (see
// Model.Save). Nominal schemas (one label per document) get multinomial
// softmax regression, multilabel schemas one binary logistic regression
// per label (one-vs-rest).
//
// Features: Tokenize's words and the pairs of adjacent words, the
// vocabulary taken from the training documents only. A feature's weight
// in a document is tf·idf with tf = 1+ln(count) (or the raw count, see
// Options.RawTF) and idf = ln((1+n)/(1+df))+1, n the number of training
// documents and df the number holding the feature; each document's row is
// then scaled to unit L2 norm.
package tfidf

import (
	"errors"
	"time"
)

// Doc is one labelled document. For a nominal schema Labels holds exactly
// one label (a document without any is unlabelled and skipped); for a
// multilabel schema it holds the set of labels that apply, possibly none.
type Doc struct {
	Text   string
	Labels []string
}

// Options control Fit. The zero value of each field selects its default.
type Options struct {
	// Multilabel selects one-vs-rest binary logistic regression per label
	// instead of softmax regression over the labels.
	Multilabel bool

	// L2 is λ in the objective mean(loss) + λ/2·‖W‖², the loss being the
	// cross-entropy of a document (summed over labels when Multilabel).
	// Default 1e-5; biases are not regularised. Negative is an error.
	L2 float64

	// LearningRate is the Adagrad step size. Default 0.5.
	LearningRate float64

	// MaxEpochs bounds the passes over the training documents. Default 30.
	MaxEpochs int

	// Patience is how many epochs without improvement end training early.
	// Default 3; negative runs all MaxEpochs (still keeping the best).
	Patience int

	// Threads is the number of goroutines Fit uses; 0 or negative means
	// GOMAXPROCS. The result does not depend on it.
	Threads int

	// Seed fixes the order documents are visited in. Fit is deterministic
	// for a given Seed.
	Seed int64

	// MinDF is the number of training documents a term must occur in to
	// become a feature. Default 2, or 1 when there are fewer than 200
	// training documents.
	MinDF int

	// MaxFeatures keeps at most this many features, those with the highest
	// document frequency (ties in byte order of the term). Default 200000.
	MaxFeatures int

	// RawTF weights a term by its count in the document rather than by
	// 1+ln(count).
	RawTF bool
}

// Defaults and limits of Options and Fit.
const (
	DefaultL2           = 1e-5
	DefaultLearningRate = 0.5
	DefaultMaxEpochs    = 30
	DefaultPatience     = 3
	DefaultMinDF        = 2
	DefaultMaxFeatures  = 200000

	// SmallCorpus is the number of training documents below which MinDF
	// defaults to 1.
	SmallCorpus = 200

	// MinTrainDocs is the fewest labelled training documents Fit accepts;
	// a nominal schema also needs two distinct labels among them.
	MinTrainDocs = 10
)

// maxBatch is the number of documents per Adagrad step, fewer for a small
// corpus (see batchSize).
const maxBatch = 64

// minImprovement is the relative drop in the monitored loss that counts as
// an improvement for early stopping.
const minImprovement = 1e-3

// Epoch reports one finished pass over the training documents.
type Epoch struct {
	N, Of int // this epoch, 1-based, and MaxEpochs

	// TrainLoss is the mean loss over the epoch's documents, each measured
	// just before the step that used it. Losses are cross-entropy per
	// document (nominal) or per document and label (multilabel).
	TrainLoss float64

	// ValLoss, ValAccuracy and ValF1 are measured on the validation
	// documents after the epoch; all three are zero when there are none.
	// ValAccuracy is the share of documents whose predicted label (nominal)
	// or label set at threshold 0.5 (multilabel) is exactly right; ValF1
	// is micro-averaged F1 (equal to ValAccuracy for nominal).
	ValLoss, ValAccuracy, ValF1 float64

	// Best is true when this epoch's weights are the best so far: those
	// the returned model will hold unless a later epoch beats them.
	Best bool

	// Elapsed is the time since Fit was called.
	Elapsed time.Duration
}

// ErrTooFewExamples is returned (wrapped, with the counts in the message)
// when the training documents are too few to fit a model: fewer than
// MinTrainDocs labelled documents, fewer than two distinct labels for a
// nominal schema, or no positive example of any label for a multilabel one.
var ErrTooFewExamples = errors.New("too few labelled training examples")

// Score is the probability of one label.
type Score struct {
	Label string
	P     float64
}
