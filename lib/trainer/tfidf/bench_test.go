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
