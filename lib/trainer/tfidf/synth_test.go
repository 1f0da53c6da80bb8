package tfidf

import (
	"math/rand/v2"
	"strings"
)

// synth generates text over a shared vocabulary whose word frequencies
// follow Zipf's law. Each topic has its own Zipf distribution over a
// shuffled copy of the vocabulary, so topics share words but favour
// different ones; a document mixes background words with words of its
// topics.
type synth struct {
	words      []string
	background *rand.Zipf
	topics     []synthTopic
	rng        *rand.Rand
	topicShare float64
}

type synthTopic struct {
	order []int
	zipf  *rand.Zipf
}

func newSynth(seed uint64, vocab, topics int, topicShare float64) *synth {
	rng := rand.New(rand.NewPCG(seed, 1))
	syl := strings.Fields("ka lo mi ne su ta ri po ve du sa ko li me nu to ra pe vi da ze go hu fa bi jo qu wy xe ce")
	s := &synth{rng: rng, topicShare: topicShare}
	for i := range vocab {
		var b strings.Builder
		for n := i; ; n /= len(syl) {
			b.WriteString(syl[n%len(syl)])
			if n < len(syl) {
				break
			}
		}
		s.words = append(s.words, b.String())
	}
	s.background = rand.NewZipf(rng, 1.1, 2, uint64(vocab-1))
	for range topics {
		t := synthTopic{order: rng.Perm(vocab), zipf: rand.NewZipf(rng, 1.1, 2, uint64(vocab-1))}
		s.topics = append(s.topics, t)
	}
	return s
}

// doc returns a document of minLen to maxLen words about the given topics.
func (s *synth) doc(topics []int, minLen, maxLen int) string {
	n := minLen + s.rng.IntN(maxLen-minLen+1)
	var b strings.Builder
	for i := range n {
		var w string
		if len(topics) > 0 && s.rng.Float64() < s.topicShare {
			t := s.topics[topics[s.rng.IntN(len(topics))]]
			w = s.words[t.order[t.zipf.Uint64()]]
		} else {
			w = s.words[s.background.Uint64()]
		}
		switch {
		case i == 0:
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		case s.rng.IntN(12) == 0:
			b.WriteString(". " + strings.ToUpper(w[:1]) + w[1:])
		case s.rng.IntN(15) == 0:
			b.WriteString(", " + w)
		default:
			b.WriteString(" " + w)
		}
	}
	b.WriteString(".")
	return b.String()
}

// nominalCorpus returns n documents, each about one of len(labels)
// topics, its label replaced by another at random with probability noise.
func nominalCorpus(seed uint64, n, vocab int, labels []string, noise float64) []Doc {
	s := newSynth(seed, vocab, len(labels), 0.3)
	docs := make([]Doc, n)
	for i := range docs {
		t := s.rng.IntN(len(labels))
		l := t
		if s.rng.Float64() < noise {
			l = (t + 1 + s.rng.IntN(len(labels)-1)) % len(labels)
		}
		docs[i] = Doc{Text: s.doc([]int{t}, 20, 80), Labels: []string{labels[l]}}
	}
	return docs
}

// multilabelCorpus returns n documents, each carrying each label with
// probability 0.35 and holding words of the topics of its labels.
func multilabelCorpus(seed uint64, n, vocab int, labels []string) []Doc {
	s := newSynth(seed, vocab, len(labels), 0.5)
	docs := make([]Doc, n)
	for i := range docs {
		var topics []int
		var ls []string
		for c, l := range labels {
			if s.rng.Float64() < 0.35 {
				topics = append(topics, c)
				ls = append(ls, l)
			}
		}
		docs[i] = Doc{Text: s.doc(topics, 20, 80), Labels: ls}
	}
	return docs
}
