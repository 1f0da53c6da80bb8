package bundle

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"
)

// Split is one band of the split assignment: a name and its share. Shares
// need not sum to 1; SplitOf normalises them.
type Split struct {
	Name     string
	Fraction float64
}

// DefaultSplits is Potato's default: train 0.7, val 0.15, test 0.15.
func DefaultSplits() []Split {
	return []Split{{"train", 0.7}, {"val", 0.15}, {"test", 0.15}}
}

// SplitOf assigns an item to a split the way Potato does (FORMATS.md,
// "Splits"): h = sha256("<seed>:<instanceID>"), frac = the first 8 hex
// digits of h as an integer over 0xFFFFFFFF, and the split is the first, in
// order, whose cumulative normalised fraction is >= frac, else the last.
// It returns "" when splits is empty.
func SplitOf(seed int64, instanceID string, splits []Split) string {
	if len(splits) == 0 {
		return ""
	}
	// The key is built on the stack for ordinary ids, so a call does not
	// allocate.
	var buf [96]byte
	key := strconv.AppendInt(buf[:0], seed, 10)
	key = append(key, ':')
	key = append(key, instanceID...)
	h := sha256.Sum256(key)
	frac := float64(binary.BigEndian.Uint32(h[:4])) / 0xFFFFFFFF

	var total float64
	for _, s := range splits {
		total += s.Fraction
	}
	if total > 0 {
		var cum float64
		for _, s := range splits {
			cum += s.Fraction / total
			if cum >= frac {
				return s.Name
			}
		}
	}
	return splits[len(splits)-1].Name
}
