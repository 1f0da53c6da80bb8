package writeback

import (
	"fmt"
	"hash/maphash"
	"math/bits"
	"os"
	"slices"
	"strings"
	"sync"
)

// A run's write-back reads the instance ids of every split of its bundle
// three times: RecordItems stores them, and Preview and Publish each check
// every prediction against them (readRules). On a project of a million
// items that is three scans of gigabytes of text for the same ids. A
// bundle is not changed once built, so the ids of the last bundle read are
// kept, as the set readRules makes (8 bytes an item), for as long as its
// split files have the same size and modification time.
var lastItems struct {
	sync.Mutex
	key string
	ids *idSet
}

// itemsKey names the split files of a bundle as they are now: path, size
// and modification time of each. ok is false when one cannot be read.
func itemsKey(files []splitFile) (key string, ok bool) {
	var b strings.Builder
	for _, f := range files {
		st, err := os.Stat(f.path)
		if err != nil {
			return "", false
		}
		fmt.Fprintf(&b, "%s\x00%d\x00%d\x00", f.path, st.Size(), st.ModTime().UnixNano())
	}
	return b.String(), true
}

// cachedItems returns the ids kept for files, or nil.
func cachedItems(files []splitFile) *idSet {
	key, ok := itemsKey(files)
	if !ok {
		return nil
	}
	lastItems.Lock()
	defer lastItems.Unlock()
	if lastItems.key == key {
		return lastItems.ids
	}
	return nil
}

// keepItems keeps ids, sorted, as those of files, read when they had key.
func keepItems(key string, ids *idSet) {
	lastItems.Lock()
	defer lastItems.Unlock()
	lastItems.key, lastItems.ids = key, ids
}

// idSet is a set of instance ids held as sorted 64-bit hashes: an eighth
// of the memory of the strings, no allocation per id, and quicker to build
// than a map. A hash collision can only make an id look present, so a set
// of train ids may skip a prediction it should have published (for a
// million-item bundle, about one chance in fifty million a publish) and
// never lets a train item through.
type idSet struct {
	seed maphash.Seed
	h    []uint64
	// dir[k] is the index in h of the first hash whose top bits, h >>
	// shift, are k or more: has looks at the one or two hashes of its
	// bucket, where a binary search of a million took some twenty reads.
	dir   []uint32
	shift uint
}

func newIDSet(n int) *idSet {
	return &idSet{seed: maphash.MakeSeed(), h: make([]uint64, 0, n), dir: []uint32{0, 0}, shift: 64}
}

// add adds an id; sort must be called after the last add, before has.
func (s *idSet) add(id string) { s.h = append(s.h, maphash.String(s.seed, id)) }

func (s *idSet) sort() {
	slices.Sort(s.h)
	s.h = slices.Compact(s.h)
	b := bits.Len(uint(len(s.h)))
	s.shift = uint(64 - b)
	s.dir = make([]uint32, 1<<b+1)
	i := 0
	for k := range s.dir {
		for i < len(s.h) && s.h[i]>>s.shift < uint64(k) {
			i++
		}
		s.dir[k] = uint32(i)
	}
}

func (s *idSet) has(id string) bool {
	x := maphash.String(s.seed, id)
	k := x >> s.shift
	for _, y := range s.h[s.dir[k]:s.dir[k+1]] {
		if y == x {
			return true
		}
	}
	return false
}

func (s *idSet) len() int { return len(s.h) }

// trainIDs reads the instance ids of the bundle's train split. A bundle
// whose manifest lists no train split has none; a bundle without a manifest
// must have train.jsonl, since publishing without knowing the train split
// could publish a train item.
func trainIDs(bundleDir string) (*idSet, error) {
	path, n, err := splitPath(bundleDir, "train")
	if err != nil || path == "" {
		return newIDSet(0), err
	}
	ids := newIDSet(n)
	if err := addIDs(ids, path); err != nil {
		return nil, fmt.Errorf("train split: %w", err)
	}
	ids.sort()
	return ids, nil
}

// addIDs adds the instance_id of each line of the split file at path to
// ids, unsorted.
func addIDs(ids *idSet, path string) error {
	r := newIDReader()
	return scanLines(path, func(line []byte, _ int) error {
		id, err := r.line(line)
		if err == nil {
			ids.add(id)
		}
		return err
	})
}

// idReader reads the instance_id of a split file's line as addIDs does.
type idReader struct {
	keys []string
	raw  [][]byte
}

func newIDReader() *idReader { return &idReader{keys: []string{"instance_id"}, raw: make([][]byte, 1)} }

func (r *idReader) line(line []byte) (string, error) {
	if err := scanObject(line, r.keys, r.raw); err != nil {
		return "", err
	}
	if err := checkID(r.raw[0]); err != nil {
		return "", err
	}
	return stringValue(r.raw[0], "instance_id")
}

// BundleItems collects the ids of a bundle's rows as the bundle is
// written, so that the readings of its run (ReadRun, Publish) need not
// read its split files again for them: at a million items, a reading of
// 1.3 GB.
type BundleItems struct{ ids *idSet }

// NewBundleItems returns an empty collection.
func NewBundleItems() *BundleItems { return &BundleItems{ids: newIDSet(0)} }

// Add adds the id of a row written.
func (b *BundleItems) Add(id string) { b.ids.add(id) }

// Keep keeps the ids as those of the split files of the bundle in
// bundleDir as they are now (their sizes and times): a reading of a file
// changed since reads it again.
func (b *BundleItems) Keep(bundleDir string) error {
	files, err := splitFiles(bundleDir)
	if err != nil {
		return err
	}
	if key, ok := itemsKey(files); ok {
		b.ids.sort()
		keepItems(key, b.ids)
	}
	return nil
}
