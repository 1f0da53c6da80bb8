package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"testing"
)

// The vectors of FORMATS.md, "Splits".
var splitVectors = []struct {
	seed  int64
	id    string
	hex8  string
	frac  float64
	split string
}{
	{0, "r1", "a2480037", 0.633911, "train"},
	{0, "r5", "d0fdd650", 0.816373, "val"},
	{0, "item_001", "c1fdbc90", 0.757778, "val"},
	{42, "r2", "e651b672", 0.899684, "test"},
	{42, "r3", "03baf598", 0.014572, "train"},
}

func TestSplitOfVectors(t *testing.T) {
	for _, v := range splitVectors {
		t.Run(fmt.Sprintf("%d:%s", v.seed, v.id), func(t *testing.T) {
			h := sha256.Sum256([]byte(fmt.Sprintf("%d:%s", v.seed, v.id)))
			hex8 := hex.EncodeToString(h[:])[:8]
			if hex8 != v.hex8 {
				t.Fatalf("first 8 hex digits = %s, want %s", hex8, v.hex8)
			}
			n, err := strconv.ParseUint(hex8, 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			if frac := float64(n) / 0xFFFFFFFF; math.Abs(frac-v.frac) > 5e-7 {
				t.Fatalf("frac = %.6f, want %.6f", frac, v.frac)
			}
			if got := SplitOf(v.seed, v.id, DefaultSplits()); got != v.split {
				t.Fatalf("SplitOf = %q, want %q", got, v.split)
			}
		})
	}
}

func TestSplitOfNormalises(t *testing.T) {
	scaled := []Split{{"train", 7}, {"val", 1.5}, {"test", 1.5}}
	for _, v := range splitVectors {
		if got := SplitOf(v.seed, v.id, scaled); got != v.split {
			t.Errorf("SplitOf(%d, %q, 7/1.5/1.5) = %q, want %q", v.seed, v.id, got, v.split)
		}
	}
	for i := 0; i < 2000; i++ {
		id := "item_" + strconv.Itoa(i)
		if a, b := SplitOf(3, id, DefaultSplits()), SplitOf(3, id, scaled); a != b {
			t.Fatalf("%s: %q with default fractions, %q with 7/1.5/1.5", id, a, b)
		}
	}
}

func TestSplitOfEdges(t *testing.T) {
	cases := []struct {
		name   string
		splits []Split
		want   string
	}{
		{"no splits", nil, ""},
		{"one split", []Split{{"all", 1}}, "all"},
		{"zero shares fall to the last", []Split{{"a", 0}, {"b", 0}}, "b"},
		// r1 has frac 0.63: with train 0.5 it lands in the second band.
		{"config order decides", []Split{{"train", 0.5}, {"test", 0.5}}, "test"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := SplitOf(0, "r1", c.splits); got != c.want {
				t.Fatalf("SplitOf = %q, want %q", got, c.want)
			}
		})
	}
}

func TestSplitOfAllocations(t *testing.T) {
	splits := DefaultSplits()
	n := testing.AllocsPerRun(1000, func() { SplitOf(42, "item_000123", splits) })
	if n != 0 {
		t.Fatalf("SplitOf allocates %v times a call, want 0", n)
	}
}

func BenchmarkSplitOf(b *testing.B) {
	splits := DefaultSplits()
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = "item_" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		SplitOf(int64(i&7), ids[i&1023], splits)
	}
}
