package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/trainer/tfidf"
)

// twoSchemaBundle makes a bundle with a radio schema "s" and a multiselect
// schema "m", nTrain items of train and 30 of val and test labelled in
// both, and nPool unlabelled items.
func twoSchemaBundle(t *testing.T, nTrain, nPool, threads int) Spec {
	t.Helper()
	dir := t.TempDir()
	bdir := filepath.Join(dir, "bundle")
	w, err := bundle.NewWriter(bdir, []string{"train", "val", "test"}, true)
	if err != nil {
		t.Fatal(err)
	}
	labels := []string{"pos", "neg", "mid"}
	add := func(split string, n int) {
		for i := 0; i < n; i++ {
			l := labels[i%3]
			var targets map[string]any
			if split != bundle.UnlabeledSplit {
				targets = map[string]any{"s": l, "m": []string{l}}
			}
			if err := w.Add(split, bundle.Row{InstanceID: fmt.Sprintf("%s-%d", split, i), Text: text(l, i), Targets: targets}); err != nil {
				t.Fatal(err)
			}
		}
	}
	add("train", nTrain)
	add("val", 30)
	add("test", 30)
	add(bundle.UnlabeledSplit, nPool)
	schemas := []bundle.Schema{
		{Name: "s", AnnotationType: "radio", Kind: config.KindNominal, Labels: labels},
		{Name: "m", AnnotationType: "multiselect", Kind: config.KindMultilabel, Labels: labels},
	}
	if _, err := w.Close(bundle.Manifest{Schemas: schemas}); err != nil {
		t.Fatal(err)
	}
	return Spec{V: 1, RunID: "r", Trainer: "tfidf-logreg", Schemas: schemas, BundleDir: bdir,
		Workdir: filepath.Join(dir, "work"), Limits: Limits{NumThreads: threads}}
}

// Every item of every split but train gets one prediction per schema, the
// pool's in its order, each schema's from its own model; the file is the
// same on 1 thread and on 4.
func TestWorkerStreamsEverySchema(t *testing.T) {
	const pool = 1000 // several batches
	var files [][]byte
	for _, threads := range []int{1, 4} {
		spec := twoSchemaBundle(t, 150, pool, threads)
		var out, errb bytes.Buffer
		if code := Worker(context.Background(), writeSpec(t, spec), &out, &errb); code != 0 {
			t.Fatalf("threads %d: exit %d: %s", threads, code, errb.String())
		}
		b, err := os.ReadFile(filepath.Join(spec.Workdir, "predictions.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
		var pooled []string
		count := map[string]int{}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var p struct {
				InstanceID string `json:"instance_id"`
				SchemaName string `json:"schema_name"`
				Payload    struct {
					Label string `json:"label"`
				} `json:"payload"`
			}
			if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
			count[p.InstanceID+" "+p.SchemaName]++
			if id, ok := strings.CutPrefix(p.InstanceID, bundle.UnlabeledSplit+"-"); ok && p.SchemaName == "s" {
				pooled = append(pooled, id)
			}
			// The texts name their label's words: both models get them right.
			var i int
			fmt.Sscanf(p.InstanceID[strings.LastIndexByte(p.InstanceID, '-')+1:], "%d", &i)
			if want := []string{"pos", "neg", "mid"}[i%3]; p.Payload.Label != want {
				t.Errorf("threads %d: %s %s: label %q, want %q", threads, p.InstanceID, p.SchemaName, p.Payload.Label, want)
			}
		}
		for _, split := range []string{"val", "test", bundle.UnlabeledSplit} {
			n := 30
			if split == bundle.UnlabeledSplit {
				n = pool
			}
			for i := range n {
				for _, s := range []string{"s", "m"} {
					if k := count[fmt.Sprintf("%s-%d %s", split, i, s)]; k != 1 {
						t.Fatalf("threads %d: %d predictions of %s-%d for %s, want 1", threads, k, split, i, s)
					}
				}
			}
		}
		if len(count) != 2*(60+pool) {
			t.Errorf("threads %d: %d predictions, want %d", threads, len(count), 2*(60+pool))
		}
		for i, id := range pooled {
			if id != fmt.Sprint(i) {
				t.Fatalf("threads %d: the pool's %dth prediction is of item %s: not in the split's order", threads, i, id)
			}
		}
		res := resultOf(t, out.Bytes())
		if res.NPredictions != 2*(60+pool) || res.Metrics["s/val_accuracy"] != 1 || res.Metrics["m/val_accuracy"] != 1 {
			t.Errorf("threads %d: result %+v", threads, res)
		}
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Error("predictions.jsonl differs between 1 and 4 threads")
	}
}

func resultOf(t *testing.T, out []byte) (res events.Result) {
	t.Helper()
	evs := parseEvents(t, out)
	last := evs[len(evs)-1]
	if err := last.Decode(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// A bad row of the pool is bad_bundle with its line number; nothing is
// claimed of the rows after it.
func TestWorkerBadPoolRow(t *testing.T) {
	spec := twoSchemaBundle(t, 60, 700, 2)
	path := filepath.Join(spec.BundleDir, "unlabeled.jsonl")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines[599] = `{"instance_id": "x", "text": 7}` + "\n"
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := Worker(context.Background(), writeSpec(t, spec), &out, &errb)
	evs := parseEvents(t, out.Bytes())
	last := evs[len(evs)-1]
	if code != 2 || last.String("code") != "bad_bundle" || last.String("message") != "unlabeled.jsonl:600: text is not a string" {
		t.Errorf("exit %d, last event %v", code, last)
	}
}

// lazyRows is a split of n rows of about 2 kB each, made as it is read, so
// that only what the reader keeps of it stays in memory. Every every rows
// it collects garbage and records the live heap.
type lazyRows struct {
	n, i, every int
	pending     []byte
	peak        uint64
}

func (r *lazyRows) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		if r.i == r.n {
			return 0, io.EOF
		}
		if r.i%r.every == 0 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			r.peak = max(r.peak, ms.HeapAlloc)
		}
		l := []string{"pos", "neg", "mid"}[r.i%3]
		row, _ := json.Marshal(map[string]any{"instance_id": fmt.Sprintf("u-%d", r.i), "text": strings.Repeat(text(l, r.i)+"\n", 40)})
		r.pending = append(row, '\n')
		r.i++
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// Predicting a split holds a few batches of it, not the split: the live
// heap while 100 MB of rows stream through stays under a tenth of that.
func TestPredictSplitHoldsNoSplit(t *testing.T) {
	labels := []string{"pos", "neg", "mid"}
	var docs []tfidf.Doc
	for i := range 90 {
		docs = append(docs, tfidf.Doc{Text: text(labels[i%3], i), Labels: []string{labels[i%3]}})
	}
	model, err := tfidf.Fit(context.Background(), docs, nil, labels, tfidf.Options{MaxEpochs: 5, Threads: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	models := []schemaModel{{bundle.Schema{Name: "s", Kind: config.KindNominal, Labels: labels}, model}}
	rows := &lazyRows{n: 50000, every: 5000}
	var out countingWriter
	tally, err := predictSplit(context.Background(), rows, bundle.UnlabeledSplit, "unlabeled.jsonl", models, 2, &out)
	if err != nil {
		t.Fatal(err)
	}
	if tally.predictions != rows.n || out.lines != rows.n {
		t.Fatalf("%d predictions, %d lines written, want %d", tally.predictions, out.lines, rows.n)
	}
	const streamed = 50000 * 2000
	if rows.peak > streamed/10 {
		t.Errorf("live heap reached %d MB while %d MB of rows streamed through", rows.peak>>20, streamed>>20)
	}
	t.Logf("peak live heap %.1f MB for %d MB of rows", float64(rows.peak)/(1<<20), streamed>>20)
}

type countingWriter struct{ lines int }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.lines += bytes.Count(p, []byte{'\n'})
	return len(p), nil
}
