package writeback

import (
	"fmt"
	"os"
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
