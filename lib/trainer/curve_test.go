package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"potato-training/lib/config"
	"potato-training/lib/curve"
	"potato-training/lib/events"
)

// TestWorkerCurveDraws: tfidf-logreg given spec.json's curve and
// curve_draws fits every point of every draw, each draw on the first
// items of its own order (curve.DrawSeed), and tags each prediction of
// the test split with its point, its draw and the items it fitted; a
// spec without curve_draws fits draw 0 alone; curve_draws outside 1 to
// 20 is a bad spec.
func TestWorkerCurveDraws(t *testing.T) {
	spec := writeBundle(t, config.KindNominal, 60, nil)
	spec.Seed, spec.Curve, spec.CurveDraws = 7, []float64{50, 100}, 3
	var out, errb bytes.Buffer
	if code := Worker(context.Background(), writeSpec(t, spec), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	b, err := os.ReadFile(filepath.Join(spec.Workdir, "predictions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		point float64
		draw  int
	}
	lines := map[key]int{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var p curvePrediction
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(p.InstanceID, "test-") || p.NTrain != curve.Size(60, p.CurvePoint) {
			t.Errorf("line %s", line)
		}
		lines[key{p.CurvePoint, p.CurveDraw}]++
	}
	for _, p := range spec.Curve {
		for d := range 3 {
			if lines[key{p, d}] != 30 {
				t.Errorf("point %v, draw %d: %d lines, want the 30 test items", p, d, lines[key{p, d}])
			}
		}
	}
	if len(lines) != 6 {
		t.Errorf("lines of %d points and draws, want 6: %v", len(lines), lines)
	}

	// Each draw fits the first half of its own order; the whole split at
	// 100% whatever the draw.
	train, err := readSplit(spec.BundleDir, "train", "train.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	ids := func(seed int64, p float64) []string {
		var out []string
		for _, x := range curveSubset(train, spec.Schemas[0], seed, p) {
			out = append(out, x.id)
		}
		return out
	}
	var all []string
	for _, x := range train {
		all = append(all, x.id)
	}
	d0, d1 := ids(curve.DrawSeed(7, 0), 50), ids(curve.DrawSeed(7, 1), 50)
	if slices.Equal(d0, d1) || !slices.Equal(d0, curve.Order(7, all)[:30]) || !slices.Equal(d1, curve.Order(8, all)[:30]) {
		t.Errorf("draws 0 and 1 at 50%%: %v and %v", d0, d1)
	}

	// No curve_draws: draw 0 alone.
	one := writeBundle(t, config.KindNominal, 60, nil)
	one.Curve = []float64{50, 100}
	out.Reset()
	if code := Worker(context.Background(), writeSpec(t, one), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	b, _ = os.ReadFile(filepath.Join(one.Workdir, "predictions.jsonl"))
	if n := strings.Count(string(b), `"curve_draw":0,`); n != 60 || strings.Count(string(b), "\n") != 60 {
		t.Errorf("%d lines of draw 0 in %d, want 60 and 60", n, strings.Count(string(b), "\n"))
	}

	for _, n := range []int{21, -1} {
		bad := writeBundle(t, config.KindNominal, 60, nil)
		bad.Curve, bad.CurveDraws = []float64{50, 100}, n
		out.Reset()
		code := Worker(context.Background(), writeSpec(t, bad), &out, &errb)
		evs := parseEvents(t, out.Bytes())
		last := evs[len(evs)-1]
		if code != 2 || last.String("code") != events.CodeBadSpec || last.String("message") != fmt.Sprintf("curve_draws: a curve has 1 to 20 draws, not %d", n) {
			t.Errorf("curve_draws %d: exit %d, %v", n, code, last)
		}
	}
}
