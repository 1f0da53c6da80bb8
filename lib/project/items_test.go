package project

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"potato-training/lib/config"
)

func abs(t testing.TB, path string) string {
	t.Helper()
	p, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func collect(t *testing.T, src Source) []Item {
	t.Helper()
	var items []Item
	if err := EachItem(src, func(it Item) error {
		items = append(items, it)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return items
}

var imageScheme = config.Scheme{Name: "picture", AnnotationType: "radio", Kind: config.KindNominal, SourceField: "image"}

func TestEachItemFormats(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []Item
	}{
		{"items.json", []Item{
			{ID: "7", Text: "Seven is a number.", Fields: map[string]string{"image": "img/7.png"}},
			{ID: `a"b`, Text: `Escaped "quotes" and a café.`, Fields: map[string]string{}},
			{ID: "c", Text: `{"turns": ["hi", "there"]}`, Fields: map[string]string{}},
		}},
		{"lines.json", []Item{
			{ID: "l1", Text: "First line.", Fields: map[string]string{}},
			{ID: "l2", Text: "Second line.", Fields: map[string]string{}},
			{ID: "3.5", Text: "Third line.", Fields: map[string]string{}},
		}},
		{"items.jsonl", []Item{
			{ID: "j1", Text: "One.", Fields: map[string]string{"image": "a.png"}},
			{ID: "j2", Text: "Two.", Fields: map[string]string{}},
		}},
		{"items.csv", []Item{
			{ID: "1", Text: "Hello, world", Fields: map[string]string{"image": "x.png"}},
			{ID: "2", Text: `A "quoted" word`, Fields: map[string]string{"image": ""}},
			{ID: "3", Text: "Two\nlines", Fields: map[string]string{"image": "z.png"}},
		}},
		{"items.tsv", []Item{
			{ID: "t1", Text: `A "lazy" quote`, Fields: map[string]string{"image": "p.png"}},
			{ID: "t2", Text: "plain", Fields: map[string]string{}},
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			src := Source{
				DataFiles: []string{abs(t, "testdata/data/"+tc.file)},
				IDKey:     "id", TextKey: "text",
				Schemes: []config.Scheme{imageScheme},
			}
			got := collect(t, src)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("items:\n got %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

func TestEachItemNoSourceFieldsAndOrder(t *testing.T) {
	src := Source{DataFiles: []string{
		abs(t, "testdata/data/items.jsonl"),
		abs(t, "testdata/data/items.csv"),
	}}
	var ids []string
	for _, it := range collect(t, src) {
		if it.Fields != nil {
			t.Errorf("item %q: Fields = %v, want nil without source fields", it.ID, it.Fields)
		}
		ids = append(ids, it.ID)
	}
	if want := []string{"j1", "j2", "1", "2", "3"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("ids = %q, want %q (defaults id/text, file order)", ids, want)
	}
}

func TestEachItemRealExamples(t *testing.T) {
	base := "../../testdata/potato-examples/advanced/"
	// reviews.json holds one object a line; reflection-examples.json is an array.
	got := collect(t, Source{
		DataFiles: []string{abs(t, base+"dataset-publishing/data/reviews.json")},
		IDKey:     "id", TextKey: "text",
	})
	if len(got) != 6 || got[0].ID != "r1" || got[5].ID != "r6" ||
		got[0].Text != "A stunning film with brilliant acting and a gripping plot." {
		t.Errorf("reviews.json: got %d items, first %+v", len(got), got)
	}
	got = collect(t, Source{
		DataFiles: []string{abs(t, base+"solo-mode/data/reflection-examples.json")},
		IDKey:     "id", TextKey: "text",
	})
	if len(got) == 0 || got[0].ID != "1" || got[1].Text != "I miss my parents. I feel alone." {
		t.Errorf("reflection-examples.json: got %+v", got)
	}
}

// writeData writes a data file into a temporary directory.
func writeData(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestEachItemErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		want                []string // substrings of the error
	}{
		{"missing id jsonl", "m.jsonl",
			"{\"id\": \"a\", \"text\": \"x\"}\n{\"id\": \"b\"}\n{\"text\": \"no id\"}\n",
			[]string{"m.jsonl", "line 3", `no "id" field`}},
		{"null id", "n.jsonl",
			"{\"id\": null, \"text\": \"x\"}\n",
			[]string{"n.jsonl", "line 1", `no "id" field`}},
		{"missing id array", "a.json",
			"[\n  {\"id\": 1},\n\n  {\"id\": 2},\n  {\"text\": \"x\"}\n]\n",
			[]string{"a.json", "line 5", `no "id" field`}},
		{"missing id csv", "c.csv",
			"id,text\n1,a\n,b\n",
			[]string{"c.csv", "line 3", `no "id" field`}},
		{"no id column", "h.tsv",
			"key\ttext\n1\ta\n",
			[]string{"h.tsv", `no "id" column`}},
		{"duplicate id jsonl", "d.jsonl",
			"{\"id\": 1}\n{\"id\": \"2\"}\n{\"id\": \"1\"}\n",
			[]string{"d.jsonl", "line 3", `duplicate item id "1"`}},
		{"duplicate id csv", "d.csv",
			"id,text\nx,1\ny,2\nx,3\n",
			[]string{"d.csv", "line 4", `duplicate item id "x"`}},
		{"not an object", "s.jsonl",
			"{\"id\": 1}\n[1, 2]\n",
			[]string{"s.jsonl", "line 2", "not a JSON object"}},
		{"bad json", "b.jsonl",
			"{\"id\": 1}\n{\"id\": 2,,}\n",
			[]string{"b.jsonl", "line 2", "invalid JSON"}},
		{"unclosed array", "u.json",
			"[{\"id\": 1}, {\"id\": 2}",
			[]string{"u.json"}},
		{"unknown extension", "items.xml",
			"<items/>",
			[]string{"items.xml", `unknown extension ".xml"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeData(t, tc.file, tc.content)
			err := EachItem(Source{DataFiles: []string{path}, IDKey: "id"}, func(Item) error { return nil })
			if err == nil {
				t.Fatalf("no error, want one naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestEachItemDuplicateAcrossFiles(t *testing.T) {
	a := writeData(t, "a.jsonl", "{\"id\": \"x\"}\n")
	b := writeData(t, "b.csv", "id\nx\n")
	err := EachItem(Source{DataFiles: []string{a, b}}, func(Item) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "b.csv: line 2: duplicate item id \"x\"") {
		t.Errorf("err = %v, want the duplicate reported in b.csv", err)
	}
}

func TestEachItemStopsOnCallbackError(t *testing.T) {
	stop := errors.New("enough")
	n := 0
	err := EachItem(Source{DataFiles: []string{abs(t, "testdata/data/items.csv")}}, func(Item) error {
		n++
		return stop
	})
	if err != stop || n != 1 {
		t.Errorf("err = %v after %d items, want the callback's own error after 1", err, n)
	}
}

func TestEachItemEmptyFiles(t *testing.T) {
	for _, name := range []string{"e.json", "e.jsonl", "e.csv", "w.json"} {
		content := ""
		if name == "w.json" {
			content = " \n [ ] \n"
		}
		path := writeData(t, name, content)
		if items := collect(t, Source{DataFiles: []string{path}}); len(items) != 0 {
			t.Errorf("%s: %d items, want none", name, len(items))
		}
	}
}

// BenchmarkEachItem1M reads a 1,000,000-item JSON Lines file (about 150
// MB). items/s is the throughput and x_encoding_json the ratio to a plain
// encoding/json read of the same file measured in the same run. heap_MB is
// the most live heap seen during a read above the heap before it: the
// duplicate-id set, which grows with the number of items but not with the
// size of the file.
func BenchmarkEachItem1M(b *testing.B) {
	const n = 1_000_000
	path := filepath.Join(b.TempDir(), "items.jsonl")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	text := strings.Repeat("lorem ipsum ", 8) // about 100 bytes with the number
	for i := range n {
		fmt.Fprintf(w, "{\"id\": \"item_%07d\", \"text\": \"%s%d\", \"label_hint\": %d}\n", i, text, i, i%3)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	src := Source{DataFiles: []string{path}, IDKey: "id", TextKey: "text"}

	reference := func() time.Duration {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		start := time.Now()
		dec := json.NewDecoder(bufio.NewReaderSize(f, 256<<10))
		seen := make(map[string]struct{})
		for {
			var m map[string]any
			if err := dec.Decode(&m); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
			seen[fmt.Sprint(m["id"])] = struct{}{}
		}
		if len(seen) != n {
			b.Fatalf("reference read %d items", len(seen))
		}
		return time.Since(start)
	}

	var peak uint64
	var elapsed time.Duration
	var ms runtime.MemStats
	b.ResetTimer()
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapInuse
		var paused time.Duration
		start := time.Now()
		count := 0
		err := EachItem(src, func(it Item) error {
			count++
			if count%250_000 == 0 {
				b.StopTimer()
				t := time.Now()
				runtime.GC()
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > before && ms.HeapInuse-before > peak {
					peak = ms.HeapInuse - before
				}
				paused += time.Since(t)
				b.StartTimer()
			}
			return nil
		})
		elapsed += time.Since(start) - paused
		if err != nil || count != n {
			b.Fatalf("%d items, err %v", count, err)
		}
	}
	b.StopTimer()
	ref := reference()
	perRead := elapsed / time.Duration(b.N)
	b.ReportMetric(float64(n)/perRead.Seconds(), "items/s")
	b.ReportMetric(ref.Seconds()/perRead.Seconds(), "x_encoding_json")
	b.ReportMetric(float64(peak)/(1<<20), "heap_MB")
}
