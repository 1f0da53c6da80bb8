package writeback

import (
	"fmt"
	"path/filepath"
	"testing"
)

// TestScoreCurve: each point of a curve is scored as Score scores a run
// that wrote that point's lines alone; each label's F1 averages to the
// macro-F1; a point without lines is not Found; lines without a
// curve_point are not part of the curve; the noise of a change between
// two identical points is 0, and of different ones above 0.
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
	// Point 50 is right on every third item, point 100 on all but three.
	label := func(p int, i int, g string) string {
		if p == 50 && i%3 != 0 || p == 100 && i < 3 {
			return "a"
		}
		return g
	}
	var all []any
	per := map[int][]any{}
	for _, p := range []int{50, 100} {
		for i := range 40 {
			id := fmt.Sprintf("x%02d", i)
			l := label(p, i, gold[id])
			for _, schema := range []string{"sentiment", "tags"} {
				line := fmt.Sprintf(`{"instance_id":%q,"schema_name":%q,"payload":{"label":%q},"curve_point":%d,"n_train":%d}`, id, schema, l, p, p/10)
				all = append(all, line)
				per[p] = append(per[p], line)
			}
		}
	}
	all = append(all, `{"instance_id":"x00","schema_name":"sentiment","payload":{"label":"c"}}`)
	path := filepath.Join(dir, "predictions.jsonl")
	writeLines(t, path, all...)
	got, err := ScoreCurve(dir, path, scoreSchemas, []float64{25, 50, 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{"sentiment", "tags"} {
		c := got[schema]
		if c.Points[0].Found || c.Points[0].NTrain != -1 || c.Points[0].Score.NMissing != 40 {
			t.Errorf("%s: point 25 has no lines, yet %+v", schema, c.Points[0])
		}
		for i, p := range []int{50, 100} {
			pt := c.Points[i+1]
			one := filepath.Join(dir, fmt.Sprintf("p%d.jsonl", p))
			writeLines(t, one, per[p]...)
			want, err := Score(dir, one, scoreSchemas)
			if err != nil {
				t.Fatal(err)
			}
			if !pt.Found || pt.NTrain != p/10 || pt.Score.Accuracy != want[schema].Accuracy || pt.Score.MacroF1 != want[schema].MacroF1 {
				t.Errorf("%s at %d: %+v, want the score %+v", schema, p, pt, want[schema])
			}
			var sum float64
			for _, l := range pt.Labels {
				sum += l.F1
			}
			near(t, fmt.Sprintf("%s at %d: mean label F1", schema, p), sum/float64(len(pt.Labels)), pt.Score.MacroF1)
		}
		if m, _ := c.Noise(1, 1); m != 0 {
			t.Errorf("%s: noise of a point against itself %v", schema, m)
		}
		if m, labels := c.Noise(1, 2); m <= 0 || labels["b"] <= 0 {
			t.Errorf("%s: noise %v, labels %v", schema, m, labels)
		}
	}
}
