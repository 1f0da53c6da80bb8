package writeback

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/rundir"
)

// probPred is a prediction line with probs.
type probPred struct {
	ID         string             `json:"instance_id"`
	Schema     string             `json:"schema_name"`
	Payload    any                `json:"payload"`
	Confidence *float64           `json:"confidence"`
	Probs      map[string]float64 `json:"probs,omitempty"`
}

// simBundle writes a bundle of one schema (kind, labels) whose splits
// hold n items each of val and test (and one train item), with the gold
// targets gold gives, and a manifest.
func simBundle(t *testing.T, s bundle.Schema, nVal, nTest int, gold func(split string, i int) any) string {
	t.Helper()
	dir := t.TempDir()
	write := func(split string, n int) {
		var lines []any
		for i := range n {
			lines = append(lines, row{fmt.Sprintf("%s%d", split, i), "x", map[string]any{s.Name: gold(split, i)}})
		}
		writeLines(t, filepath.Join(dir, split+".jsonl"), lines...)
	}
	write("train", 1)
	write("val", nVal)
	write("test", nTest)
	writeLines(t, filepath.Join(dir, "manifest.json"), map[string]any{
		"v": 1,
		"schemas": []map[string]any{{"name": s.Name, "annotation_type": map[config.Kind]string{
			config.KindNominal: "radio", config.KindMultilabel: "multiselect"}[s.Kind], "kind": s.Kind, "labels": s.Labels}},
		"splits": map[string]any{
			"train": map[string]any{"path": "train.jsonl", "format": "jsonl", "n": 1},
			"val":   map[string]any{"path": "val.jsonl", "format": "jsonl", "n": nVal},
			"test":  map[string]any{"path": "test.jsonl", "format": "jsonl", "n": nTest},
		},
	})
	return dir
}

var sentiment3 = bundle.Schema{Name: "sentiment", Kind: config.KindNominal, Labels: []string{"neg", "neu", "pos"}}

// overconfidentNominal simulates a model whose probabilities are right
// (the gold label is drawn from softmax(z)) and a trainer that reports
// softmax(k*z): overconfident by temperature k. It returns the bundle and
// the predictions file.
func overconfidentNominal(t *testing.T, nVal, nTest int, k float64, withProbs bool) (string, string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 8))
	type item struct {
		gold  string
		probs []float64
	}
	items := map[string]item{}
	draw := func(id string) item {
		z := []float64{rng.NormFloat64() * 1.2, rng.NormFloat64() * 1.2, rng.NormFloat64() * 1.2}
		truth := softmax(z, 1)
		u, g, acc := rng.Float64(), 0, truth[0]
		for u > acc && g < 2 {
			g++
			acc += truth[g]
		}
		it := item{sentiment3.Labels[g], softmax(z, k)}
		items[id] = it
		return it
	}
	for i := range nVal {
		draw(fmt.Sprintf("val%d", i))
	}
	for i := range nTest {
		draw(fmt.Sprintf("test%d", i))
	}
	bdir := simBundle(t, sentiment3, nVal, nTest, func(split string, i int) any { return items[fmt.Sprintf("%s%d", split, i)].gold })
	var lines []any
	for _, split := range []string{"val", "test"} {
		n := map[string]int{"val": nVal, "test": nTest}[split]
		for i := range n {
			id := fmt.Sprintf("%s%d", split, i)
			it := items[id]
			best := 0
			for c, p := range it.probs {
				if p > it.probs[best] {
					best = c
				}
			}
			l := sentiment3.Labels[best]
			p := probPred{ID: id, Schema: "sentiment", Payload: label(l, it.probs[best]), Confidence: conf(it.probs[best])}
			if withProbs {
				p.Probs = map[string]float64{}
				for c, name := range sentiment3.Labels {
					p.Probs[name] = it.probs[c]
				}
			}
			lines = append(lines, p)
		}
	}
	path := filepath.Join(bdir, "predictions.jsonl")
	writeLines(t, path, lines...)
	return bdir, path
}

func readPreds(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// The known truth: a model overconfident by temperature 3 on 3 labels.
// Temperature scaling on the val split finds about 3, the test split's
// ECE falls from far off to near 0, and the predictions file now holds
// the calibrated confidence (line and payload), calibrated probs that sum
// to 1, the same labels, and the trainer's confidence as
// uncalibrated_confidence.
func TestCalibrateTemperatureKnownTruth(t *testing.T) {
	bdir, path := overconfidentNominal(t, 1500, 1500, 3, true)
	before := readPreds(t, path)
	cals, err := Calibrate(bdir, path, []bundle.Schema{sentiment3})
	if err != nil {
		t.Fatal(err)
	}
	c := cals["sentiment"]
	if c.Method != rundir.CalibrationTemperature || c.NVal != 1500 || c.NTest != 1500 || c.Unit != "item" {
		t.Fatalf("calibration %+v", c)
	}
	if math.Abs(c.Temperature-3) > 0.45 {
		t.Errorf("temperature %.3f, want about 3", c.Temperature)
	}
	if c.ECEBefore == nil || c.ECEAfter == nil || *c.ECEBefore < 0.1 || *c.ECEAfter > 0.04 {
		t.Fatalf("ECE before %v after %v: want before above 0.1, after below 0.04", c.ECEBefore, c.ECEAfter)
	}
	t.Logf("temperature %.3f, ECE %.4f -> %.4f", c.Temperature, *c.ECEBefore, *c.ECEAfter)
	n := 0
	for _, b := range c.After {
		n += b.N
		if b.Confidence < b.Lo || b.Confidence > b.Hi {
			t.Errorf("bin %+v: its mean confidence is outside it", b)
		}
	}
	if n != 1500 || c.NRewritten != 3000 {
		t.Errorf("%d items in the bins after, %d rewritten", n, c.NRewritten)
	}
	after := readPreds(t, path)
	if len(after) != len(before) {
		t.Fatalf("%d lines, was %d", len(after), len(before))
	}
	for i, a := range after {
		b := before[i]
		pl, bl := a["payload"].(map[string]any), b["payload"].(map[string]any)
		if a["instance_id"] != b["instance_id"] || pl["label"] != bl["label"] {
			t.Fatalf("line %d changed its item or label: %v -> %v", i, b, a)
		}
		cf := a["confidence"].(float64)
		if a["uncalibrated_confidence"] != b["confidence"] || pl["confidence"] != cf || cf >= b["confidence"].(float64) && cf < 0.999 {
			t.Fatalf("line %d: %v -> %v: want a lower calibrated confidence, the trainer's kept", i, b, a)
		}
		var sum float64
		for _, p := range a["probs"].(map[string]any) {
			sum += p.(float64)
		}
		if math.Abs(sum-1) > 1e-9 || math.Abs(a["probs"].(map[string]any)[pl["label"].(string)].(float64)-cf) > 1e-12 {
			t.Fatalf("line %d: probs %v, confidence %v", i, a["probs"], cf)
		}
	}
	// Scoring reads the labels, which did not change; a second
	// calibration leaves the file alone.
	if sc, err := Score(bdir, path, []bundle.Schema{sentiment3}); err != nil || sc["sentiment"].N != 1500 || sc["sentiment"].NMissing != 0 {
		t.Fatalf("score %+v %v", sc, err)
	}
	was, _ := os.ReadFile(path)
	again, err := Calibrate(bdir, path, []bundle.Schema{sentiment3})
	if now, _ := os.ReadFile(path); err != nil || again["sentiment"].Method != rundir.CalibrationNone ||
		!strings.Contains(again["sentiment"].Reason, "calibrated before") || !bytes.Equal(was, now) {
		t.Errorf("calibrated again: %+v %v, file unchanged %v", again, err, bytes.Equal(was, now))
	}
}

// A trainer that writes only its confidence (an exec: trainer) is
// calibrated by one temperature on its confidence's logit: overconfident
// by 3, it comes down near the truth too.
func TestCalibrateTopLabelWithoutProbs(t *testing.T) {
	bdir, path := overconfidentNominal(t, 1500, 1500, 3, false)
	cals, err := Calibrate(bdir, path, []bundle.Schema{sentiment3})
	if err != nil {
		t.Fatal(err)
	}
	c := cals["sentiment"]
	if c.Method != rundir.CalibrationTopLabelTemperature || c.Temperature < 1.5 {
		t.Fatalf("calibration %+v", c)
	}
	if *c.ECEAfter >= *c.ECEBefore/2 || *c.ECEAfter > 0.06 {
		t.Errorf("ECE %.4f -> %.4f", *c.ECEBefore, *c.ECEAfter)
	}
	for _, p := range readPreds(t, path) {
		if _, ok := p["probs"]; ok {
			t.Fatalf("probs appeared: %v", p)
		}
		if p["confidence"].(float64) > p["uncalibrated_confidence"].(float64)+1e-12 && p["uncalibrated_confidence"].(float64) > 0.5 {
			t.Fatalf("an overconfident trainer's confidence went up: %v", p)
		}
	}
}

// Fewer than MinCalibrationItems val items: nothing is fitted, the run
// says why, the test split's ECE is still measured, and the predictions
// file is as the trainer wrote it, byte for byte.
func TestCalibrateSmallValLeavesConfidences(t *testing.T) {
	bdir, path := overconfidentNominal(t, MinCalibrationItems-1, 200, 3, true)
	was, _ := os.ReadFile(path)
	cals, err := Calibrate(bdir, path, []bundle.Schema{sentiment3})
	if err != nil {
		t.Fatal(err)
	}
	c := cals["sentiment"]
	if c.Method != rundir.CalibrationNone || c.Temperature != 1 || c.NVal != MinCalibrationItems-1 ||
		!strings.Contains(c.Reason, fmt.Sprintf("fewer than %d", MinCalibrationItems)) || c.ECEBefore == nil || c.ECEAfter != nil || c.NRewritten != 0 {
		t.Fatalf("calibration %+v", c)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(was, now) {
		t.Error("the predictions file changed")
	}
	if !strings.Contains(CalibrationNote("sentiment", c), "none: 29 val items") {
		t.Errorf("note %q", CalibrationNote("sentiment", c))
	}
}

var topics = bundle.Schema{Name: "topics", Kind: config.KindMultilabel, Labels: []string{"economy", "sport", "war"}}

// A multilabel model overconfident by 2.5 on each label: the per-label
// temperature fit brings the label decisions' ECE down, the chosen
// labels stay, and each chosen label's prelabel in Potato's store
// carries its own calibrated probability, not the set's.
func TestCalibrateMultilabelPerLabel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 800
	gold := map[string][]string{}
	var lines []any
	for _, split := range []string{"val", "test"} {
		for i := range n {
			id := fmt.Sprintf("%s%d", split, i)
			probs := map[string]float64{}
			var chosen []string
			gold[id] = []string{}
			minC := 1.0
			for _, l := range topics.Labels {
				z := rng.NormFloat64() * 1.5
				if rng.Float64() < sigmoid(z) {
					gold[id] = append(gold[id], l)
				}
				p := sigmoid(2.5 * z)
				probs[l] = p
				if p >= 0.5 {
					chosen = append(chosen, l)
					minC = min(minC, p)
				} else {
					minC = min(minC, 1-p)
				}
			}
			lines = append(lines, probPred{id, "topics", label(strings.Join(chosen, "|"), minC), conf(minC), probs})
		}
	}
	bdir := simBundle(t, topics, n, n, func(split string, i int) any { return gold[fmt.Sprintf("%s%d", split, i)] })
	path := filepath.Join(bdir, "predictions.jsonl")
	writeLines(t, path, lines...)
	cals, err := Calibrate(bdir, path, []bundle.Schema{topics})
	if err != nil {
		t.Fatal(err)
	}
	c := cals["topics"]
	if c.Method != rundir.CalibrationTemperature || c.Unit != "label_decision" || math.Abs(c.Temperature-2.5) > 0.5 {
		t.Fatalf("calibration %+v", c)
	}
	if *c.ECEBefore < 0.08 || *c.ECEAfter > 0.04 {
		t.Errorf("ECE %.4f -> %.4f", *c.ECEBefore, *c.ECEAfter)
	}
	t.Logf("temperature %.3f, ECE %.4f -> %.4f", c.Temperature, *c.ECEBefore, *c.ECEAfter)

	// Publish a test item that chose two labels.
	var two map[string]any
	for _, p := range readPreds(t, path) {
		if l := p["payload"].(map[string]any)["label"].(string); strings.Count(l, "|") == 1 && strings.HasPrefix(p["instance_id"].(string), "test") {
			two = p
			break
		}
	}
	if two == nil {
		t.Fatal("no test item chose two labels")
	}
	one := filepath.Join(t.TempDir(), "one.jsonl")
	b, _ := json.Marshal(two)
	os.WriteFile(one, append(b, '\n'), 0o644)
	s, _ := openTestStore(t)
	rep, err := s.Publish(bdir, one, Options{Project: "p", RunID: "r", Schemas: []string{"topics"}, CreatedAt: 1})
	if err != nil || rep.NWritten != 1 {
		t.Fatalf("publish %+v %v", rep, err)
	}
	var payload string
	s.db.QueryRow(`SELECT payload FROM training_predictions`).Scan(&payload)
	var entries []struct {
		Label      string  `json:"label"`
		Confidence float64 `json:"confidence"`
	}
	if err := json.Unmarshal([]byte(payload), &entries); err != nil || len(entries) != 2 {
		t.Fatalf("stored %s: %v", payload, err)
	}
	probs := two["probs"].(map[string]any)
	for _, e := range entries {
		if e.Confidence != probs[e.Label].(float64) {
			t.Errorf("%s: stored confidence %v, its calibrated probability %v", e.Label, e.Confidence, probs[e.Label])
		}
	}
	if entries[0].Confidence == entries[1].Confidence {
		t.Errorf("both labels carry %v", entries[0].Confidence)
	}
}

// Probs that are not probabilities are refused like a bad confidence.
func TestPublishRefusesBadProbs(t *testing.T) {
	s, _ := openTestStore(t)
	bdir := withManifest(t, testBundle(t))
	path := filepath.Join(t.TempDir(), "p.jsonl")
	writeLines(t, path,
		probPred{"v1", "sentiment", label("pos", 0.6), conf(0.6), map[string]float64{"pos": 1.5, "neg": 0}},
		`{"instance_id":"v2","schema_name":"sentiment","payload":{"label":"pos"},"probs":[0.5]}`,
		probPred{"v3", "sentiment", label("pos", 0.6), conf(0.6), map[string]float64{"pos": 0.6, "neg": 0.4}})
	rep, err := s.Publish(bdir, path, Options{Project: "p", RunID: "r", Schemas: []string{"sentiment"}, CreatedAt: 1})
	if err != nil || rep.NWritten != 1 || !reflect.DeepEqual(rep.RefusedBy, map[string]int{RefusedConfidence: 2}) {
		t.Fatalf("report %+v %v", rep, err)
	}
	if !strings.Contains(rep.FirstRefused, `the probability of "pos" is not a number in [0, 1]`) {
		t.Errorf("first refused: %q", rep.FirstRefused)
	}
}

// A val split the model gets all right does not drive the confidences to
// 1: the fit's targets are smoothed, so the temperature stays off its
// bound and a calibrated confidence stays below 1.
func TestCalibrateAllRightStaysBelowOne(t *testing.T) {
	bdir := simBundle(t, sentiment3, 60, 20, func(string, int) any { return "pos" })
	var lines []any
	for _, split := range []string{"val", "test"} {
		for i := range map[string]int{"val": 60, "test": 20}[split] {
			lines = append(lines, pred{fmt.Sprintf("%s%d", split, i), "sentiment", label("pos", 0.95), conf(0.95)})
		}
	}
	path := filepath.Join(bdir, "predictions.jsonl")
	writeLines(t, path, lines...)
	cals, err := Calibrate(bdir, path, []bundle.Schema{sentiment3})
	if err != nil {
		t.Fatal(err)
	}
	c := cals["sentiment"]
	if c.Method != rundir.CalibrationTopLabelTemperature || c.Temperature <= 1/maxBeta*1.01 {
		t.Fatalf("calibration %+v", c)
	}
	for _, p := range readPreds(t, path) {
		if cf := p["confidence"].(float64); cf <= 0.95 || cf > 0.995 {
			t.Fatalf("all right at 0.95: calibrated to %v, want above 0.95 and at most 0.995 (61.5 of 62, smoothed)", cf)
		}
	}
}

// The rewrite splices a line: keys it does not know stay, white space
// too; a line without a confidence gets one; probs keep their order and
// keys as written.
func TestCalibrateLineSplice(t *testing.T) {
	rw := &lineRewriter{kind: config.KindNominal, beta: 0.5, withProbs: true}
	line := []byte(`{"instance_id": "a\"b", "schema_name":"s","payload":{"label":"n\u00e9g"},"extra":[1,{"confidence":2}], "probs":{"pos":0.2, "n\u00e9g":0.8} }`)
	raw := make([][]byte, len(calKeys))
	if err := scanObject(line, calKeys, raw); err != nil {
		t.Fatal(err)
	}
	out, changed, err := rw.rewrite(line, raw)
	if err != nil || !changed {
		t.Fatalf("%s %v %v", out, changed, err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	want := math.Sqrt(0.8) / (math.Sqrt(0.8) + math.Sqrt(0.2))
	probs := got["probs"].(map[string]any)
	if got["instance_id"] != `a"b` || math.Abs(got["confidence"].(float64)-want) > 1e-12 || got["uncalibrated_confidence"] != nil ||
		math.Abs(probs["nég"].(float64)-want) > 1e-12 || math.Abs(probs["pos"].(float64)-(1-want)) > 1e-12 ||
		!reflect.DeepEqual(got["extra"], []any{1.0, map[string]any{"confidence": 2.0}}) || !bytes.Contains(out, []byte(`"probs":{"pos":`)) {
		t.Errorf("rewritten: %s", out)
	}
}
