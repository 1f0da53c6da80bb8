package tfidf

import (
	"context"
	"testing"
)

// The lookup tables answer as the maps they are built from: every word and
// pair found with its id and feature, and words and pairs outside them not
// found (a word's prefix or extension, a pair reversed or of unknown ids).
func TestLookupTablesAgreeWithMaps(t *testing.T) {
	labels := []string{"a", "b", "c"}
	docs := nominalCorpus(7, 3000, 5000, labels, 0)
	texts := make([]string, len(docs))
	for i, d := range docs {
		texts[i] = d.Text
	}
	v, _, err := buildVocabulary(context.Background(), texts, 2, 20000, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.words) < 1000 || len(v.bi) < 1000 {
		t.Fatalf("a vocabulary too small to test: %d words, %d pairs", len(v.words), len(v.bi))
	}
	for w, id := range v.words {
		if got := v.wordIndex.id([]byte(w)); got != id {
			t.Fatalf("word %q: id %d, want %d", w, got, id)
		}
		for _, other := range []string{w + "x", w[:len(w)-1], "q" + w} {
			if _, in := v.words[other]; in {
				continue
			}
			if got := v.wordIndex.id([]byte(other)); got != -1 {
				t.Fatalf("%q, not a word of the vocabulary: id %d", other, got)
			}
		}
	}
	for k, f := range v.bi {
		a, b := int32(k>>32), int32(uint32(k))
		if got := v.pairIndex.feature(a, b); got != f {
			t.Fatalf("pair (%d, %d): feature %d, want %d", a, b, got, f)
		}
		if _, in := v.bi[pairKey(b, a)]; !in {
			if got := v.pairIndex.feature(b, a); got != -1 {
				t.Fatalf("pair (%d, %d), not in the vocabulary: feature %d", b, a, got)
			}
		}
	}
	n := int32(len(v.words))
	for _, p := range [][2]int32{{n, 0}, {0, n}, {n, n + 1}, {1 << 30, 1<<31 - 1}} {
		if got := v.pairIndex.feature(p[0], p[1]); got != -1 {
			t.Fatalf("pair %v of unknown ids: feature %d", p, got)
		}
	}
	if got := v.wordIndex.id(nil); got != -1 {
		t.Fatalf("the empty word: id %d", got)
	}
}
