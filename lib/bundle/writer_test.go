package bundle

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"potato-training/lib/config"
)

var testSchemas = []Schema{
	{Name: "sentiment", AnnotationType: "radio", Kind: config.KindNominal, Labels: []string{"pos", "neg", "neu"}},
	{Name: "topics", AnnotationType: "multiselect", Kind: config.KindMultilabel, Labels: []string{"a", "b", "c"}},
	{Name: "score", AnnotationType: "likert", Kind: config.KindOrdinal},
	{Name: "unused", AnnotationType: "select", Kind: config.KindNominal, Labels: []string{"x"}},
	{Name: "note", AnnotationType: "text", Kind: config.KindOther},
}

// fixture is the media a test bundle links: one file that is there and one
// path that is not.
type fixture struct {
	image, missing string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	src := t.TempDir()
	f := fixture{image: filepath.Join(src, "img1.png"), missing: filepath.Join(src, "gone.png")}
	if err := os.WriteFile(f.image, []byte("PNG bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// writeBundle builds the test bundle in dir; text0 is the first row's text,
// so a caller can change one byte of the bundle.
func writeBundle(t *testing.T, dir string, fx fixture, text0 string) Manifest {
	t.Helper()
	w, err := NewWriter(dir, []string{"train", "val", "test"}, true)
	if err != nil {
		t.Fatal(err)
	}
	adds := []struct {
		split string
		row   Row
	}{
		{"train", Row{InstanceID: "r1", Text: text0, Targets: map[string]any{"sentiment": "pos", "topics": []string{"b", "a"}, "score": 3}}},
		{"train", Row{InstanceID: "r2", Text: "<b>two</b> & more", Targets: map[string]any{"sentiment": "neg", "topics": []any{"c"}, "note": "free text"}}},
		{"val", Row{InstanceID: "r3", Text: "three", Targets: map[string]any{"sentiment": "pos"}, Media: fx.image}},
		{"val", Row{InstanceID: "r4", Text: "four", Targets: map[string]any{"sentiment": "neg"}, Media: fx.missing}},
		{"unlabeled", Row{InstanceID: "u1", Text: "no label"}},
	}
	for _, a := range adds {
		if err := w.Add(a.split, a.row); err != nil {
			t.Fatal(err)
		}
	}
	m, err := w.Close(Manifest{
		Schemas:     testSchemas,
		Modality:    "text",
		TextKey:     "text",
		SplitSeed:   42,
		Aggregation: "majority",
		Stats:       Stats{NSkippedNoLabel: 2, Warnings: []string{"from the caller"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func readRows(t *testing.T, p string) []map[string]any {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		rows = append(rows, r)
	}
	return rows
}

func mediaRel(src string) string {
	sum := sha256.Sum256([]byte(src))
	return "media/" + hex.EncodeToString(sum[:1]) + "/" + filepath.Base(src)
}

func TestWriterManifest(t *testing.T) {
	fx := newFixture(t)
	dir := filepath.Join(t.TempDir(), "bundle")
	m := writeBundle(t, dir, fx, "one")

	if testSchemas[2].Labels != nil {
		t.Errorf("Close changed the caller's schemas: %+v", testSchemas[2])
	}
	read, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(read, m) {
		t.Fatalf("manifest.json differs from what Close returned:\n%+v\n%+v", read, m)
	}
	checks := []struct {
		field     string
		got, want any
	}{
		{"v", m.V, 1},
		{"media_dir", m.MediaDir, "media"},
		{"modality", m.Modality, "text"},
		{"text_key", m.TextKey, "text"},
		{"split_seed", m.SplitSeed, int64(42)},
		{"aggregation", m.Aggregation, "majority"},
		{"schemas", m.Schemas[0].Name + "," + string(m.Schemas[1].Kind), "sentiment,multilabel"},
		{"splits", m.Splits, map[string]SplitFile{
			"train":     {"train.jsonl", "jsonl", 2},
			"val":       {"val.jsonl", "jsonl", 2},
			"test":      {"test.jsonl", "jsonl", 0},
			"unlabeled": {"unlabeled.jsonl", "jsonl", 1},
		}},
		{"labels", m.Labels, map[string][]string{
			"sentiment": {"neg", "pos"},
			"topics":    {"a", "b", "c"},
			"unused":    {},
		}},
		{"stats.n_items", m.Stats.NItems, 7},
		{"stats.n_annotated", m.Stats.NAnnotated, 4},
		{"stats.n_skipped_no_label", m.Stats.NSkippedNoLabel, 2},
		{"stats.n_media_linked", m.Stats.NMediaLinked, 1},
		{"stats.n_media_missing", m.Stats.NMediaMissing, 1},
		{"stats.splits", m.Stats.Splits, map[string]int{"train": 2, "val": 2, "test": 0, "unlabeled": 1}},
		{"stats.warnings", m.Stats.Warnings, []string{"from the caller"}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.field, c.got, c.want)
		}
	}

	// The keys of manifest.json are FORMATS.md's.
	raw, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"v", "schemas", "splits", "labels", "media_dir", "modality", "text_key", "split_seed", "aggregation", "stats", "digest"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("manifest.json has no %q", k)
		}
	}
	if len(keys) != 11 {
		t.Errorf("manifest.json has %d keys, want 11", len(keys))
	}
	if !strings.Contains(string(raw), `"annotation_type": "multiselect"`) || !strings.Contains(string(raw), `"source_field": ""`) {
		t.Errorf("schemas are not written as SchemaSpec:\n%s", raw)
	}

	// The digest is FORMATS.md's, computed here independently.
	h := sha256.New()
	for _, name := range []string{"test.jsonl", "train.jsonl", "unlabeled.jsonl", "val.jsonl"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		h.Write([]byte(name))
		h.Write(b)
	}
	if want := hex.EncodeToString(h.Sum(nil)); m.Digest != want {
		t.Errorf("digest = %s, want %s", m.Digest, want)
	}
	if err := Verify(dir); err != nil {
		t.Errorf("Verify: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".manifest.json.tmp")); !os.IsNotExist(err) {
		t.Errorf(".manifest.json.tmp is left behind: %v", err)
	}
}

func TestWriterRows(t *testing.T) {
	fx := newFixture(t)
	dir := filepath.Join(t.TempDir(), "bundle")
	writeBundle(t, dir, fx, "one")

	train := readRows(t, filepath.Join(dir, "train.jsonl"))
	if len(train) != 2 || train[0]["instance_id"] != "r1" || train[0]["text"] != "one" {
		t.Fatalf("train.jsonl = %v", train)
	}
	if got := train[0]["targets"].(map[string]any)["topics"]; !reflect.DeepEqual(got, []any{"b", "a"}) {
		t.Errorf("r1 topics = %v, want the list as given", got)
	}
	if _, ok := train[0]["media"]; ok {
		t.Errorf("r1 has no media but its row has a media key: %v", train[0])
	}
	b, _ := os.ReadFile(filepath.Join(dir, "train.jsonl"))
	if !strings.Contains(string(b), `"<b>two</b> & more"`) {
		t.Errorf("text is escaped: %s", b)
	}

	val := readRows(t, filepath.Join(dir, "val.jsonl"))
	if len(val) != 2 {
		t.Fatalf("val.jsonl has %d rows", len(val))
	}
	want := mediaRel(fx.image)
	if val[0]["media"] != want || val[0]["media_missing"] != nil {
		t.Errorf("r3 = %v, want media %q and no media_missing", val[0], want)
	}
	if data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(want))); err != nil || string(data) != "PNG bytes" {
		t.Errorf("linked media: %q, %v", data, err)
	}
	if val[1]["media_missing"] != true || val[1]["media"] != nil {
		t.Errorf("r4 = %v, want media_missing true and no media", val[1])
	}

	unl := readRows(t, filepath.Join(dir, "unlabeled.jsonl"))
	if len(unl) != 1 || !reflect.DeepEqual(unl[0]["targets"], map[string]any{}) {
		t.Errorf("unlabeled.jsonl = %v, want one row with empty targets", unl)
	}
	if info, err := os.Stat(filepath.Join(dir, "test.jsonl")); err != nil || info.Size() != 0 {
		t.Errorf("test.jsonl should exist and be empty: %v, %v", info, err)
	}
}

func TestWriterDigest(t *testing.T) {
	fx := newFixture(t)
	base := t.TempDir()
	a := writeBundle(t, filepath.Join(base, "a"), fx, "one")
	b := writeBundle(t, filepath.Join(base, "b"), fx, "one")
	c := writeBundle(t, filepath.Join(base, "c"), fx, "onE")
	if a.Digest != b.Digest {
		t.Errorf("the same rows give digests %s and %s", a.Digest, b.Digest)
	}
	if a.Digest == c.Digest {
		t.Errorf("a changed byte leaves the digest at %s", a.Digest)
	}
}

func TestVerifyCatchesTampering(t *testing.T) {
	fx := newFixture(t)
	cases := []struct {
		name   string
		tamper func(dir string) error
		want   string
	}{
		{"one byte changed", func(dir string) error {
			p := filepath.Join(dir, "train.jsonl")
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			i := strings.Index(string(b), `"one"`)
			b[i+1] = 'O'
			return os.WriteFile(p, b, 0o644)
		}, "digest of the split files is"},
		{"row added", func(dir string) error {
			f, err := os.OpenFile(filepath.Join(dir, "test.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteString(`{"instance_id":"x","text":"","targets":{}}` + "\n")
			return err
		}, `split "test": test.jsonl has 1 rows, the manifest says 0`},
		{"split file removed", func(dir string) error {
			return os.Remove(filepath.Join(dir, "val.jsonl"))
		}, "val.jsonl"},
		{"files renamed", func(dir string) error {
			// Same bytes under swapped names: the names are part of the digest.
			for _, r := range [][2]string{{"test.jsonl", "x"}, {"unlabeled.jsonl", "test.jsonl"}, {"x", "unlabeled.jsonl"}} {
				if err := os.Rename(filepath.Join(dir, r[0]), filepath.Join(dir, r[1])); err != nil {
					return err
				}
			}
			m, err := ReadManifest(dir)
			if err != nil {
				return err
			}
			m.Splits["test"], m.Splits["unlabeled"] = SplitFile{"test.jsonl", "jsonl", 1}, SplitFile{"unlabeled.jsonl", "jsonl", 0}
			b, _ := json.Marshal(m)
			return os.WriteFile(filepath.Join(dir, ManifestName), b, 0o644)
		}, "digest of the split files is"},
		{"split path escapes", func(dir string) error {
			m, err := ReadManifest(dir)
			if err != nil {
				return err
			}
			m.Splits["test"] = SplitFile{"../test.jsonl", "jsonl", 0}
			b, _ := json.Marshal(m)
			return os.WriteFile(filepath.Join(dir, ManifestName), b, 0o644)
		}, "leaves the bundle directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bundle")
			writeBundle(t, dir, fx, "one")
			if err := Verify(dir); err != nil {
				t.Fatalf("Verify before tampering: %v", err)
			}
			if err := c.tamper(dir); err != nil {
				t.Fatal(err)
			}
			err := Verify(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Verify = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestWriterUnlabeled(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		t.Run(fmt.Sprintf("include_unlabeled=%v", enabled), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bundle")
			w, err := NewWriter(dir, []string{"train", "test"}, enabled)
			if err != nil {
				t.Fatal(err)
			}
			addErr := w.Add("unlabeled", Row{InstanceID: "u"})
			m, err := w.Close(Manifest{})
			if err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Stat(filepath.Join(dir, "unlabeled.jsonl"))
			_, listed := m.Splits["unlabeled"]
			if enabled != (statErr == nil) || enabled != listed || enabled != (addErr == nil) {
				t.Errorf("unlabeled.jsonl: stat %v, listed %v, Add %v; want it only when enabled", statErr, listed, addErr)
			}
			for _, s := range []string{"train", "test"} {
				if _, err := os.Stat(filepath.Join(dir, s+".jsonl")); err != nil {
					t.Errorf("empty split %s has no file: %v", s, err)
				}
			}
			if m.Schemas == nil || m.Labels == nil || m.Stats.Warnings == nil {
				t.Errorf("empty lists must be written as [] and {}: %+v", m)
			}
			if err := Verify(dir); err != nil {
				t.Errorf("Verify: %v", err)
			}
		})
	}
}

func TestWriterRefuses(t *testing.T) {
	nonEmpty := t.TempDir()
	os.WriteFile(filepath.Join(nonEmpty, "old"), nil, 0o644)
	cases := []struct {
		name   string
		dir    string
		splits []string
		want   string
	}{
		{"no splits", "", nil, "no splits"},
		{"slash", "", []string{"a/b"}, "not a plain file name"},
		{"dot dot", "", []string{".."}, "not a plain file name"},
		{"reserved", "", []string{"train", "unlabeled"}, "reserved"},
		{"twice", "", []string{"train", "train"}, "listed twice"},
		{"dir not empty", nonEmpty, []string{"train"}, "not empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := c.dir
			if dir == "" {
				dir = filepath.Join(t.TempDir(), "bundle")
			}
			_, err := NewWriter(dir, c.splits, false)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("NewWriter = %v, want an error containing %q", err, c.want)
			}
		})
	}

	w, err := NewWriter(filepath.Join(t.TempDir(), "bundle"), []string{"train"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add("val", Row{}); err == nil {
		t.Error("Add to a split the bundle does not have succeeded")
	}
	if err := w.Add("train", Row{InstanceID: "x", Targets: map[string]any{"bad": func() {}}}); err == nil {
		t.Error("Add of a row that cannot be encoded succeeded")
	}
	if err := w.Add("train", Row{InstanceID: "ok"}); err != nil {
		t.Errorf("Add after an encoding error: %v", err)
	}
	m, err := w.Close(Manifest{})
	if err != nil || m.Splits["train"].N != 1 {
		t.Errorf("Close = %+v, %v; want train with 1 row", m.Splits, err)
	}
	if err := w.Add("train", Row{}); err == nil {
		t.Error("Add after Close succeeded")
	}
	if _, err := w.Close(Manifest{}); err == nil {
		t.Error("second Close succeeded")
	}
}

func TestWriterMediaPlacement(t *testing.T) {
	fail := func(string, string) error { return errors.New("not supported here") }
	cases := []struct {
		name          string
		link, symlink func(string, string) error
		check         func(t *testing.T, src, dst string)
	}{
		{"hard link", os.Link, os.Symlink, func(t *testing.T, src, dst string) {
			a, _ := os.Stat(src)
			b, err := os.Lstat(dst)
			if err != nil || !os.SameFile(a, b) {
				t.Errorf("%s is not a hard link to %s: %v", dst, src, err)
			}
		}},
		{"symlink when linking fails", fail, os.Symlink, func(t *testing.T, src, dst string) {
			target, err := os.Readlink(dst)
			if err != nil || target != src {
				t.Errorf("%s -> %q (%v), want a symlink to %s", dst, target, err, src)
			}
		}},
		{"copy when both fail", fail, fail, func(t *testing.T, src, dst string) {
			a, _ := os.Stat(src)
			b, err := os.Lstat(dst)
			if err != nil || !b.Mode().IsRegular() || os.SameFile(a, b) {
				t.Errorf("%s is not a copy: %v %v", dst, b, err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			linkFile, symlinkFile = c.link, c.symlink
			defer func() { linkFile, symlinkFile = os.Link, os.Symlink }()

			src := t.TempDir()
			// Two files with one basename whose paths hash to one bucket,
			// and a symlink to the first.
			var paths []string
			seen := map[byte]string{}
			for i := 0; len(paths) == 0; i++ {
				p := filepath.Join(src, strconv.Itoa(i), "clip.wav")
				b := sha256.Sum256([]byte(p))[0]
				if q, ok := seen[b]; ok {
					paths = []string{q, p}
				}
				seen[b] = p
			}
			for i, p := range paths {
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, []byte("audio "+strconv.Itoa(i)), 0o644)
			}
			alias := filepath.Join(src, "alias.wav")
			if err := os.Symlink(paths[0], alias); err != nil {
				t.Fatal(err)
			}

			dir := filepath.Join(t.TempDir(), "bundle")
			w, err := NewWriter(dir, []string{"train"}, false)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range []string{paths[0], paths[1], paths[0], alias} {
				if err := w.Add("train", Row{InstanceID: strconv.Itoa(i), Media: p}); err != nil {
					t.Fatal(err)
				}
			}
			m, err := w.Close(Manifest{})
			if err != nil {
				t.Fatal(err)
			}
			rows := readRows(t, filepath.Join(dir, "train.jsonl"))
			first, second := rows[0]["media"].(string), rows[1]["media"].(string)
			if first != mediaRel(paths[0]) || rows[2]["media"] != first {
				t.Errorf("the same source placed as %q and %q, want %q", first, rows[2]["media"], mediaRel(paths[0]))
			}
			if second == first || !strings.HasSuffix(second, "-clip.wav") || filepath.Dir(second) != filepath.Dir(first) {
				t.Errorf("a second clip.wav in the bucket placed as %q (first %q)", second, first)
			}
			if m.Stats.NMediaLinked != 4 || m.Stats.NMediaMissing != 0 {
				t.Errorf("linked %d, missing %d; want 4, 0", m.Stats.NMediaLinked, m.Stats.NMediaMissing)
			}
			for i, rel := range []string{first, second, rows[3]["media"].(string)} {
				data, err := os.ReadFile(filepath.Join(dir, rel))
				want := "audio " + strconv.Itoa(i%2)
				if err != nil || string(data) != want {
					t.Errorf("%s holds %q (%v), want %q", rel, data, err, want)
				}
			}
			c.check(t, paths[0], filepath.Join(dir, first))
		})
	}
}

func TestWriterMediaNotAFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bundle")
	w, err := NewWriter(dir, []string{"train"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add("train", Row{InstanceID: "d", Media: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	m, err := w.Close(Manifest{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Stats.NMediaMissing != 1 || len(m.Stats.Warnings) != 1 || !strings.Contains(m.Stats.Warnings[0], "not a regular file") {
		t.Errorf("a directory as media: missing %d, warnings %q", m.Stats.NMediaMissing, m.Stats.Warnings)
	}
}

func BenchmarkWriter(b *testing.B) {
	const rows = 1_000_000
	splits := DefaultSplits()
	names := []string{"train", "val", "test"}
	labels := []string{"pos", "neg", "neu"}
	var ms runtime.MemStats
	var peak uint64
	start := time.Now()
	for i := 0; i < b.N; i++ {
		dir := filepath.Join(b.TempDir(), "bundle")
		w, err := NewWriter(dir, names, false)
		if err != nil {
			b.Fatal(err)
		}
		targets := map[string]any{"sentiment": ""}
		for j := 0; j < rows; j++ {
			id := "item_" + strconv.Itoa(j)
			targets["sentiment"] = labels[j%3]
			if err := w.Add(SplitOf(0, id, splits), Row{InstanceID: id, Text: "a small row of text", Targets: targets}); err != nil {
				b.Fatal(err)
			}
			if j%250_000 == 0 {
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
		if _, err := w.Close(Manifest{}); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(dir)
	}
	b.ReportMetric(float64(rows*b.N)/time.Since(start).Seconds(), "rows/s")
	b.ReportMetric(float64(peak)/(1<<20), "heap-MiB")
}
