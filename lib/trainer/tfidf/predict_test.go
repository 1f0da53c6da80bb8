package tfidf

import (
	"math"
	"strings"
	"sync"
	"testing"
)

// vectorProbabilities scores text through vector, the sorted rows the fit
// trains on: what Probabilities must give, to rounding.
func vectorProbabilities(m *Model, text string) []float64 {
	var s scratch
	idx, val := m.vocab.vector(m.vocab.wordIDs(text, &s), &s)
	k := len(m.labels)
	z := make([]float64, k)
	for c, b := range m.b {
		z[c] = float64(b)
	}
	for n, f := range idx {
		for c := range z {
			z[c] += float64(val[n]) * float64(m.w[int(f)*k+c])
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

// Probabilities counts a text's terms instead of sorting them: the same
// probabilities as the rows the model was trained on, for texts with
// repeated words and pairs, unknown words and none, with sublinear and raw
// tf, and from goroutines sharing its pooled scratch.
func TestProbabilitiesAgreeWithVector(t *testing.T) {
	for _, raw := range []bool{false, true} {
		m, val := fitNominal(t, Options{RawTF: raw})
		texts := []string{"", "zzz qqq", val[0].Text, strings.Repeat(val[1].Text+" ", 5), val[2].Text + " unseenword " + val[3].Text}
		for _, d := range val[:50] {
			texts = append(texts, d.Text)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for _, text := range texts {
					got, want := m.Probabilities(text), vectorProbabilities(m, text)
					for c := range want {
						if math.Abs(got[c]-want[c]) > 1e-12 {
							t.Errorf("raw tf %v: Probabilities(%.40q)[%d] = %v, the trained rows give %v", raw, text, c, got[c], want[c])
						}
					}
				}
			})
		}
		wg.Wait()
	}
}
