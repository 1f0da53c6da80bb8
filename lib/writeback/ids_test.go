package writeback

import (
	"fmt"
	"path/filepath"
	"testing"
)

// The ids a Publish read serve the next Publish on the same bundle, and a
// split file changed since is read again: an item added to it is one, an
// item taken out of it is not.
func TestItemsKeptForTheSameBundle(t *testing.T) {
	s, _ := openTestStore(t)
	bdir := testBundle(t)
	files, err := splitFiles(bdir)
	if err != nil {
		t.Fatal(err)
	}
	if ids := cachedItems(files); ids != nil {
		t.Fatalf("ids %v kept for a bundle nothing has read", ids)
	}
	rep := publish(t, s, bdir, sentiment("r1", 1),
		pred{"v2", "sentiment", label("pos", 0.9), conf(0.9)},
		pred{"nope", "sentiment", label("pos", 0.9), conf(0.9)})
	if rep.NWritten != 1 || rep.RefusedBy[RefusedItem] != 1 {
		t.Fatalf("report %+v, want v2 written and nope refused", rep)
	}
	ids := cachedItems(files)
	if ids == nil || ids.len() != 7 || !ids.has("v2") || ids.has("nope") {
		t.Fatalf("kept ids %v after Publish, want the bundle's 7", ids)
	}
	target := map[string]any{"sentiment": "pos"}
	writeLines(t, filepath.Join(bdir, "test.jsonl"), row{"e1", "f", target}, row{"nope", "x", target})
	if cachedItems(files) != nil {
		t.Fatal("the ids of a bundle whose split file changed are still kept")
	}
	rep = publish(t, s, bdir, sentiment("r2", 2),
		pred{"nope", "sentiment", label("pos", 0.9), conf(0.9)},
		pred{"e2", "sentiment", label("pos", 0.9), conf(0.9)})
	if rep.NWritten != 1 || rep.RefusedBy[RefusedItem] != 1 {
		t.Fatalf("report %+v after the change, want nope written and e2 refused", rep)
	}
}

// An idSet has every id added and, but for a hash collision (one chance in
// 2⁶⁴ an id), no other, at any size; the empty set unsorted too.
func TestIDSetHas(t *testing.T) {
	if newIDSet(0).has("x") {
		t.Fatal("the empty set has x")
	}
	for _, n := range []int{0, 1, 2, 3, 1000, 100_000} {
		s := newIDSet(n)
		for i := range n {
			s.add(fmt.Sprintf("in%d", i))
			s.add(fmt.Sprintf("in%d", i/2)) // some twice
		}
		s.sort()
		if s.len() != n {
			t.Fatalf("%d ids: len %d", n, s.len())
		}
		for i := range n {
			if !s.has(fmt.Sprintf("in%d", i)) {
				t.Fatalf("%d ids: in%d not found", n, i)
			}
			if s.has(fmt.Sprintf("out%d", i)) || s.has(fmt.Sprintf("in%d", n+i)) {
				t.Fatalf("%d ids: out%d or in%d found", n, i, n+i)
			}
		}
	}
}

// The ids a bundle's writer handed over (BundleItems) serve the readings
// of that bundle, until a split file changes.
func TestBundleItemsKept(t *testing.T) {
	bdir := testBundle(t)
	files, err := splitFiles(bdir)
	if err != nil {
		t.Fatal(err)
	}
	b := NewBundleItems()
	for _, id := range []string{"t1", "t2", "v1", "v2", "v3", "e1", "e2"} {
		b.Add(id)
	}
	if err := b.Keep(bdir); err != nil {
		t.Fatal(err)
	}
	ids := cachedItems(files)
	if ids == nil || ids.len() != 7 || !ids.has("e2") || ids.has("nope") {
		t.Fatalf("kept ids %v, want the bundle's 7", ids)
	}
	writeLines(t, filepath.Join(bdir, "val.jsonl"), row{"v1", "x", nil})
	if cachedItems(files) != nil {
		t.Fatal("the ids of a bundle whose split file changed are still kept")
	}
}
