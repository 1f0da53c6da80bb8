package tfidf

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkFitThreads fits corpora of 400 to 16,000 short documents (80%
// of them fitted, 20 to 80 words each) of four topics on one goroutine and
// on two. Where a step's documents hold fewer than minParallelStep terms,
// Fit's steps run on one goroutine whatever Threads says, so the two
// differ only in the vectorising and the scoring; above, two goroutines
// fit faster.
func BenchmarkFitThreads(b *testing.B) {
	labels := []string{"politics", "sport", "science", "arts"}
	for _, n := range []int{400, 2000, 8000, 16000} {
		train, val := split80(nominalCorpus(50, n, 20000, labels, 0.05))
		for _, th := range []int{1, 2} {
			b.Run(fmt.Sprintf("docs=%d/threads=%d", n, th), func(b *testing.B) {
				for range b.N {
					if _, err := Fit(context.Background(), train, val, labels, Options{Threads: th}, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
