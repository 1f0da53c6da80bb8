package project

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"potato-training/lib/config"
)

// manyItems is a JSON Lines file of n items, spread over many decoder
// batches; bad(i) may replace item i's line.
func manyItems(t *testing.T, n int, bad func(i int) string) string {
	var b strings.Builder
	for i := range n {
		if s := bad(i); s != "" {
			b.WriteString(s + "\n")
			continue
		}
		fmt.Fprintf(&b, "{\"id\": \"i%d\", \"text\": \"line one\\nof item %d \\u00e9\", \"topic\": %d}\n", i, i, i%7)
	}
	return writeData(t, "many.jsonl", b.String())
}

// Items decoded on many goroutines come to fn in file order, and each
// error stops the walk where one goroutine would have: the items before
// the bad one, and none after it.
func TestEachItemParallelOrderAndErrors(t *testing.T) {
	const n = 5000
	none := func(int) string { return "" }
	schemes := []config.Scheme{{Name: "t", SourceField: "topic"}}
	var got []Item
	err := EachItem(Source{DataFiles: []string{manyItems(t, n, none)}, Schemes: schemes}, func(it Item) error {
		got = append(got, it)
		return nil
	})
	if err != nil || len(got) != n {
		t.Fatalf("%d items, %v; want %d", len(got), err, n)
	}
	for i, it := range got {
		if it.ID != fmt.Sprintf("i%d", i) || it.Text != fmt.Sprintf("line one\nof item %d é", i) || it.Fields["topic"] != fmt.Sprint(i%7) {
			t.Fatalf("item %d is %+v", i, it)
		}
	}
	cases := []struct {
		name string
		bad  func(i int) string
		want string
	}{
		{"invalid JSON", func(i int) string {
			if i == 3001 {
				return `{"id": "x", "text": tru}`
			}
			return ""
		}, "many.jsonl: line 3002: invalid JSON"},
		{"duplicate", func(i int) string {
			if i == 4000 {
				return `{"id": "i17", "text": "again"}`
			}
			return ""
		}, `many.jsonl: line 4001: duplicate item id "i17"`},
		{"no id", func(i int) string {
			if i == 2500 {
				return `{"text": "who"}`
			}
			return ""
		}, `many.jsonl: line 2501: item has no "id" field`},
		{"not an object", func(i int) string {
			if i == 1234 {
				return `[1]`
			}
			return ""
		}, "many.jsonl: line 1235: item is not a JSON object"},
	}
	for _, c := range cases {
		var seen int
		err := EachItem(Source{DataFiles: []string{manyItems(t, n, c.bad)}}, func(it Item) error {
			if it.ID != fmt.Sprintf("i%d", seen) {
				t.Fatalf("%s: item %d is %s", c.name, seen, it.ID)
			}
			seen++
			return nil
		})
		var line int
		fmt.Sscanf(c.want[strings.Index(c.want, "line ")+5:], "%d", &line)
		if err == nil || !strings.Contains(err.Error(), c.want) || seen != line-1 {
			t.Errorf("%s: %d items before the error %v; want %d and %q", c.name, seen, err, line-1, c.want)
		}
	}
	stop := errors.New("enough")
	seen := 0
	err = EachItem(Source{DataFiles: []string{manyItems(t, n, none)}}, func(Item) error {
		if seen++; seen == 700 {
			return stop
		}
		return nil
	})
	if err != stop || seen != 700 {
		t.Errorf("fn called %d times after it stopped the walk at 700 (%v)", seen, err)
	}
}
