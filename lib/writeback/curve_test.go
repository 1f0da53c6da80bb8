package writeback

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestScoreCurve: each point and draw of a curve is scored as Score
// scores a run that wrote that point's and draw's lines alone; each
// label's F1 averages to the macro-F1; a point or draw without lines is
// not Found; lines without a curve_point are not part of the curve, and a
// curve_draw beyond the draws asked for is an error. Resample scores every
// point and draw on the same resamples: two draws that predict alike
// score alike on each, the same seed gives the same resamples, and their
// mean is near the score itself.
func TestScoreCurve(t *testing.T) {
	dir := t.TempDir()
	writeLines(t, filepath.Join(dir, "train.jsonl"), row{"t1", "", map[string]any{"sentiment": "a"}})
	var test []any
	gold := map[string]string{}
	for i := range 40 {
		g := []string{"a", "b", "c"}[i%3]
		id := fmt.Sprintf("x%02d", i)
		gold[id] = g
		test = append(test, row{id, "", map[string]any{"sentiment": g, "tags": []string{g}}})
	}
	writeLines(t, filepath.Join(dir, "test.jsonl"), test...)
	// Point 50 is right on every third item, point 100 on all but three;
	// draw 1 of point 100 predicts as point 50 does.
	label := func(p int, i int, g string) string {
		if p == 50 && i%3 != 0 || p == 100 && i < 3 {
			return "a"
		}
		return g
	}
	type pd struct{ p, d int }
	var all []any
	per := map[pd][]any{}
	for _, k := range []pd{{50, 0}, {100, 0}, {100, 1}} {
		for i := range 40 {
			id := fmt.Sprintf("x%02d", i)
			l := label(k.p, i, gold[id])
			if k.d == 1 {
				l = label(50, i, gold[id])
			}
			for _, schema := range []string{"sentiment", "tags"} {
				line := fmt.Sprintf(`{"instance_id":%q,"schema_name":%q,"payload":{"label":%q},"curve_point":%d,"n_train":%d}`, id, schema, l, k.p, k.p/10)
				if k.d > 0 {
					line = fmt.Sprintf(`{"instance_id":%q,"schema_name":%q,"payload":{"label":%q},"curve_point":%d,"curve_draw":%d,"n_train":%d}`, id, schema, l, k.p, k.d, k.p/10)
				}
				all = append(all, line)
				per[k] = append(per[k], line)
			}
		}
	}
	all = append(all, `{"instance_id":"x00","schema_name":"sentiment","payload":{"label":"c"}}`)
	path := filepath.Join(dir, "predictions.jsonl")
	writeLines(t, path, all...)
	got, err := ScoreCurve(dir, path, scoreSchemas, []float64{25, 50, 100}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{"sentiment", "tags"} {
		c := got[schema]
		if d := c.Points[0].Draws[0]; d.Found || d.NTrain != -1 || d.Score.NMissing != 40 {
			t.Errorf("%s: point 25 has no lines, yet %+v", schema, d)
		}
		if d := c.Points[1].Draws[1]; d.Found || d.Score.NMissing != 40 {
			t.Errorf("%s: point 50 has no lines of draw 1, yet %+v", schema, d)
		}
		for k, lines := range per {
			pt := c.Points[map[int]int{50: 1, 100: 2}[k.p]].Draws[k.d]
			one := filepath.Join(dir, fmt.Sprintf("p%d-%d.jsonl", k.p, k.d))
			writeLines(t, one, lines...)
			want, err := Score(dir, one, scoreSchemas)
			if err != nil {
				t.Fatal(err)
			}
			if !pt.Found || pt.NTrain != k.p/10 || pt.Score.Accuracy != want[schema].Accuracy || pt.Score.MacroF1 != want[schema].MacroF1 {
				t.Errorf("%s at %d, draw %d: %+v, want the score %+v", schema, k.p, k.d, pt, want[schema])
			}
			var sum float64
			for _, l := range pt.Labels {
				sum += l.F1
			}
			near(t, fmt.Sprintf("%s at %d, draw %d: mean label F1", schema, k.p, k.d), sum/float64(len(pt.Labels)), pt.Score.MacroF1)
		}

		var first []float64
		var sum float64
		n := 0
		c.Resample([]int{0, 1}, func(macro [][]float64, labels map[string][][]float64) {
			if macro[2][1] != macro[1][0] || labels["b"][2][1] != labels["b"][1][0] {
				t.Fatalf("%s: draws that predict alike score %v and %v on one resample", schema, macro[2][1], macro[1][0])
			}
			first = append(first, macro[2][0])
			sum += macro[2][0]
			n++
		})
		if n != Bootstraps {
			t.Errorf("%s: %d resamples", schema, n)
		}
		near2 := math.Abs(sum/float64(n) - c.Points[2].Draws[0].Score.MacroF1)
		if near2 > 0.03 || slices.Min(first) == slices.Max(first) {
			t.Errorf("%s: resampled macro-F1 of point 100 from %v to %v, mean %v off", schema, slices.Min(first), slices.Max(first), near2)
		}
		var again []float64
		c.Resample([]int{0, 1}, func(macro [][]float64, _ map[string][][]float64) { again = append(again, macro[2][0]) })
		if !slices.Equal(first, again) {
			t.Errorf("%s: the same curve resampled twice differs", schema)
		}
	}

	// A draw beyond those asked for is no draw of the curve.
	if _, err := ScoreCurve(dir, path, scoreSchemas, []float64{25, 50, 100}, 1); err == nil ||
		!strings.Contains(err.Error(), "curve_draw 1 is not a draw of the curve, which has 1 (0 to 0)") {
		t.Errorf("draw 1 of a curve of 1: %v", err)
	}
}
