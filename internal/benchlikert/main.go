// Command benchlikert compares, on the tests' likert corpus of real tweets
// (testdata/vader-likert: 1,000 tweets, three raters' ratings each, binned
// onto five points), tfidf-logreg learning the likert schema as an ordered
// scale (its ordinal method) with the same trainer learning the points as
// plain classes (a radio schema of the same labels) and with predicting
// the most common point of the train split, by mean absolute error in
// scale points and quadratic-weighted kappa (and accuracy, macro-F1) on
// the test split, scored by the dispatch's own held-out score
// (writeback.Score). Each split seed draws its own 70/15/15 train, val and
// test items; every model of a seed sees the same ones. An item's gold
// point is the most common of its three raters' points (the first rater's
// on a three-way tie), as aggregation: majority gives it.
//
// It prints each model's figures per seed, their mean and standard
// deviation over the seeds, and the paired differences ordinal less plain
// with a 95% interval over the seeds (t with seeds-1 degrees of freedom).
//
// Usage: scripts/bench-likert [-seeds N] [-root DIR]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"potato-training/internal/benchkit"
	"potato-training/internal/testproject"
	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/trainer"
	"potato-training/lib/writeback"
)

func main() {
	seeds := flag.Int("seeds", 5, "split seeds")
	root := flag.String("root", ".", "the repository")
	flag.Parse()
	work, err := os.MkdirTemp("", "potato-bench-likert-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(work)
	var t benchkit.T
	tweets := testproject.Tweets(t, *root)
	ordinal := bundle.Schema{Name: "sentiment", AnnotationType: "likert", Kind: config.KindOrdinal, Labels: testproject.LikertLabels}
	models := []string{"ordinal", "plain classes", "most common point"}
	res := map[string][]fig{}
	fmt.Printf("tfidf-logreg on %d tweets of testdata/vader-likert, five points; %d split seeds of 70/15/15\n\n", len(tweets), *seeds)
	fmt.Printf("%-5s %-18s %6s %6s %8s %8s\n", "seed", "model", "MAE", "QWK", "accuracy", "macro-F1")
	for seed := 1; seed <= *seeds; seed++ {
		dir := filepath.Join(work, fmt.Sprint(seed))
		bdir := filepath.Join(dir, "bundle")
		mode, err := writeBundle(bdir, tweets, uint64(seed), ordinal)
		if err != nil {
			fail(err)
		}
		preds := map[string]string{}
		for _, m := range models[:2] {
			s := ordinal
			if m == "plain classes" {
				s.AnnotationType, s.Kind = "radio", config.KindNominal
			}
			wd := filepath.Join(dir, m)
			spec := trainer.Spec{V: 1, RunID: "bench", Trainer: "tfidf-logreg", Schemas: []bundle.Schema{s},
				BundleDir: bdir, Workdir: wd, Seed: int64(seed), Limits: trainer.Limits{NumThreads: 2}}
			sp := filepath.Join(dir, m+".spec.json")
			if err := spec.Write(sp); err != nil {
				fail(err)
			}
			if err := trainer.RunWorker(context.Background(), sp, io.Discard); err != nil {
				fail(err)
			}
			preds[m] = filepath.Join(wd, "predictions.jsonl")
		}
		preds["most common point"], err = constant(dir, bdir, mode)
		if err != nil {
			fail(err)
		}
		for _, m := range models {
			sc, err := writeback.Score(bdir, preds[m], []bundle.Schema{ordinal})
			if err != nil {
				fail(err)
			}
			s := sc["sentiment"]
			f := fig{*s.MAE, *s.QWK, s.Accuracy, s.MacroF1}
			res[m] = append(res[m], f)
			fmt.Printf("%-5d %-18s %6.3f %6.3f %8.3f %8.3f\n", seed, m, f.mae, f.qwk, f.acc, f.f1)
		}
	}
	fmt.Printf("\nmean (standard deviation) over %d seeds, about %d test items each\n", *seeds, len(tweets)*15/100)
	fmt.Printf("%-18s %15s %15s %15s %15s\n", "model", "MAE", "QWK", "accuracy", "macro-F1")
	for _, m := range models {
		var mae, qwk, acc, f1 []float64
		for _, f := range res[m] {
			mae, qwk, acc, f1 = append(mae, f.mae), append(qwk, f.qwk), append(acc, f.acc), append(f1, f.f1)
		}
		fmt.Printf("%-18s %15s %15s %15s %15s\n", m, ms(mae), ms(qwk), ms(acc), ms(f1))
	}
	fmt.Printf("\npaired differences, ordinal less the other, mean and 95%% interval over the seeds\n")
	for _, other := range models[1:] {
		var dm, dq []float64
		for i := range res["ordinal"] {
			dm = append(dm, res["ordinal"][i].mae-res[other][i].mae)
			dq = append(dq, res["ordinal"][i].qwk-res[other][i].qwk)
		}
		fmt.Printf("vs %-16s MAE %s   QWK %s\n", other, interval(dm), interval(dq))
	}
	mo, mp := mean(maes(res["ordinal"])), mean(maes(res["plain classes"]))
	fmt.Printf("\nratio of MAE, ordinal / plain classes: %.3f; ordinal / most common point: %.3f\n", mo/mp, mo/mean(maes(res["most common point"])))
}

// writeBundle writes the bundle of one split seed and returns the most
// common gold point of its train split.
func writeBundle(bdir string, tweets []testproject.Tweet, seed uint64, s bundle.Schema) (string, error) {
	w, err := bundle.NewWriter(bdir, []string{"train", "val", "test"}, true)
	if err != nil {
		return "", err
	}
	order := rand.New(rand.NewPCG(seed, 0x11ce)).Perm(len(tweets))
	count := map[string]int{}
	for rank, i := range order {
		tw := tweets[i]
		split := "train"
		switch {
		case rank >= len(tweets)*85/100:
			split = "test"
		case rank >= len(tweets)*70/100:
			split = "val"
		}
		gold := majority(tw.Ratings)
		if split == "train" {
			count[gold]++
		}
		if err := w.Add(split, bundle.Row{InstanceID: tw.ID, Text: tw.Text, Targets: map[string]any{s.Name: gold}}); err != nil {
			return "", err
		}
	}
	if _, err := w.Close(bundle.Manifest{Schemas: []bundle.Schema{s}}); err != nil {
		return "", err
	}
	mode := s.Labels[0]
	for _, l := range s.Labels {
		if count[l] > count[mode] {
			mode = l
		}
	}
	return mode, nil
}

// majority is the most common point of the raters' ratings, the first
// rater's on a tie.
func majority(ratings []int) string {
	n := map[int]int{}
	for _, r := range ratings {
		n[testproject.LikertPoint(r)]++
	}
	best := testproject.LikertPoint(ratings[0])
	for _, r := range ratings {
		if p := testproject.LikertPoint(r); n[p] > n[best] {
			best = p
		}
	}
	return testproject.LikertLabels[best-1]
}

// constant writes predictions of label for every test item.
func constant(dir, bdir, label string) (string, error) {
	b, err := os.ReadFile(filepath.Join(bdir, "test.jsonl"))
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "constant.jsonl")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, line := range splitLines(b) {
		var r struct {
			ID string `json:"instance_id"`
		}
		if json.Unmarshal(line, &r) != nil {
			continue
		}
		enc.Encode(map[string]any{"instance_id": r.ID, "schema_name": "sentiment", "payload": map[string]any{"label": label, "confidence": 1}, "confidence": 1})
	}
	return path, nil
}

func splitLines(b []byte) [][]byte {
	var out [][]byte
	start := 0
	for i, c := range b {
		if c == '\n' {
			out = append(out, b[start:i])
			start = i + 1
		}
	}
	return out
}

// fig is one model's figures on one seed's test split.
type fig struct{ mae, qwk, acc, f1 float64 }

// maes are the figures' MAEs.
func maes(xs []fig) []float64 {
	var out []float64
	for _, x := range xs {
		out = append(out, x.mae)
	}
	return out
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func sd(xs []float64) float64 {
	m, s := mean(xs), 0.0
	for _, x := range xs {
		s += (x - m) * (x - m)
	}
	return math.Sqrt(s / float64(max(len(xs)-1, 1)))
}

func ms(xs []float64) string { return fmt.Sprintf("%.3f (%.3f)", mean(xs), sd(xs)) }

// tCrit is the 97.5th percentile of Student's t for 1 to 10 degrees of
// freedom; 1.96 beyond.
var tCrit = []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228}

func interval(d []float64) string {
	df := len(d) - 1
	c := 1.96
	if df >= 1 && df <= len(tCrit) {
		c = tCrit[df-1]
	}
	h := c * sd(d) / math.Sqrt(float64(len(d)))
	return fmt.Sprintf("%+.3f [%+.3f, %+.3f]", mean(d), mean(d)-h, mean(d)+h)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "benchlikert:", err)
	os.Exit(1)
}
