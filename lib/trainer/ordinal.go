package trainer

import (
	"potato-training/lib/bundle"
	"potato-training/lib/trainer/tfidf"
)

// The ordinal method, for a likert schema of K points in order (the
// schema's labels, or "1" to size): the cumulative binary decomposition of
// Frank and Hall (2001). The scale is learnt as K-1 binary logistic
// regressions, the k-th giving P(y > point k) and trained on whether an
// item's point is above point k, so every item teaches every threshold
// and the order of the points is what is learnt. At prediction the
// cumulative probabilities are made non-increasing (each the least of
// itself and those before it), the probability of point k is
// P(y > k-1) - P(y > k) (P(y > -1) = 1, P(y > K-1) = 0), the predicted
// point is the median of that distribution (the most points k with
// P(y > k-1) at least 0.5), which minimises the expected absolute error
// in points, and the confidence is the probability of the predicted
// point. The prediction's probs are every point's probability.

// ordinalSchema is s with its scale: its labels, or, for an ordinal schema
// configured with neither labels nor size, the numbers its train items
// are labelled with.
func ordinalSchema(s bundle.Schema, train []example) bundle.Schema {
	if !s.Ordinal() || len(s.Labels) > 0 {
		return s
	}
	var ts []any
	for _, x := range train {
		if t, ok := x.targets[s.Name]; ok {
			ts = append(ts, t)
		}
	}
	s.Labels = bundle.ObservedScale(ts)
	return s
}

// thresholds are the binary labels of a scale's K-1 thresholds: ">"
// before each point but the last.
func thresholds(scale []string) []string {
	out := make([]string, 0, max(len(scale)-1, 0))
	for _, l := range scale[:max(len(scale)-1, 0)] {
		out = append(out, ">"+l)
	}
	return out
}

// ordinalDocs are the documents of an ordinal schema: an item at point p
// has the labels of the thresholds below it.
func ordinalDocs(xs []example, s bundle.Schema) []tfidf.Doc {
	th := thresholds(s.Labels)
	var docs []tfidf.Doc
	for _, x := range xs {
		t, ok := x.targets[s.Name]
		if !ok {
			continue
		}
		if p, ok := bundle.Point(s.Labels, t); ok {
			docs = append(docs, tfidf.Doc{Text: x.text, Labels: append([]string{}, th[:p]...)})
		}
	}
	return docs
}

// pointsPresent is how many points of the scale the documents are at.
func pointsPresent(docs []tfidf.Doc) int {
	seen := map[int]bool{}
	for _, d := range docs {
		seen[len(d.Labels)] = true
	}
	return len(seen)
}

// pointProbs turns the K-1 cumulative probabilities P(y > k) into the K
// points' probabilities (see the method above).
func pointProbs(cum []float64) []float64 {
	out := make([]float64, len(cum)+1)
	prev := 1.0
	for k, c := range cum {
		c = min(max(c, 0), prev)
		out[k] = prev - c
		prev = c
	}
	out[len(cum)] = prev
	return out
}

// medianPoint is the median of the points' probabilities: the first point
// at which their running sum reaches 0.5.
func medianPoint(probs []float64) int {
	var sum float64
	for k, p := range probs {
		sum += p
		if sum >= 0.5-1e-12 {
			return k
		}
	}
	return len(probs) - 1
}

// predictOrdinal is predict for an ordinal schema: the predicted point's
// label, its probability, and every point's.
func predictOrdinal(m *tfidf.Model, s bundle.Schema, text string) (string, float64, map[string]float32) {
	pp := pointProbs(m.Probabilities(text))
	probs := make(map[string]float32, len(pp))
	for k, v := range pp {
		probs[s.Labels[k]] = float32(v)
	}
	k := medianPoint(pp)
	return s.Labels[k], pp[k], probs
}

// ordinalGold is the label of an ordinal target on the scale.
func ordinalGold(s bundle.Schema, t any) (string, bool) {
	p, ok := bundle.Point(s.Labels, t)
	if !ok {
		return "", false
	}
	return s.Labels[p], true
}
