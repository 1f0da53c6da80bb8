package tfidf

import (
	"context"
	"testing"
	"time"
)

// BenchmarkFit50k fits 40,000 training documents of four topics over a
// 20,000-word Zipf vocabulary (20 to 80 words each, 5% of labels wrong)
// and validates on 10,000 more, on two threads. It reports the seconds
// one Fit takes (fit_s) and the validation accuracy (val_acc); with 5%
// label noise about 0.95 is the most a model can score.
func BenchmarkFit50k(b *testing.B) {
	labels := []string{"politics", "sport", "science", "arts"}
	train, val := split80(nominalCorpus(50, 50000, 20000, labels, 0.05))
	b.ResetTimer()
	var fit time.Duration
	var acc float64
	for range b.N {
		began := time.Now()
		m, err := Fit(context.Background(), train, val, labels, Options{Threads: 2}, nil)
		if err != nil {
			b.Fatal(err)
		}
		fit += time.Since(began)
		acc = m.Summary().ValAccuracy
	}
	b.ReportMetric(fit.Seconds()/float64(b.N), "fit_s")
	b.ReportMetric(acc, "val_acc")
}

// BenchmarkProbabilities predicts documents of the BenchmarkFit50k corpus
// one after another with a model fitted on 40,000 of them (some 196,000
// features, four labels): what a worker does once an item to predict and
// a schema. ns/op is a document's; MB/s counts the bytes of text read.
func BenchmarkProbabilities(b *testing.B) {
	labels := []string{"politics", "sport", "science", "arts"}
	train, val := split80(nominalCorpus(50, 50000, 20000, labels, 0.05))
	m, err := Fit(context.Background(), train, val, labels, Options{Threads: 2}, nil)
	if err != nil {
		b.Fatal(err)
	}
	test := nominalCorpus(51, 10000, 20000, labels, 0.05)
	size := 0
	for _, d := range test {
		size += len(d.Text)
	}
	b.SetBytes(int64(size / len(test)))
	b.ResetTimer()
	for i := range b.N {
		m.Probabilities(test[i%len(test)].Text)
	}
}
