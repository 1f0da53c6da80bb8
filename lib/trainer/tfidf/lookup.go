package tfidf

import (
	"hash/maphash"
	"math/bits"
)

// The lookups of prediction, a word's id and a pair of words' feature, are
// made once a token of every item predicted: 200 million of them for a
// million emails. Go's maps answered them from some 2 MB of slots, keys
// and strings spread over the heap, and a lookup cost a miss of the L2
// cache more often than not. The two tables below hold the same in
// contiguous arrays of 8-byte slots, at most three quarters full, probed
// linearly: a lookup reads one or two cache lines.

// wordTable maps a word's bytes to its id.
type wordTable struct {
	seed  maphash.Seed
	slots []uint64 // hash's high 32 bits << 32 | id+1; 0 is empty
	mask  uint64
	arena []byte   // the words' bytes, one after the other
	off   []uint32 // word id -> arena[off[id]:off[id+1]]
}

// newWordTable indexes words, words[id] being the word of that id.
func newWordTable(words []string) wordTable {
	t := wordTable{seed: maphash.MakeSeed(), off: make([]uint32, 1, len(words)+1)}
	size := tableSize(len(words))
	t.slots, t.mask = make([]uint64, size), uint64(size-1)
	for id, w := range words {
		t.arena = append(t.arena, w...)
		t.off = append(t.off, uint32(len(t.arena)))
		h := maphash.String(t.seed, w)
		i := h & t.mask
		for t.slots[i] != 0 {
			i = (i + 1) & t.mask
		}
		t.slots[i] = h>>32<<32 | uint64(id+1)
	}
	return t
}

// id returns the id of word w, or -1.
func (t *wordTable) id(w []byte) int32 {
	h := maphash.Bytes(t.seed, w)
	tag := h >> 32
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := t.slots[i]
		if s == 0 {
			return -1
		}
		if s>>32 == tag {
			id := uint32(s) - 1
			if string(t.arena[t.off[id]:t.off[id+1]]) == string(w) {
				return int32(id)
			}
		}
	}
}

// pairTable maps a pair of word ids, pairKey(a, b), to a feature index.
type pairTable struct {
	keys  []uint64 // key+1; 0 is empty
	vals  []int32
	shift uint
}

func newPairTable(pairs map[uint64]int32) pairTable {
	size := tableSize(len(pairs))
	t := pairTable{keys: make([]uint64, size), vals: make([]int32, size), shift: uint(64 - bits.TrailingZeros(uint(size)))}
	for k, f := range pairs {
		i := t.slot(k)
		for t.keys[i] != 0 {
			i = (i + 1) & (len(t.keys) - 1)
		}
		t.keys[i], t.vals[i] = k+1, f
	}
	return t
}

// slot is where key's probe starts: Fibonacci hashing, the key times 2⁶⁴
// over the golden ratio, its top bits.
func (t *pairTable) slot(key uint64) int {
	return int(key * 0x9e3779b97f4a7c15 >> t.shift)
}

// feature returns the feature of the pair (a, b) of word ids, or -1.
func (t *pairTable) feature(a, b int32) int32 {
	k := pairKey(a, b) + 1
	for i := t.slot(k - 1); ; i = (i + 1) & (len(t.keys) - 1) {
		switch t.keys[i] {
		case k:
			return t.vals[i]
		case 0:
			return -1
		}
	}
}

// tableSize is the power of two, at least 8, that holds n entries at most
// three quarters full.
func tableSize(n int) int {
	size := 8
	for size*3 < n*4 {
		size *= 2
	}
	return size
}
