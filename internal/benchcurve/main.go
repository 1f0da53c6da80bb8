// Command benchcurve is the workload of scripts/bench-curve: it asks
// whether the learning curve's verdict (lib/curve's Judge) is right. For
// each scenario, a seeded small subset of a real corpus (the SpamAssassin
// emails of testdata/spamassassin, the reviews of examples/reviews) is made
// into a bundle, tfidf-logreg fits its curve as a curve run's trainer does
// (trainer.RunWorker with spec.json's curve and curve_draws), and the
// dispatch's own scoring judges it (writeback.JudgeCurve). The verdicts of
// many subsets are counted against the verdict the corpus's full-data
// curve gives: the same curve fitted on a large pool with many draws and
// scored on the items no subset's train split needs.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"potato-training/internal/testproject"
	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/curve"
	"potato-training/lib/trainer"
	"potato-training/lib/writeback"
)

// item is one labelled text of a corpus: its target, a label or, for a
// multilabel schema, a []string.
type item struct {
	id, text string
	target   any
}

// corpus is a real corpus with one schema.
type corpus struct {
	name, schema string
	kind         config.Kind
	labels       []string
	items        []item
}

// emails reads testdata/spamassassin/emails.jsonl: 500 emails, spam or ham.
func emails(root string) (corpus, error) {
	c := corpus{name: "emails", schema: "spam", kind: config.KindNominal, labels: []string{"spam", "ham"}}
	b, err := os.ReadFile(filepath.Join(root, "testdata", "spamassassin", "emails.jsonl"))
	if err != nil {
		return c, err
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var e struct{ ID, Text, Label string }
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return c, err
		}
		c.items = append(c.items, item{e.ID, e.Text, e.Label})
	}
	return c, nil
}

// signals is the emails with the multiselect schema of the tests'
// projects: the signals a rule reads in each text (testproject.Signals),
// which a model learns well from a few dozen emails.
func signals(em corpus) corpus {
	c := corpus{name: "emails", schema: "signals", kind: config.KindMultilabel, labels: []string{"link", "reply", "html"}}
	for _, it := range em.items {
		c.items = append(c.items, item{it.id, it.text, append([]string{}, testproject.Signals(it.text)...)})
	}
	return c
}

// sources is the emails and the reviews together, with a radio schema
// of where each text came from: "email" or "review". A model tells them
// apart from a dozen of each, so its curve is flat at the top.
func sources(em, rv corpus) corpus {
	c := corpus{name: "emails and reviews", schema: "source", kind: config.KindNominal, labels: []string{"email", "review"}}
	for _, it := range em.items {
		c.items = append(c.items, item{it.id, it.text, "email"})
	}
	for _, it := range rv.items {
		c.items = append(c.items, item{it.id, it.text, "review"})
	}
	return c
}

// reviews is examples/reviews as a run sees it: its bundle, built from
// the project's config, data file and three annotators' labels.
func reviews(root, work string) (corpus, error) {
	c := corpus{name: "reviews", schema: "sentiment", kind: config.KindNominal, labels: []string{"positive", "negative"}}
	cfg, err := config.ReadConfigFile(filepath.Join(root, "examples", "reviews", "config.yaml"))
	if err != nil {
		return c, err
	}
	dir := filepath.Join(work, "reviews-bundle")
	if err := os.RemoveAll(dir); err != nil {
		return c, err
	}
	m, err := bundle.Build(cfg, dir, []string{c.schema})
	if err != nil {
		return c, err
	}
	for _, sf := range m.Splits {
		b, err := os.ReadFile(filepath.Join(dir, sf.Path))
		if err != nil {
			return c, err
		}
		for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
			if line == "" {
				continue
			}
			var r struct {
				InstanceID string         `json:"instance_id"`
				Text       string         `json:"text"`
				Targets    map[string]any `json:"targets"`
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				return c, err
			}
			if l, ok := r.Targets[c.schema].(string); ok && l != "" {
				c.items = append(c.items, item{r.InstanceID, r.Text, l})
			}
		}
	}
	slices.SortFunc(c.items, func(a, b item) int { return strings.Compare(a.id, b.id) })
	return c, nil
}

// shuffled is c's items in the order of the SHA-256 of "bench/SEED/ID".
func shuffled(c corpus, seed int) []item {
	type keyed struct {
		key string
		it  item
	}
	ks := make([]keyed, len(c.items))
	for i, it := range c.items {
		sum := sha256.Sum256([]byte("bench/" + strconv.Itoa(seed) + "/" + it.id))
		ks[i] = keyed{hex.EncodeToString(sum[:]), it}
	}
	slices.SortFunc(ks, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	out := make([]item, len(ks))
	for i, k := range ks {
		out[i] = k.it
	}
	return out
}

// fit writes a bundle of train, val and test, fits its curve with
// tfidf-logreg and scores it as the dispatch does: the schema's curve.
func fit(work string, c corpus, train, val, test []item, points []float64, draws int, seed int64) (curve.Schema, string, error) {
	if err := os.RemoveAll(work); err != nil {
		return curve.Schema{}, "", err
	}
	bdir := filepath.Join(work, "bundle")
	w, err := bundle.NewWriter(bdir, []string{"train", "val", "test"}, false)
	if err != nil {
		return curve.Schema{}, "", err
	}
	for split, items := range map[string][]item{"train": train, "val": val, "test": test} {
		for _, it := range items {
			if err := w.Add(split, bundle.Row{InstanceID: it.id, Text: it.text, Targets: map[string]any{c.schema: it.target}}); err != nil {
				w.Abort()
				return curve.Schema{}, "", err
			}
		}
	}
	kind := "radio"
	if c.kind == config.KindMultilabel {
		kind = "multiselect"
	}
	schemas := []bundle.Schema{{Name: c.schema, AnnotationType: kind, Kind: c.kind, Labels: c.labels, SourceField: c.schema}}
	if _, err := w.Close(bundle.Manifest{Schemas: schemas, Modality: "text", SplitSeed: seed}); err != nil {
		return curve.Schema{}, "", err
	}
	spec := trainer.Spec{V: 1, RunID: "bench", Trainer: "tfidf-logreg", Schemas: schemas, BundleDir: bdir,
		Workdir: filepath.Join(work, "artifacts"), Params: map[string]string{}, Seed: seed,
		Limits: trainer.Limits{NumThreads: 1, Device: "cpu"}, Curve: points, CurveDraws: draws}
	b, _ := json.Marshal(spec)
	specPath := filepath.Join(work, "spec.json")
	if err := os.WriteFile(specPath, b, 0o644); err != nil {
		return curve.Schema{}, "", err
	}
	if err := trainer.RunWorker(context.Background(), specPath, io.Discard); err != nil {
		return curve.Schema{}, "", fmt.Errorf("tfidf-logreg: %w", err)
	}
	pred := filepath.Join(spec.Workdir, "predictions.jsonl")
	got, _, err := writeback.JudgeCurve(bdir, pred, schemas, curve.Curve{Points: points, Seed: seed, Draws: draws}, spec.Trainer)
	if err != nil {
		return curve.Schema{}, "", err
	}
	if len(got.Schemas) != 1 {
		return curve.Schema{}, "", errors.New("no curve scored")
	}
	old, err := lastStep(bdir, pred, schemas, points, draws)
	return got.Schemas[0], old, err
}

// lastStep is the verdict the judge gave before draws, the reference: the
// last step of one draw (draw 0) against its band, two standard errors of
// a paired bootstrap of the test items alone. Rising or falling beyond
// the band and 0.01; unclear within it when the band is wider than 0.05;
// flat otherwise.
func lastStep(bdir, pred string, schemas []bundle.Schema, points []float64, draws int) (string, error) {
	scores, err := writeback.ScoreCurve(bdir, pred, schemas, points, draws)
	if err != nil {
		return "", err
	}
	c := scores[schemas[0].Name]
	k := len(points) - 1
	var m moments
	c.Resample([]int{0}, func(macro [][]float64, _ map[string][][]float64) { m.add(macro[k][0] - macro[k-1][0]) })
	band := 2 * math.Sqrt(m.variance())
	d := c.Points[k].Draws[0].Score.MacroF1 - c.Points[k-1].Draws[0].Score.MacroF1
	limit := math.Max(0.01, band)
	switch {
	case d > limit:
		return curve.Rising, nil
	case d < -limit:
		return curve.Falling, nil
	case band > 0.05:
		return curve.Unclear, nil
	}
	return curve.Flat, nil
}

type moments struct{ n, sum, sum2 float64 }

func (m *moments) add(x float64) { m.n++; m.sum += x; m.sum2 += x * x }

func (m moments) variance() float64 {
	if m.n < 2 {
		return 0
	}
	mu := m.sum / m.n
	return math.Max(0, m.sum2/m.n-mu*mu)
}

// scenario is a kind of small project: train, val and test items drawn
// from a corpus, and the verdict its curve should get.
type scenario struct {
	name             string
	corpus           *corpus
	train, val, test int
	points           []float64
	// tiny is a test split too small to tell: its verdict should be
	// unclear. Else the full-data curve decides it (truth).
	tiny bool
}

// reference is the full-data curve at the sizes of s's points: the mean
// macro-F1 over refDraws draws of that many items from a pool of the
// corpus, scored on the items outside the pool, over refPools pools. It
// gives the slope per doubling and the score with the whole pool.
func reference(work string, s scenario) (sizes []int, f1 []float64, full float64, pool int, err error) {
	const refPools, refDraws, heldOut = 5, 10, 150
	pool = len(s.corpus.items) - s.val - heldOut
	var points []float64
	for _, p := range s.points {
		n := curve.Size(s.train, p)
		sizes = append(sizes, n)
		points = append(points, 100*float64(n)/float64(pool))
	}
	points = append(points, 100)
	f1 = make([]float64, len(sizes))
	for r := range refPools {
		items := shuffled(*s.corpus, -1-r)
		val, train, test := items[:s.val], items[s.val:s.val+pool], items[s.val+pool:]
		got, _, err := fit(work, *s.corpus, train, val, test, points, refDraws, int64(1000*r))
		if err != nil {
			return nil, nil, 0, 0, err
		}
		for i := range sizes {
			f1[i] += got.Points[i].MacroF1 / refPools
		}
		full += got.Points[len(sizes)].MacroF1 / refPools
	}
	return sizes, f1, full, pool, nil
}

// truth is the verdict a full-data slope b gives: rising or falling
// beyond Epsilon per doubling, flat within half of it, and "" between,
// where a subset's curve may fairly be called rising (or falling) or flat.
func truth(b float64) string {
	switch {
	case b >= curve.Epsilon:
		return curve.Rising
	case b <= -curve.Epsilon:
		return curve.Falling
	case math.Abs(b) <= curve.Epsilon/2:
		return curve.Flat
	}
	return ""
}

func orBorderline(v string) string {
	if v == "" {
		return "between flat and rising"
	}
	return v
}

func slopeOf(sizes []int, ys []float64) float64 {
	var mx, my float64
	for i := range sizes {
		mx += math.Log2(float64(sizes[i]))
		my += ys[i]
	}
	mx /= float64(len(sizes))
	my /= float64(len(sizes))
	var sxy, sxx float64
	for i := range sizes {
		x := math.Log2(float64(sizes[i])) - mx
		sxy += x * (ys[i] - my)
		sxx += x * x
	}
	return sxy / sxx
}

func main() {
	root := flag.String("root", ".", "the repository")
	work := flag.String("work", "", "a scratch directory")
	subsets := flag.Int("subsets", 20, "seeded subsets per scenario")
	tfidf, _ := trainer.Lookup("tfidf-logreg")
	draws := flag.Int("draws", tfidf.CurveDraws, "nested draws per point")
	only := flag.String("only", "", "run only the scenarios whose name holds this")
	verbose := flag.Bool("v", false, "print each subset's sentence")
	flag.Parse()
	if *work == "" {
		fmt.Fprintln(os.Stderr, "benchcurve: give -work DIR")
		os.Exit(2)
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "benchcurve:", err)
		os.Exit(1)
	}
	em, err := emails(*root)
	if err != nil {
		fail(err)
	}
	rv, err := reviews(*root, *work)
	if err != nil {
		fail(err)
	}
	sg, src := signals(em), sources(em, rv)
	quarters := []float64{25, 50, 75, 100}
	scenarios := []scenario{
		{"emails, 48 train items, 300 test", &em, 48, 20, 300, quarters, false},
		{"reviews, 48 train items, 200 test", &rv, 48, 20, 200, quarters, false},
		{"email signals (multiselect), 100 train items, 200 test", &sg, 100, 20, 200, quarters, false},
		{"email or review (saturated), 400 train items, 300 test", &src, 400, 20, 300, quarters, false},
		{"emails, 60 items in all: 44 train, 6 val, 10 test", &em, 44, 6, 10, quarters, true},
		{"reviews, 60 items in all: 44 train, 6 val, 10 test", &rv, 44, 6, 10, quarters, true},
	}
	var summary []string
	fmt.Printf("corpora: %d emails (testdata/spamassassin), %d labelled reviews (examples/reviews); tfidf-logreg, %d draws a point, %d subsets a scenario, flat within ±%.2f macro-F1 per doubling\n\n",
		len(em.items), len(rv.items), *draws, *subsets, curve.Epsilon)
	for _, s := range scenarios {
		if *only != "" && !strings.Contains(s.name, *only) {
			continue
		}
		start := time.Now()
		fmt.Printf("%s: points %v%%\n", s.name, s.points)
		want := curve.Unclear
		if !s.tiny {
			sizes, f1, full, pool, err := reference(filepath.Join(*work, "ref"), s)
			if err != nil {
				fail(err)
			}
			b := slopeOf(sizes, f1)
			want = truth(b)
			fmt.Printf("  full-data curve (5 pools of %d, 10 draws each, scored on the %d items outside each): macro-F1", pool, len(s.corpus.items)-s.val-pool)
			for i := range sizes {
				fmt.Printf(" %.3f at %d,", f1[i], sizes[i])
			}
			fmt.Printf(" %.3f at %d; %+.3f per doubling over %d to %d items: %s\n", full, pool, b, sizes[0], sizes[len(sizes)-1], orBorderline(want))
		}
		count, before := map[string]int{}, map[string]int{}
		var slopes []float64
		var needed []int
		for seed := 1; seed <= *subsets; seed++ {
			items := shuffled(*s.corpus, seed)
			train := items[:s.train]
			val := items[s.train : s.train+s.val]
			test := items[s.train+s.val : s.train+s.val+s.test]
			got, old, err := fit(filepath.Join(*work, "run"), *s.corpus, train, val, test, s.points, *draws, int64(seed))
			if err != nil {
				fail(fmt.Errorf("%s, subset %d: %w", s.name, seed, err))
			}
			count[got.Verdict]++
			before[old]++
			slopes = append(slopes, got.Trend.PerDoubling)
			if got.NTestNeeded > 0 {
				needed = append(needed, got.NTestNeeded)
			}
			if *verbose {
				fmt.Printf("    %d: %s\n", seed, got.Sentence)
				for _, p := range got.Points {
					fmt.Printf("       %v%% n=%d macro %.3f se %.3f/%.3f draws", p.Percent, p.NTrain, p.MacroF1, p.SETest, p.SEDraws)
					for _, d := range p.Draws {
						fmt.Printf(" %.3f", d.MacroF1)
					}
					fmt.Println()
				}
			}
		}
		n := float64(*subsets)
		share := func(v string) float64 { return 100 * float64(count[v]) / n }
		fmt.Printf("  verdicts over %d subsets: rising %.0f%%, flat %.0f%%, falling %.0f%%, unclear %.0f%%; mean slope %+.3f per doubling (%.0f s)\n",
			*subsets, share(curve.Rising), share(curve.Flat), share(curve.Falling), share(curve.Unclear), mean(slopes), time.Since(start).Seconds())
		falseFlat, falseFalling := 0.0, 0.0
		if want != curve.Flat {
			falseFlat = share(curve.Flat)
		}
		if want != curve.Falling {
			falseFalling = share(curve.Falling)
		}
		was := func(v string) float64 { return 100 * float64(before[v]) / n }
		fmt.Printf("  the last step of one draw against the test items' band alone (the judge before draws): rising %.0f%%, flat %.0f%%, falling %.0f%%, unclear %.0f%%\n",
			was(curve.Rising), was(curve.Flat), was(curve.Falling), was(curve.Unclear))
		if len(needed) > 0 {
			slices.Sort(needed)
			fmt.Printf("  the unclear verdicts ask for about %d labelled test items (the median; %d to %d)\n", needed[len(needed)/2], needed[0], needed[len(needed)-1])
		}
		if want == "" {
			fmt.Printf("  no verdict to agree with; false falling: %.0f%%\n\n", falseFalling)
			continue
		}
		fmt.Printf("  agree with %s: %.0f%%; false flat: %.0f%%; false falling: %.0f%%\n\n", want, share(want), falseFlat, falseFalling)
		// The targets: rising in most subsets and flat or falling in under
		// 10% where more data helps; flat in most on a saturated split;
		// unclear in nearly all with 60 items in all.
		met := false
		target := ""
		switch want {
		case curve.Rising:
			target = "rising in most, flat or falling in under 10%"
			met = share(curve.Rising) > 50 && share(curve.Flat)+share(curve.Falling) < 10
		case curve.Flat:
			target = "flat in most, falling in none"
			met = share(curve.Flat) > 50 && share(curve.Falling) == 0
		case curve.Unclear:
			target = "unclear in at least 90%"
			met = share(curve.Unclear) >= 90
		default:
			target = "falling in under 10%"
			met = share(curve.Falling) < 10
		}
		verdict := "met"
		if !met {
			verdict = "MISSED"
		}
		summary = append(summary, fmt.Sprintf("  %-56s %s: %s", s.name, target, verdict))
	}
	if len(summary) > 0 {
		fmt.Println("targets:")
		fmt.Println(strings.Join(summary, "\n"))
	}
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}
