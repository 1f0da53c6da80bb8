package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"potato-training/internal/testproject"
	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/events"
)

func TestPointProbs(t *testing.T) {
	// Cumulative probabilities that rise are made non-increasing: 0.3
	// after 0.2 counts as 0.2.
	got := pointProbs([]float64{0.9, 0.2, 0.3, 0.1})
	want := []float64{0.1, 0.7, 0, 0.1, 0.1}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Fatalf("pointProbs = %v, want %v", got, want)
		}
	}
	if k := medianPoint(got); k != 1 {
		t.Errorf("median point %d, want 1", k)
	}
	if k := medianPoint(pointProbs([]float64{0.95, 0.9, 0.8, 0.6})); k != 4 {
		t.Errorf("median point %d, want 4", k)
	}
	if k := medianPoint(pointProbs([]float64{0.1, 0.05, 0, 0})); k != 0 {
		t.Errorf("median point %d, want 0", k)
	}
}

// likertSpec makes a bundle of the tests' likert corpus: the first 600
// tweets train, the next 200 val and the last 200 test, each with the
// point of its first rating as its target, a label of the scale.
func likertSpec(t *testing.T) Spec {
	t.Helper()
	tweets := testproject.Tweets(t, filepath.Join("..", ".."))
	dir := t.TempDir()
	bdir := filepath.Join(dir, "bundle")
	w, err := bundle.NewWriter(bdir, []string{"train", "val", "test"}, true)
	if err != nil {
		t.Fatal(err)
	}
	for i, tw := range tweets {
		split := "train"
		switch {
		case i >= 800:
			split = "test"
		case i >= 600:
			split = "val"
		}
		target := testproject.LikertLabels[testproject.LikertPoint(tw.Ratings[0])-1]
		if err := w.Add(split, bundle.Row{InstanceID: tw.ID, Text: tw.Text, Targets: map[string]any{"sentiment": target}}); err != nil {
			t.Fatal(err)
		}
	}
	s := bundle.Schema{Name: "sentiment", AnnotationType: "likert", Kind: config.KindOrdinal, Labels: testproject.LikertLabels}
	if _, err := w.Close(bundle.Manifest{Schemas: []bundle.Schema{s}}); err != nil {
		t.Fatal(err)
	}
	return Spec{V: 1, RunID: "r", Trainer: "tfidf-logreg", Schemas: []bundle.Schema{s}, BundleDir: bdir,
		Workdir: filepath.Join(dir, "work"), Limits: Limits{NumThreads: 2}}
}

// TestWorkerOrdinal: tfidf-logreg learns a likert schema of real tweets
// as an ordered scale: every prediction is a point of the scale with
// every point's probability, its confidence that of its point, and its
// point the median of them; on the test split its points are nearer the
// gold ones than the most common point's.
func TestWorkerOrdinal(t *testing.T) {
	spec := likertSpec(t)
	var out, errb bytes.Buffer
	if code := Worker(context.Background(), writeSpec(t, spec), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var res events.Result
	for _, e := range parseEvents(t, out.Bytes()) {
		if e.Kind == events.KindResult {
			if err := e.Decode(&res); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !slices.Equal(res.LabelOrder["sentiment"], testproject.LikertLabels) {
		t.Errorf("label_order %v, want the scale", res.LabelOrder["sentiment"])
	}
	gold := map[string]int{}
	for _, tw := range testproject.Tweets(t, filepath.Join("..", ".."))[800:] {
		gold[tw.ID] = testproject.LikertPoint(tw.Ratings[0]) - 1
	}
	counts := make([]int, 5)
	for _, g := range gold {
		counts[g]++
	}
	mode := 0
	for k := range counts {
		if counts[k] > counts[mode] {
			mode = k
		}
	}
	f, err := os.Open(filepath.Join(spec.Workdir, "predictions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var errModel, errMode float64
	n := 0
	for sc.Scan() {
		var p struct {
			InstanceID string             `json:"instance_id"`
			Confidence float64            `json:"confidence"`
			Payload    payload            `json:"payload"`
			Probs      map[string]float64 `json:"probs"`
		}
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		k := slices.Index(testproject.LikertLabels, p.Payload.Label)
		if k < 0 || len(p.Probs) != 5 {
			t.Fatalf("prediction %+v: not a point of the scale with 5 probabilities", p)
		}
		var sum, below float64
		for j, l := range testproject.LikertLabels {
			sum += p.Probs[l]
			if j < k {
				below += p.Probs[l]
			}
		}
		if math.Abs(sum-1) > 1e-5 || math.Abs(p.Probs[p.Payload.Label]-p.Confidence) > 1e-6 || below >= 0.5+1e-6 || below+p.Confidence < 0.5-1e-6 {
			t.Fatalf("prediction %+v: probabilities sum to %g; the point is not their median", p, sum)
		}
		if g, ok := gold[p.InstanceID]; ok {
			errModel += math.Abs(float64(k - g))
			errMode += math.Abs(float64(mode - g))
			n++
		}
	}
	if n != 200 {
		t.Fatalf("%d test predictions, want 200", n)
	}
	t.Logf("test MAE %.3f, the most common point's %.3f", errModel/float64(n), errMode/float64(n))
	if errModel >= errMode {
		t.Errorf("test MAE %.3f is not below the most common point's %.3f", errModel/float64(n), errMode/float64(n))
	}
}
