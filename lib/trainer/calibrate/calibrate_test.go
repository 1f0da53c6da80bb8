package calibrate

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/writeback"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// level makes n points at confidence c, right of them the first nRight.
func level(c float64, n, nRight int) []Point {
	out := make([]Point, n)
	for i := range out {
		out[i] = Point{Confidence: c, Correct: i < nRight}
	}
	return out
}

// The hand computation for Platt scaling. With two distinct confidences,
// a logistic curve of two parameters can pass through any two values, so
// the fit is saturated: at each confidence it equals the mean of Platt's
// smoothed targets there. Here 100 predictions at 0.9 of which 95 are
// right, 100 at 0.6 of which 70 are right: N+ = 165, N- = 35, so a right
// prediction's target is (165+1)/(165+2) = 166/167 and a wrong one's
// 1/(35+2) = 1/37.
//
//	P(0.9) = (95*166/167 + 5/37) / 100 = 0.945663
//	P(0.6) = (70*166/167 + 30/37) / 100 = 0.703916
//
// The precision of a threshold is the mean P of the predictions at or
// above it: 0.945663 at 0.9, (0.945663 + 0.703916) / 2 = 0.824790 at 0.6.
// So for a target of 0.9 the lowest threshold that reaches it is 0.9
// (coverage 100/200 = 0.5); for 0.8 it is 0.6 (coverage 1).
func TestPlattHandComputed(t *testing.T) {
	pts := append(level(0.9, 100, 95), level(0.6, 100, 70)...)
	cal, err := Fit(pts, "auto")
	if err != nil {
		t.Fatal(err)
	}
	p9 := (95*166.0/167 + 5.0/37) / 100
	p6 := (70*166.0/167 + 30.0/37) / 100
	if cal.Method != "platt" || !near(cal.Prob(0.9), p9, 1e-6) || !near(cal.Prob(0.6), p6, 1e-6) {
		t.Fatalf("calibration %+v: P(0.9) %.6f want %.6f, P(0.6) %.6f want %.6f", cal, cal.Prob(0.9), p9, cal.Prob(0.6), p6)
	}
	best, ok := Threshold(pts, cal, 0.9)
	if !ok || best.Threshold != 0.9 || !near(best.Precision, p9, 1e-6) || best.Coverage != 0.5 || best.Empirical != 0.95 {
		t.Errorf("target 0.9: %+v %v", best, ok)
	}
	best, ok = Threshold(pts, cal, 0.8)
	if !ok || best.Threshold != 0.6 || !near(best.Precision, (p9+p6)/2, 1e-6) || best.Coverage != 1 {
		t.Errorf("target 0.8: %+v %v", best, ok)
	}
	if _, ok := Threshold(pts, cal, 0.99); ok {
		t.Errorf("target 0.99 reached")
	}
}

// The hand computation for isotonic regression: 1200 predictions (above
// IsotonicAbove), 300 at each of 0.5, 0.7, 0.85 and 0.95, right 120, 180,
// 270 and 294 times: shares 0.4, 0.6, 0.9, 0.98. They already rise with
// confidence, so pool-adjacent-violators keeps the four blocks, and each
// maps to its share. Precision of a threshold, the mean over the blocks at
// or above it (equal sizes): 0.98 at 0.95, (0.98+0.9)/2 = 0.94 at 0.85,
// (0.98+0.9+0.6)/3 = 0.826667 at 0.7. For a target of 0.9, min_confidence
// is 0.85, with coverage 600/1200 = 0.5.
func TestIsotonicHandComputed(t *testing.T) {
	var pts []Point
	pts = append(pts, level(0.5, 300, 120)...)
	pts = append(pts, level(0.7, 300, 180)...)
	pts = append(pts, level(0.85, 300, 270)...)
	pts = append(pts, level(0.95, 300, 294)...)
	cal, err := Fit(pts, "")
	if err != nil {
		t.Fatal(err)
	}
	if cal.Method != "isotonic" || len(cal.Blocks) != 4 {
		t.Fatalf("calibration %+v", cal)
	}
	for c, want := range map[float64]float64{0.5: 0.4, 0.7: 0.6, 0.85: 0.9, 0.95: 0.98, 0.9: 0.9, 0.1: 0.4, 1: 0.98} {
		if !near(cal.Prob(c), want, 1e-12) {
			t.Errorf("P(%g) = %g, want %g", c, cal.Prob(c), want)
		}
	}
	best, ok := Threshold(pts, cal, 0.9)
	if !ok || best.Threshold != 0.85 || !near(best.Precision, 0.94, 1e-12) || best.Coverage != 0.5 || best.N != 600 {
		t.Errorf("target 0.9: %+v %v", best, ok)
	}
	curve := Curve(pts, cal, []float64{0.7, 0.99})
	if !near(curve[0].Precision, (0.98+0.9+0.6)/3, 1e-12) || curve[0].Coverage != 0.75 || curve[1].N != 0 || !math.IsNaN(curve[1].Precision) {
		t.Errorf("curve %+v", curve)
	}
}

// Pool-adjacent-violators merges a block that falls below the one before:
// 0.1 right, 0.2 wrong, 0.3 right gives [0.1, 0.2] at 0.5, then 0.3 at 1.
func TestIsotonicPools(t *testing.T) {
	cal, _ := FitIsotonic([]Point{{0.3, true}, {0.1, true}, {0.2, false}})
	want := []Block{{0.1, 0.2, 0.5, 2}, {0.3, 0.3, 1, 1}}
	if fmt.Sprint(cal.Blocks) != fmt.Sprint(want) {
		t.Errorf("blocks %v, want %v", cal.Blocks, want)
	}
	if _, err := Fit(nil, "platt"); err != ErrNoPoints {
		t.Errorf("empty fit: %v", err)
	}
}

// store writes a project.sqlite with the predictions of run r2 (and an
// older run r1 on other items), and a bundle whose targets are the human
// labels, and returns the trainer's input.
func store(t *testing.T, preds []Point) Input {
	t.Helper()
	dir := t.TempDir()
	st, err := writeback.OpenStore(filepath.Join(dir, "project.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	bdir := filepath.Join(dir, "bundle")
	w, err := bundle.NewWriter(bdir, []string{"train", "val", "test"}, true)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "project.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ins := func(id, run, label string, conf any, at float64) {
		payload := fmt.Sprintf(`{"label":%q,"confidence":%v}`, label, conf)
		if _, err := db.Exec(`INSERT INTO training_predictions (project, instance_id, schema_name, run_id, payload, confidence, created_at)
			VALUES ('P', ?, 's', ?, ?, ?, ?)`, id, run, payload, conf, at); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range preds {
		id := fmt.Sprintf("i%d", i)
		label := "neg"
		if p.Correct {
			label = "pos"
		}
		ins(id, "r2", label, p.Confidence, 2000)
		split := []string{"train", "val", "test"}[i%3]
		if err := w.Add(split, bundle.Row{InstanceID: id, Text: "t", Targets: map[string]any{"s": "pos"}}); err != nil {
			t.Fatal(err)
		}
	}
	// An older run's predictions, all wrong, and items nobody labelled.
	for i := 0; i < 30; i++ {
		id := fmt.Sprintf("old%d", i)
		ins(id, "r1", "neg", 0.99, 1000)
		w.Add("val", bundle.Row{InstanceID: id, Text: "t", Targets: map[string]any{"s": "pos"}})
		ins(fmt.Sprintf("u%d", i), "r2", "neg", 0.99, 2000)
		w.Add(bundle.UnlabeledSplit, bundle.Row{InstanceID: fmt.Sprintf("u%d", i), Text: "t"})
	}
	ins("nullconf", "r2", "pos", nil, 2000)
	w.Add("test", bundle.Row{InstanceID: "nullconf", Text: "t", Targets: map[string]any{"s": "pos"}})
	schema := bundle.Schema{Name: "s", AnnotationType: "radio", Kind: config.KindNominal, Labels: []string{"pos", "neg"}}
	if _, err := w.Close(bundle.Manifest{Schemas: []bundle.Schema{schema}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	return Input{BundleDir: bdir, Workdir: filepath.Join(dir, "artifacts"), Schemas: []bundle.Schema{schema},
		Store: filepath.Join(dir, "project.sqlite"), Project: "P"}
}

func runEvents(t *testing.T, in Input) ([]events.Event, error) {
	var out bytes.Buffer
	err := Run(context.Background(), in, events.NewWriter(&out))
	var evs []events.Event
	for _, line := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		e, perr := events.Parse(line)
		if perr != nil {
			t.Fatalf("not an event: %q", line)
		}
		evs = append(evs, e)
	}
	return evs, err
}

// TestRunOnStore is the Platt case above, read from a store: the latest
// run's rows on labelled items, not the older run's, not the unlabelled
// items, not the null confidence.
func TestRunOnStore(t *testing.T) {
	in := store(t, append(level(0.9, 100, 95), level(0.6, 100, 70)...))
	evs, err := runEvents(t, in)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	var res events.Result
	if err := last.Decode(&res); err != nil || last.Kind != events.KindResult {
		t.Fatalf("last event %+v", last)
	}
	p9 := (95*166.0/167 + 5.0/37) / 100
	m := res.Metrics
	if m["s/min_confidence"] != 0.9 || !near(m["s/precision"], p9, 1e-6) || m["s/coverage"] != 0.5 ||
		m["s/n"] != 200 || m["s/target_reached"] != 1 || m["s/empirical_precision"] != 0.95 {
		t.Errorf("metrics %v", m)
	}
	if m["s/coverage@0.60"] != 1 || m["s/coverage@0.65"] != 0.5 || m["s/coverage@0.95"] != 0 || !near(m["s/precision@0.60"], (p9+(70*166.0/167+30.0/37)/100)/2, 1e-6) {
		t.Errorf("curve metrics %v", m)
	}
	if _, ok := m["s/precision@0.95"]; ok {
		t.Errorf("a precision for a threshold above every confidence: %v", m["s/precision@0.95"])
	}
	if res.NPredictions != 0 || res.PredictionsFile != "" || res.ModelVersion != "decision-calibrate/1" {
		t.Errorf("result %+v", res)
	}
	nMetric := 0
	for _, e := range evs {
		if e.Kind == events.KindMetric && e.String("split") == "calibration" {
			nMetric++
		}
	}
	if nMetric < 21 {
		t.Errorf("%d calibration metric events", nMetric)
	}
	b, err := os.ReadFile(filepath.Join(in.Workdir, ArtifactName))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Format  string
		Schemas map[string]struct {
			RunIDs      []string `json:"run_ids"`
			NNull       int      `json:"n_null_confidence"`
			Calibration Calibration
			Curve       []struct {
				Precision *float64 `json:"precision"`
			}
		}
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	s := rep.Schemas["s"]
	if rep.Format != "potato-decision-calibrate" || fmt.Sprint(s.RunIDs) != "[r2]" || s.NNull != 1 ||
		s.Calibration.Method != "platt" || len(s.Curve) != 21 || s.Curve[20].Precision != nil {
		t.Errorf("calibration.json:\n%s", b)
	}

	// Every run: the older run's 30 wrong predictions at 0.99 join in.
	in.RunID = "all"
	if _, err := runEvents(t, in); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(filepath.Join(in.Workdir, ArtifactName))
	if !strings.Contains(string(b), `"r1"`) || !strings.Contains(string(b), `"n": 230`) {
		t.Errorf("run_id=all:\n%.600s", b)
	}
}

func TestRunIsotonicOnStore(t *testing.T) {
	var pts []Point
	pts = append(pts, level(0.5, 300, 120)...)
	pts = append(pts, level(0.7, 300, 180)...)
	pts = append(pts, level(0.85, 300, 270)...)
	pts = append(pts, level(0.95, 300, 294)...)
	in := store(t, pts)
	evs, err := runEvents(t, in)
	if err != nil {
		t.Fatal(err)
	}
	var res events.Result
	evs[len(evs)-1].Decode(&res)
	if res.Metrics["s/min_confidence"] != 0.85 || !near(res.Metrics["s/precision"], 0.94, 1e-12) {
		t.Errorf("metrics %v", res.Metrics)
	}
}

func TestRunFailures(t *testing.T) {
	few := store(t, level(0.9, 10, 9))
	noStore := store(t, level(0.9, 30, 29))
	noStore.Store = filepath.Join(t.TempDir(), "none.sqlite")
	noParams := store(t, level(0.9, 30, 29))
	noParams.Store, noParams.Project = "", ""
	cases := []struct {
		name string
		in   Input
		code string
		want string
	}{
		{"too few", few, events.CodeValidationFailed, "has 10 stored predictions of run r2"},
		{"no store", noStore, events.CodeValidationFailed, "no stored predictions to calibrate"},
		{"no params", noParams, events.CodeBadSpec, "reads the annotation server's own files"},
	}
	for _, c := range cases {
		_, err := runEvents(t, c.in)
		e, ok := err.(*Error)
		if !ok || e.Code != c.code || e.Exit != 2 || !strings.Contains(e.Msg, c.want) {
			t.Errorf("%s: %v, want %s %q", c.name, err, c.code, c.want)
		}
	}
}
