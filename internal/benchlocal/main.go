// Command benchlocal is the workload of scripts/bench-local: it generates
// a Potato project of N items, then times the bundle build and the
// write-back of a local run over it, and a plain JSON read of the same
// data file as the reference.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"time"

	// The SQLite driver of the store this workload opens (lib/writeback).
	_ "modernc.org/sqlite"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/writeback"
)

var words = strings.Fields(`the a service room food staff price view bed breakfast clean dirty noisy quiet
friendly rude great awful lovely terrible slow fast cheap expensive small large warm cold fresh stale`)

func gen(dir string, n, labelled int) error {
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "data", "items.jsonl"))
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewSource(1))
	var sb strings.Builder
	for i := 0; i < n; i++ {
		sb.Reset()
		for j := 0; j < 16; j++ {
			if j > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(words[rng.Intn(len(words))])
		}
		b, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("i%07d", i), "text": sb.String()})
		w.Write(b)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		return err
	}
	f.Close()
	ann := filepath.Join(dir, "annotation_output", "a1")
	os.MkdirAll(ann, 0o755)
	af, err := os.Create(filepath.Join(ann, "user_state.json"))
	if err != nil {
		return err
	}
	aw := bufio.NewWriterSize(af, 1<<20)
	aw.WriteString(`{"user_id":"a1","instance_id_to_label_to_value":{`)
	for i := 0; i < labelled; i++ {
		if i > 0 {
			aw.WriteByte(',')
		}
		label := "pos"
		if i%2 == 1 {
			label = "neg"
		}
		fmt.Fprintf(aw, `"i%07d":[[{"schema":"s","name":%q},"true"]]`, i, label)
	}
	aw.WriteString("}}\n")
	if err := aw.Flush(); err != nil {
		return err
	}
	af.Close()
	cfg := `annotation_task_name: bench
data_files: [data/items.jsonl]
output_annotation_dir: annotation_output
annotation_schemes:
  - {annotation_type: radio, name: s, labels: [pos, neg]}
model_training:
  writeback: {schemas: [s], include_unlabeled: true, min_confidence: 0.5}
`
	return os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o644)
}

// predictions writes what a trainer would: one line per item of every
// split but train, as the built-in trainer does.
func predictions(bdir, path string) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(out, 1<<20)
	for _, split := range []string{"val", "test", "unlabeled"} {
		f, err := os.Open(filepath.Join(bdir, split+".jsonl"))
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		i := 0
		for sc.Scan() {
			var r struct {
				ID string `json:"instance_id"`
			}
			json.Unmarshal(sc.Bytes(), &r)
			conf := 0.4 + float64(i%6)/10
			fmt.Fprintf(w, `{"instance_id":%q,"schema_name":"s","payload":{"label":"pos","confidence":%g},"confidence":%g}`+"\n", r.ID, conf, conf)
			i++
		}
		f.Close()
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return out.Close()
}

// reference reads the data file with encoding/json, one item a line: the
// least a reader of the items must do.
func reference(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	n := 0
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return 0, err
		}
		n++
	}
	return n, sc.Err()
}

func run(dir string) error {
	cfg, err := config.ReadConfigFile(filepath.Join(dir, "config.yaml"))
	if err != nil {
		return err
	}
	bdir := filepath.Join(dir, "bundle")
	os.RemoveAll(bdir)
	t0 := time.Now()
	m, err := bundle.Build(cfg, bdir, []string{"s"})
	if err != nil {
		return err
	}
	build := time.Since(t0)
	pred := filepath.Join(dir, "predictions.jsonl")
	if err := predictions(bdir, pred); err != nil {
		return err
	}
	os.Remove(filepath.Join(dir, writeback.StoreName))
	store, err := writeback.OpenStore(filepath.Join(dir, writeback.StoreName))
	if err != nil {
		return err
	}
	defer store.Close()
	t1 := time.Now()
	nItems, err := store.RecordItems("bench", "run1", bdir)
	if err != nil {
		return err
	}
	rep, err := store.Publish(bdir, pred, writeback.Options{Project: "bench", RunID: "run1", Schemas: []string{"s"}, MinConfidence: 0.5})
	if err != nil {
		return err
	}
	wb := time.Since(t1)
	fmt.Printf("items %d labelled %d build_s %.3f build_items_per_s %.0f writeback_s %.3f writeback_items_per_s %.0f written %d\n",
		m.Stats.NItems, m.Stats.NAnnotated, build.Seconds(), float64(m.Stats.NItems)/build.Seconds(),
		wb.Seconds(), float64(nItems+rep.NRead)/wb.Seconds(), rep.NWritten)
	return nil
}

func main() {
	mode := flag.String("mode", "run", "gen, run or ref")
	dir := flag.String("dir", "", "project directory")
	n := flag.Int("n", 1000000, "items (gen)")
	labelled := flag.Int("labelled", 100000, "labelled items (gen)")
	flag.Parse()
	var err error
	switch *mode {
	case "gen":
		err = gen(*dir, *n, *labelled)
	case "run":
		err = run(*dir)
	case "ref":
		t0 := time.Now()
		var k int
		k, err = reference(filepath.Join(*dir, "data", "items.jsonl"))
		fmt.Printf("ref_items %d ref_s %.3f ref_items_per_s %.0f\n", k, time.Since(t0).Seconds(), float64(k)/time.Since(t0).Seconds())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchlocal:", err)
		os.Exit(1)
	}
}
