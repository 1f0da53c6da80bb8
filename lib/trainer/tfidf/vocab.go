package tfidf

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// vocabulary maps text to TF-IDF rows. Features are identified by word ids
// internally so that a bigram is looked up by a pair of integers rather
// than by a freshly built string.
type vocabulary struct {
	terms     []string  // feature index -> "word" or "word word"
	idf       []float64 // feature index -> inverse document frequency
	sublinear bool      // tf weight is 1+ln(tf) rather than tf

	words map[string]int32 // word -> word id (words used by some feature)
	uni   []int32          // word id -> feature index of the word alone, or -1
	bi    map[uint64]int32 // pairKey(word id, word id) -> feature index

	// The same as words and bi, for the lookups of vectorising (index).
	wordIndex wordTable
	pairIndex pairTable
}

// index builds the lookup tables of words and bi.
func (v *vocabulary) index() {
	list := make([]string, len(v.words))
	for w, id := range v.words {
		list[id] = w
	}
	v.wordIndex = newWordTable(list)
	v.pairIndex = newPairTable(v.bi)
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// rows is a sparse matrix in compressed row form: row i has the feature
// indices idx[ptr[i]:ptr[i+1]], ascending, with values val[ptr[i]:ptr[i+1]].
type rows struct {
	ptr []int
	idx []int32
	val []float32
}

func (r *rows) n() int { return len(r.ptr) - 1 }

func (r *rows) row(i int) ([]int32, []float32) {
	a, b := r.ptr[i], r.ptr[i+1]
	return r.idx[a:b], r.val[a:b]
}

// tokenized holds the word ids of a corpus: document i is
// ids[off[i]:off[i+1]], with -1 for a word outside the vocabulary.
type tokenized struct {
	ids []int32
	off []int
}

// buildVocabulary counts document frequencies over texts and keeps the
// unigrams and bigrams found in at least minDF documents, at most
// maxFeatures of them, the most frequent first (ties in byte order of the
// term). Feature indices follow that order. It also returns texts as word
// ids of the new vocabulary, ready for vectorize.
func buildVocabulary(ctx context.Context, texts []string, minDF, maxFeatures int, sublinear bool) (*vocabulary, *tokenized, error) {
	words := make(map[string]int32)
	var wordList []string
	var uniDF, lastDoc []int32
	// Words run to some six bytes with their separator; a good guess at
	// the sizes saves copying the two big slices as they grow.
	guess := 0
	for _, t := range texts {
		guess += len(t) / 6
	}
	tok := &tokenized{ids: make([]int32, 0, guess), off: make([]int, 1, len(texts)+1)}
	pairs := make([]uint64, 0, guess)
	var buf []byte
	var ends []int
	for d, text := range texts {
		if d%1024 == 0 && ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		buf, ends = appendTokens(text, buf[:0], ends[:0])
		first := len(tok.ids)
		start := 0
		for _, end := range ends {
			w := buf[start:end]
			start = end
			id, ok := words[string(w)]
			if !ok {
				id = int32(len(wordList))
				s := string(w)
				words[s] = id
				wordList = append(wordList, s)
				uniDF = append(uniDF, 0)
				lastDoc = append(lastDoc, -1)
			}
			if lastDoc[id] != int32(d) {
				lastDoc[id] = int32(d)
				uniDF[id]++
			}
			tok.ids = append(tok.ids, id)
		}
		doc := tok.ids[first:]
		mark := len(pairs)
		for j := 1; j < len(doc); j++ {
			pairs = append(pairs, pairKey(doc[j-1], doc[j]))
		}
		// Keep each document's distinct pairs only: sorting all of them and
		// counting runs then gives document frequencies.
		mine := pairs[mark:]
		slices.Sort(mine)
		pairs = pairs[:mark+len(slices.Compact(mine))]
		tok.off = append(tok.off, len(tok.ids))
	}
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	// Pack each pair into 2·wb bits, so that the radix sort has few passes.
	wb := bits.Len(uint(len(wordList)))
	for i, p := range pairs {
		pairs[i] = p>>32<<wb | p&(1<<32-1)
	}
	radixSort(pairs, 2*wb)

	type candidate struct {
		term string
		df   int32
		a, b int32 // word ids; b is -1 for a unigram
	}
	var cands []candidate
	for id, df := range uniDF {
		if int(df) >= minDF {
			cands = append(cands, candidate{wordList[id], df, int32(id), -1})
		}
	}
	for j := 0; j < len(pairs); {
		k := j + 1
		for k < len(pairs) && pairs[k] == pairs[j] {
			k++
		}
		if k-j >= minDF {
			a, b := int32(pairs[j]>>wb), int32(pairs[j]&(1<<wb-1))
			cands = append(cands, candidate{wordList[a] + " " + wordList[b], int32(k - j), a, b})
		}
		j = k
	}
	pairs = nil
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	slices.SortFunc(cands, func(x, y candidate) int {
		if c := cmp.Compare(y.df, x.df); c != 0 {
			return c
		}
		return strings.Compare(x.term, y.term)
	})
	if len(cands) > maxFeatures {
		cands = cands[:maxFeatures]
	}

	// Renumber the words that survive so the model holds only those.
	remap := make([]int32, len(wordList))
	for i := range remap {
		remap[i] = -1
	}
	v := &vocabulary{
		terms:     make([]string, len(cands)),
		idf:       make([]float64, len(cands)),
		sublinear: sublinear,
		words:     make(map[string]int32),
		bi:        make(map[uint64]int32),
	}
	intern := func(old int32) int32 {
		if remap[old] < 0 {
			remap[old] = int32(len(v.uni))
			v.words[wordList[old]] = remap[old]
			v.uni = append(v.uni, -1)
		}
		return remap[old]
	}
	n := float64(len(texts))
	for i, c := range cands {
		v.terms[i] = c.term
		v.idf[i] = math.Log((1+n)/(1+float64(c.df))) + 1
		a := intern(c.a)
		if c.b < 0 {
			v.uni[a] = int32(i)
		} else {
			v.bi[pairKey(a, intern(c.b))] = int32(i)
		}
	}
	for i, id := range tok.ids {
		tok.ids[i] = remap[id]
	}
	v.index()
	return v, tok, nil
}

// radixSort sorts keys that fit in the low nbits bits.
func radixSort(keys []uint64, nbits int) {
	const digit = 11
	if len(keys) < 2 {
		return
	}
	tmp := make([]uint64, len(keys))
	src, dst := keys, tmp
	var count [1 << digit]int
	for shift := 0; shift < nbits; shift += digit {
		clear(count[:])
		for _, k := range src {
			count[k>>shift&(1<<digit-1)]++
		}
		sum := 0
		for i, c := range count {
			count[i] = sum
			sum += c
		}
		for _, k := range src {
			d := k >> shift & (1<<digit - 1)
			dst[count[d]] = k
			count[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &keys[0] {
		copy(keys, src)
	}
}

// newVocabulary rebuilds the lookup tables from the terms in index order,
// as read from a saved model.
func newVocabulary(terms []string, idf []float64, sublinear bool) (*vocabulary, error) {
	v := &vocabulary{
		terms:     terms,
		idf:       idf,
		sublinear: sublinear,
		words:     make(map[string]int32),
		bi:        make(map[uint64]int32),
	}
	intern := func(w string) (int32, bool) {
		if t := Tokenize(w); len(t) != 1 || t[0] != w {
			return 0, false
		}
		id, ok := v.words[w]
		if !ok {
			id = int32(len(v.uni))
			v.words[w] = id
			v.uni = append(v.uni, -1)
		}
		return id, true
	}
	for i, t := range terms {
		bad := func() error {
			return fmt.Errorf("vocab[%d] %q is not a word or two words joined by a space, or repeats an earlier term", i, t)
		}
		first, second, pair := strings.Cut(t, " ")
		a, ok := intern(first)
		if !ok {
			return nil, bad()
		}
		if !pair {
			if v.uni[a] >= 0 {
				return nil, bad()
			}
			v.uni[a] = int32(i)
			continue
		}
		b, ok := intern(second)
		if !ok {
			return nil, bad()
		}
		k := pairKey(a, b)
		if _, dup := v.bi[k]; dup {
			return nil, bad()
		}
		v.bi[k] = int32(i)
	}
	v.index()
	return v, nil
}

// wordIDs appends the word ids of text to ids, -1 for unknown words.
func (v *vocabulary) wordIDs(text string, s *scratch) []int32 {
	s.buf, s.ends = appendTokens(text, s.buf[:0], s.ends[:0])
	s.ids = s.ids[:0]
	start := 0
	for _, end := range s.ends {
		s.ids = append(s.ids, v.wordIndex.id(s.buf[start:end]))
		start = end
	}
	return s.ids
}

// scratch is the reusable working memory of one goroutine vectorising
// documents.
type scratch struct {
	buf   []byte
	ends  []int
	ids   []int32
	feats []int32
	idx   []int32
	val   []float32
	// termCounts': the count of each feature, zero but while in use, and
	// the features counted and their counts, in order of first occurrence.
	seen   []int32
	counts []int32
}

// vector returns the L2-normalised TF-IDF row of a document given as word
// ids. The returned slices alias s and are valid until its next use.
func (v *vocabulary) vector(ids []int32, s *scratch) ([]int32, []float32) {
	feats := s.feats[:0]
	for j, a := range ids {
		if a < 0 {
			continue
		}
		if f := v.uni[a]; f >= 0 {
			feats = append(feats, f)
		}
		if j > 0 && ids[j-1] >= 0 {
			if f := v.pairIndex.feature(ids[j-1], a); f >= 0 {
				feats = append(feats, f)
			}
		}
	}
	slices.Sort(feats)
	s.feats = feats
	idx, val := s.idx[:0], s.val[:0]
	var norm float64
	for j := 0; j < len(feats); {
		k := j + 1
		for k < len(feats) && feats[k] == feats[j] {
			k++
		}
		tf := float64(k - j)
		if v.sublinear {
			tf = 1 + math.Log(tf)
		}
		x := tf * v.idf[feats[j]]
		norm += x * x
		idx = append(idx, feats[j])
		val = append(val, float32(x))
		j = k
	}
	if norm > 0 {
		inv := 1 / math.Sqrt(norm)
		for j := range val {
			val[j] = float32(float64(val[j]) * inv)
		}
	}
	s.idx, s.val = idx, val
	return idx, val
}

// termCounts returns the features of a document given as word ids, each
// once in the order of its first occurrence, and how often each occurs:
// what vector weighs, without its sort. The slices alias s.
func (v *vocabulary) termCounts(ids []int32, s *scratch) (feats, counts []int32) {
	if len(s.seen) < len(v.idf) {
		s.seen = make([]int32, len(v.idf))
	}
	feats, counts = s.feats[:0], s.counts[:0]
	add := func(f int32) {
		if at := s.seen[f]; at > 0 {
			counts[at-1]++
			return
		}
		feats = append(feats, f)
		counts = append(counts, 1)
		s.seen[f] = int32(len(feats))
	}
	for j, a := range ids {
		if a < 0 {
			continue
		}
		if f := v.uni[a]; f >= 0 {
			add(f)
		}
		if j > 0 && ids[j-1] >= 0 {
			if f := v.pairIndex.feature(ids[j-1], a); f >= 0 {
				add(f)
			}
		}
	}
	for _, f := range feats {
		s.seen[f] = 0
	}
	s.feats, s.counts = feats, counts
	return feats, counts
}

// tf is the term-frequency weight of a feature occurring n times, which
// times its idf is its TF-IDF value before the row's scaling.
func (v *vocabulary) tf(n int32) float64 {
	tf := float64(n)
	if v.sublinear {
		if int(n) < len(sublinearTF) {
			tf = sublinearTF[n]
		} else {
			tf = 1 + math.Log(tf)
		}
	}
	return tf
}

// sublinearTF[n] is 1 + log(n), the sublinear weight of a term that occurs
// n times, for the small counts of nearly every term of a document: the
// same values, without a logarithm a feature of every prediction.
var sublinearTF = func() (t [64]float64) {
	for n := range t {
		t[n] = 1 + math.Log(float64(n))
	}
	return t
}()

// vectorize builds the rows of n documents, doc(i, s) giving document i's
// word ids, on the given number of goroutines. Documents are cut into
// fixed chunks and the chunks joined in order, so the result does not
// depend on threads.
func vectorize(ctx context.Context, v *vocabulary, n, threads int, doc func(i int, s *scratch) []int32) (*rows, error) {
	const chunk = 512
	nchunks := (n + chunk - 1) / chunk
	parts := make([]rows, nchunks)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(threads, max(nchunks, 1)) {
		wg.Go(func() {
			var s scratch
			for {
				c := int(next.Add(1) - 1)
				if c >= nchunks || ctx.Err() != nil {
					return
				}
				p := &parts[c]
				p.ptr = append(p.ptr, 0)
				for i := c * chunk; i < min(n, (c+1)*chunk); i++ {
					idx, val := v.vector(doc(i, &s), &s)
					p.idx = append(p.idx, idx...)
					p.val = append(p.val, val...)
					p.ptr = append(p.ptr, len(p.idx))
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	total := 0
	for _, p := range parts {
		total += len(p.idx)
	}
	out := &rows{ptr: make([]int, 1, n+1), idx: make([]int32, 0, total), val: make([]float32, 0, total)}
	for _, p := range parts {
		base := len(out.idx)
		for _, q := range p.ptr[1:] {
			out.ptr = append(out.ptr, base+q)
		}
		out.idx = append(out.idx, p.idx...)
		out.val = append(out.val, p.val...)
	}
	return out, nil
}
