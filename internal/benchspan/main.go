// Command benchspan is scripts/bench-span: hf-span at its defaults (or
// with -param NAME=VALUE in place of one) against
// a gazetteer of the train split's spans, on testdata/span-project, over
// split seeds. For each seed it copies the project with
// model_training.split_seed set, runs hf-span through potato-dispatch
// (local backend, the packaged all-MiniLM-L6-v2), and scores on the run's
// test split both the run's predictions and the gazetteer's, as the
// dispatch scores a run (writeback.Score): exact-match and overlap F1 over
// all spans, and exact macro-F1 over the labels. It prints a line a seed
// and the mean and standard deviation of each figure over the seeds.
//
// The gazetteer: each text of the train split's spans, with the label it
// has most often there (the first in the schema's order on a tie); an item
// is predicted the gazetteer's texts it holds between spaces or its ends,
// the longest first, left to right, none overlapping.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"potato-training/lib/bundle"
	"potato-training/lib/writeback"
)

func main() {
	root := flag.String("root", ".", "the repository")
	work := flag.String("work", "", "a scratch directory")
	bin := flag.String("bin", "", "the directory of potato-dispatch")
	python := flag.String("python", "", "the interpreter of the hf stack")
	model := flag.String("model", "", "the model directory")
	seeds := flag.Int("seeds", 3, "split seeds 1..N")
	score := flag.String("score", "", "score this run directory of hf-span and the gazetteer on its bundle, and stop")
	var params []string
	flag.Func("param", "a parameter of hf-span, NAME=VALUE, in place of its default (repeatable)", func(v string) error {
		params = append(params, "--param", v)
		return nil
	})
	flag.Parse()
	if *score != "" {
		scoreRun(*score, filepath.Base(*score), *work)
		return
	}
	var model_, gaz []fig
	for seed := 1; seed <= *seeds; seed++ {
		dir := filepath.Join(*work, fmt.Sprintf("seed%d", seed))
		must(os.CopyFS(dir, os.DirFS(filepath.Join(*root, "testdata", "span-project"))))
		cfg := filepath.Join(dir, "config.yaml")
		b, err := os.ReadFile(cfg)
		must(err)
		b = []byte(strings.Replace(string(b), "model_training:\n  enabled: true\n", fmt.Sprintf("model_training:\n  enabled: true\n  split_seed: %d\n", seed), 1))
		must(os.WriteFile(cfg, b, 0o644))
		args := append([]string{"run", "--trainer", "hf-span", "--schemas", "entities", "--param", "model=" + *model}, params...)
		cmd := exec.Command(filepath.Join(*bin, "potato-dispatch"), append(args, cfg)...)
		cmd.Env = append(os.Environ(), "POTATO_TRAINING_PYTHON="+*python, "HF_HUB_OFFLINE=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchspan: seed %d: %v\n%s", seed, err, out)
			os.Exit(1)
		}
		runs, _ := filepath.Glob(filepath.Join(dir, "annotation_output", "training", "runs", "*"))
		a, g := scoreRun(runs[len(runs)-1], fmt.Sprintf("seed %d", seed), *work)
		model_ = append(model_, a)
		gaz = append(gaz, g)
	}
	ms := func(xs []fig, f func(fig) float64) string {
		var s, ss float64
		for _, x := range xs {
			s += f(x)
		}
		mean := s / float64(len(xs))
		for _, x := range xs {
			ss += (f(x) - mean) * (f(x) - mean)
		}
		sd := 0.0
		if len(xs) > 1 {
			sd = math.Sqrt(ss / float64(len(xs)-1))
		}
		return fmt.Sprintf("%.3f ± %.3f", mean, sd)
	}
	for _, r := range []struct {
		name string
		xs   []fig
	}{{"hf-span", model_}, {"gazetteer", gaz}} {
		fmt.Printf("%-9s over %d seeds (mean ± sd): exact F1 %s, overlap F1 %s, exact macro-F1 %s\n", r.name, len(r.xs),
			ms(r.xs, func(f fig) float64 { return f.exact }), ms(r.xs, func(f fig) float64 { return f.overlap }),
			ms(r.xs, func(f fig) float64 { return f.macro }))
	}
}

type fig struct{ exact, overlap, macro float64 }

// scoreRun scores an hf-span run's predictions and the gazetteer's on the
// run's test split and prints them, with the gate's paired bootstrap of
// the difference in exact-match macro-F1 (2000 resamples of the test
// items).
func scoreRun(run, name, work string) (fig, fig) {
	bdir := filepath.Join(run, "bundle")
	m, err := bundle.ReadManifest(bdir)
	must(err)
	schema := m.Schemas[0]
	pred := filepath.Join(run, "predictions.jsonl")
	ms, err := writeback.Score(bdir, pred, m.Schemas)
	must(err)
	gpath := filepath.Join(work, "gazetteer-"+filepath.Base(run)+".jsonl")
	must(gazetteer(bdir, schema, gpath))
	gs, err := writeback.Score(bdir, gpath, m.Schemas)
	must(err)
	a, g := ms[schema.Name], gs[schema.Name]
	other := map[string]string{}
	for _, r := range readPreds(gpath) {
		other[r.ID] = writeback.SpanKey(r.Payload)
	}
	c, err := writeback.CompareOnCommon(bdir, pred, schema, other)
	must(err)
	b := c.Bootstrap(writeback.GateResamples, writeback.GateSeed)
	fmt.Printf("%s (%d test items, %d gold spans): hf-span exact F1 %.3f, overlap F1 %.3f, exact macro-F1 %.3f; gazetteer exact F1 %.3f, overlap F1 %.3f, exact macro-F1 %.3f; exact macro-F1 difference %+.3f, 95%% bootstrap band %+.3f to %+.3f\n",
		name, a.N, a.Spans.Exact.Gold, a.Spans.Exact.F1, a.Spans.Overlap.F1, a.MacroF1, g.Spans.Exact.F1, g.Spans.Overlap.F1, g.MacroF1, b.Diff, b.Low, b.High)
	return fig{a.Spans.Exact.F1, a.Spans.Overlap.F1, a.MacroF1}, fig{g.Spans.Exact.F1, g.Spans.Overlap.F1, g.MacroF1}
}

type predRow struct {
	ID      string          `json:"instance_id"`
	Payload json.RawMessage `json:"payload"`
}

func readPreds(path string) []predRow {
	b, err := os.ReadFile(path)
	must(err)
	var out []predRow
	for line := range strings.Lines(string(b)) {
		var r predRow
		must(json.Unmarshal([]byte(line), &r))
		out = append(out, r)
	}
	return out
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchspan:", err)
		os.Exit(1)
	}
}

type row struct {
	ID      string                       `json:"instance_id"`
	Text    string                       `json:"text"`
	Targets map[string][]json.RawMessage `json:"targets"`
}

func readRows(path string) []row {
	f, err := os.Open(path)
	must(err)
	defer f.Close()
	var out []row
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var r row
		must(json.Unmarshal(sc.Bytes(), &r))
		out = append(out, r)
	}
	return out
}

// runeSlice is text's characters [a, b), as Potato counts them.
func runeSlice(text string, a, b int) string {
	r := []rune(text)
	if a < 0 || b > len(r) || a >= b {
		return ""
	}
	return string(r[a:b])
}

// gazetteer writes the gazetteer's predictions of the test split.
func gazetteer(bdir string, s bundle.Schema, out string) error {
	counts := map[string]map[string]int{}
	for _, r := range readRows(filepath.Join(bdir, "train.jsonl")) {
		for _, raw := range r.Targets[s.Name] {
			var sp struct {
				Start, End int
				Name       string
			}
			must(json.Unmarshal(raw, &sp))
			t := runeSlice(r.Text, sp.Start, sp.End)
			if t == "" {
				continue
			}
			if counts[t] == nil {
				counts[t] = map[string]int{}
			}
			counts[t][sp.Name]++
		}
	}
	label := map[string]string{}
	var entries []string
	for t, c := range counts {
		best := ""
		for _, l := range s.Labels {
			if c[l] > c[best] || best == "" && c[l] > 0 {
				best = l
			}
		}
		label[t] = best
		entries = append(entries, t)
	}
	// Longest first.
	sort.Slice(entries, func(i, j int) bool {
		if utf8.RuneCountInString(entries[i]) != utf8.RuneCountInString(entries[j]) {
			return utf8.RuneCountInString(entries[i]) > utf8.RuneCountInString(entries[j])
		}
		return entries[i] < entries[j]
	})
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	for _, r := range readRows(filepath.Join(bdir, "test.jsonl")) {
		text := []rune(r.Text)
		taken := make([]bool, len(text))
		type span struct {
			Start int    `json:"start"`
			End   int    `json:"end"`
			Label string `json:"label"`
		}
		var spans []span
		for _, e := range entries {
			er := []rune(e)
			for i := 0; i+len(er) <= len(text); i++ {
				if string(text[i:i+len(er)]) != e || i > 0 && text[i-1] != ' ' || i+len(er) < len(text) && text[i+len(er)] != ' ' {
					continue
				}
				if slices.Contains(taken[i:i+len(er)], true) {
					continue
				}
				for k := i; k < i+len(er); k++ {
					taken[k] = true
				}
				spans = append(spans, span{i, i + len(er), label[e]})
			}
		}
		if spans == nil {
			spans = []span{}
		}
		b, _ := json.Marshal(map[string]any{"instance_id": r.ID, "schema_name": s.Name, "payload": spans, "confidence": 1})
		w.Write(append(b, '\n'))
	}
	return w.Flush()
}
