package writeback

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/rundir"
)

// MinCalibrationItems is the fewest val items, with a gold label and a
// prediction with a confidence, a schema's confidences are calibrated on:
// below it one temperature is fitted to noise.
const MinCalibrationItems = 30

// ReliabilityBins is the number of equal-width bins of [0, 1] the
// expected calibration error and the reliability diagram use.
const ReliabilityBins = 10

// binning says ReliabilityBins in run.json.
const binning = "10 equal-width bins"

// The inverse temperatures the fit searches, on a log scale.
const minBeta, maxBeta = 0.05, 20.0

// Keys of a prediction the calibration reads. uncalibrated_confidence
// marks a line it has rewritten.
var calKeys = []string{"instance_id", "schema_name", "payload", "confidence", "probs", "uncalibrated_confidence"}

// calRow is one scored prediction: with the trainer's per-label
// probabilities (z is their logits: the log of a nominal schema's
// softmax probabilities, a multilabel schema's sigmoid logits), or only
// its confidence.
type calRow struct {
	z      []float64
	gold   int    // nominal: gold's index in z, -1 when probs lacks it
	pred   int    // nominal: the predicted label's index in z
	golds  []bool // multilabel: gold set holds label k
	chosen []bool // multilabel: the prediction chose label k
	// conf is the line's confidence (else the one probs gives the
	// choice), correct whether the prediction is the gold label.
	conf    float64
	correct bool
}

type calSchema struct {
	s         bundle.Schema
	val, test []calRow
	noProbs   int // val rows without probs
}

// Calibrate calibrates the confidences of the predictions in
// predictionsPath, schema by schema, on the val split of the bundle in
// bundleDir (rundir.Calibration says how), and rewrites the file with the
// calibrated confidences when any schema was calibrated: a line's
// confidence, its payload's, and its probs become the calibrated ones,
// and uncalibrated_confidence keeps the trainer's. Lines of other schemas
// are copied as they are. Nominal, multilabel and ordinal schemas are
// calibrated, an ordinal one as a nominal one over its points (its probs
// are every point's, summing to 1; the predicted point stays). The val and test predictions are held in memory; the
// others are streamed, twice.
//
// A file a calibration has rewritten already (a line has
// uncalibrated_confidence) is left as it is, and so is every schema.
func Calibrate(bundleDir, predictionsPath string, schemas []bundle.Schema) (map[string]rundir.Calibration, error) {
	var scored []bundle.Schema
	for _, s := range schemas {
		if scoredKind(s.Kind) {
			scored = append(scored, s)
		}
	}
	out := map[string]rundir.Calibration{}
	if len(scored) == 0 {
		return out, nil
	}
	gold := map[string]map[string]map[string]string{} // split, schema, item
	for _, split := range []string{"val", "test"} {
		path, _, err := splitPath(bundleDir, split)
		if err != nil {
			return nil, fmt.Errorf("writeback: calibrate: %w", err)
		}
		gold[split] = map[string]map[string]string{}
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if gold[split], err = readGold(path, scored); err != nil {
			return nil, fmt.Errorf("writeback: calibrate: %s split: %w", split, err)
		}
	}
	cs := map[string]*calSchema{}
	for _, s := range scored {
		cs[s.Name] = &calSchema{s: s}
	}
	done := false
	raw := make([][]byte, len(calKeys))
	err := scanLines(predictionsPath, func(line []byte, _ int) error {
		if err := scanObject(line, calKeys, raw); err != nil {
			return err
		}
		if raw[5] != nil {
			done = true
		}
		id, _ := stringValue(raw[0], "instance_id")
		schema, _ := stringValue(raw[1], "schema_name")
		c := cs[schema]
		if c == nil {
			return nil
		}
		for _, split := range []string{"val", "test"} {
			g, ok := gold[split][schema][id]
			if !ok {
				continue
			}
			r, ok := c.row(raw, g)
			if !ok {
				continue
			}
			if split == "val" {
				c.val = append(c.val, r)
				if r.z == nil {
					c.noProbs++
				}
			} else {
				c.test = append(c.test, r)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("writeback: calibrate: %w", err)
	}
	betas := map[string]float64{}
	methods := map[string]string{}
	for _, s := range scored {
		c := cs[s.Name]
		cal := c.fit()
		if done {
			cal = rundir.Calibration{Method: rundir.CalibrationNone, Temperature: 1, NVal: len(c.val), NTest: len(c.test),
				Reason: "the predictions were calibrated before (their lines have uncalibrated_confidence)"}
		}
		c.measure(&cal)
		if cal.Method != rundir.CalibrationNone {
			betas[s.Name], methods[s.Name] = 1/cal.Temperature, cal.Method
		}
		out[s.Name] = cal
	}
	if len(betas) == 0 {
		return out, nil
	}
	n, err := rewriteCalibrated(predictionsPath, cs, betas, methods)
	if err != nil {
		return nil, fmt.Errorf("writeback: calibrate: %w", err)
	}
	for name, k := range n {
		cal := out[name]
		cal.NRewritten = k
		out[name] = cal
	}
	return out, nil
}

// row reads a scored prediction against its gold label g; ok is false
// for one with neither a confidence nor usable probs.
func (c *calSchema) row(raw [][]byte, g string) (calRow, bool) {
	multi := c.s.Kind == config.KindMultilabel
	label := normalLabel(c.s.Kind, labelOf(raw[2]))
	r := calRow{correct: label == normalLabel(c.s.Kind, g), conf: -1}
	if v, ok, err := (&predLine{raw: [5][]byte{3: raw[3]}}).confidence(); err == nil && ok && v >= 0 && v <= 1 {
		r.conf = v
	}
	probs, err := probsOf(raw[4])
	if err == nil && len(probs) > 0 {
		names := slices.Sorted(func(yield func(string) bool) {
			for k := range probs {
				if !yield(k) {
					return
				}
			}
		})
		r.z = make([]float64, len(names))
		if multi {
			gs, ps := labelSet(g), labelSet(label)
			r.golds, r.chosen = make([]bool, len(names)), make([]bool, len(names))
			for k, n := range names {
				r.z[k] = logit(probs[n])
				r.golds[k], r.chosen[k] = gs[n], ps[n]
			}
		} else {
			r.gold, r.pred = slices.Index(names, g), slices.Index(names, label)
			for k, n := range names {
				r.z[k] = math.Log(max(probs[n], 1e-12))
			}
			if r.pred < 0 {
				r.z = nil // probs without the chosen label say nothing of it
			}
		}
	}
	if r.conf < 0 && r.z != nil {
		r.conf = r.calibrated(1, true)
	}
	return r, r.conf >= 0
}

// calibrated is the row's confidence under inverse temperature beta.
// With probs (withProbs, and the row has them): the probability of the
// chosen label (nominal), or the lowest, over the labels, of the
// probability of the choice made for it (multilabel, as the trainers
// define a set's confidence). With its confidence alone: that
// confidence's logit scaled. A row without probs under withProbs keeps
// its confidence, as the rewrite does.
func (r calRow) calibrated(beta float64, withProbs bool) float64 {
	switch {
	case !withProbs:
		return sigmoid(beta * logit(r.conf))
	case r.z == nil:
		return r.conf
	case r.golds == nil:
		return softmax(r.z, beta)[r.pred]
	}
	c := 1.0
	for k, z := range r.z {
		p := sigmoid(beta * z)
		if !r.chosen[k] {
			p = 1 - p
		}
		c = min(c, p)
	}
	return c
}

// fit fits the schema's temperature on its val rows.
func (c *calSchema) fit() rundir.Calibration {
	cal := rundir.Calibration{Method: rundir.CalibrationNone, Temperature: 1, NVal: len(c.val), NTest: len(c.test)}
	switch {
	case len(c.val) < MinCalibrationItems:
		cal.Reason = fmt.Sprintf("%d val items with a gold label and a prediction with a confidence, fewer than %d: left as the trainer gave them", len(c.val), MinCalibrationItems)
		return cal
	case c.noProbs == 0:
		cal.Method = rundir.CalibrationTemperature
	default:
		cal.Method = rundir.CalibrationTopLabelTemperature
	}
	probs := cal.Method == rundir.CalibrationTemperature
	// The targets are smoothed, as Platt's are but by half (Jeffreys'
	// prior rather than Laplace's): a right answer's is (N+ + 0.5)/(N+ + 1),
	// a wrong one's 0.5/(N- + 1), so that a val split the model gets all
	// right does not drive the confidences to 1. Laplace's smoothing
	// softened a well calibrated model measurably on val splits of 75.
	var pos, neg int
	for _, r := range c.val {
		switch {
		case !probs:
			pos, neg = pos+b2i(r.correct), neg+b2i(!r.correct)
		case r.golds != nil:
			for _, y := range r.golds {
				pos, neg = pos+b2i(y), neg+b2i(!y)
			}
		case r.gold >= 0:
			pos++
		}
	}
	hi, lo := (float64(pos)+0.5)/float64(pos+1), 0.5/float64(neg+1)
	if probs && c.s.Kind != config.KindMultilabel {
		lo = 0.5 / float64(pos+1) // spread over the other labels
	}
	cross := func(p float64, y bool) float64 {
		t := lo
		if y {
			t = hi
		}
		return t*math.Log(max(p, 1e-300)) + (1-t)*math.Log(max(1-p, 1e-300))
	}
	nll := func(beta float64) float64 {
		var sum float64
		for _, r := range c.val {
			switch {
			case !probs:
				sum -= cross(sigmoid(beta*logit(r.conf)), r.correct)
			case r.golds != nil:
				for k, z := range r.z {
					sum -= cross(sigmoid(beta*z), r.golds[k])
				}
			case r.gold >= 0:
				ps := softmax(r.z, beta)
				other := lo / float64(max(len(ps)-1, 1))
				for k, p := range ps {
					t := other
					if k == r.gold {
						t = hi
					}
					sum -= t * math.Log(max(p, 1e-300))
				}
			}
		}
		return sum
	}
	cal.Temperature = 1 / goldenMin(nll, math.Log(minBeta), math.Log(maxBeta))
	return cal
}

// measure records the ECE and reliability bins of the test rows, before
// and, when calibrated, after.
func (c *calSchema) measure(cal *rundir.Calibration) {
	cal.Binning = binning
	cal.Unit = "item"
	perLabel := cal.Method == rundir.CalibrationTemperature && c.s.Kind == config.KindMultilabel
	if perLabel {
		cal.Unit = "label_decision"
	}
	if len(c.test) == 0 {
		return
	}
	withProbs := cal.Method == rundir.CalibrationTemperature
	points := func(beta float64) (conf []float64, right []bool) {
		for _, r := range c.test {
			if perLabel && r.z != nil {
				for k, z := range r.z {
					p := sigmoid(beta * z)
					if !r.chosen[k] {
						p = 1 - p
					}
					conf, right = append(conf, p), append(right, r.chosen[k] == r.golds[k])
				}
				continue
			}
			conf, right = append(conf, r.calibrated(beta, withProbs)), append(right, r.correct)
		}
		return conf, right
	}
	if perLabel {
		// Before is the trainer's own probabilities.
		cal.ECEBefore, cal.Before = ece(points(1))
	} else {
		conf := make([]float64, len(c.test))
		right := make([]bool, len(c.test))
		for i, r := range c.test {
			conf[i], right[i] = r.conf, r.correct
		}
		cal.ECEBefore, cal.Before = ece(conf, right)
	}
	if cal.Method != rundir.CalibrationNone {
		cal.ECEAfter, cal.After = ece(points(1 / cal.Temperature))
	}
}

// ece is the expected calibration error of confidences against whether
// each was right, over ReliabilityBins equal-width bins, and the bins
// that hold any.
func ece(conf []float64, right []bool) (*float64, []rundir.ReliabilityBin) {
	if len(conf) == 0 {
		return nil, nil
	}
	var sumC, sumA [ReliabilityBins]float64
	var n [ReliabilityBins]int
	for i, c := range conf {
		b := min(int(c*ReliabilityBins), ReliabilityBins-1)
		b = max(b, 0)
		sumC[b] += c
		if right[i] {
			sumA[b]++
		}
		n[b]++
	}
	var e float64
	var bins []rundir.ReliabilityBin
	for b := range ReliabilityBins {
		if n[b] == 0 {
			continue
		}
		mc, ma := sumC[b]/float64(n[b]), sumA[b]/float64(n[b])
		e += float64(n[b]) / float64(len(conf)) * math.Abs(mc-ma)
		bins = append(bins, rundir.ReliabilityBin{Lo: float64(b) / ReliabilityBins, Hi: float64(b+1) / ReliabilityBins,
			Confidence: mc, Accuracy: ma, N: n[b]})
	}
	return &e, bins
}

// goldenMin is the beta in [e^lo, e^hi] that minimises f, searched by
// golden section on log beta: the negative log-likelihood of temperature
// scaling is convex in beta, so unimodal on its log.
func goldenMin(f func(float64) float64, lo, hi float64) float64 {
	g := (math.Sqrt(5) - 1) / 2
	a, b := lo, hi
	c, d := b-g*(b-a), a+g*(b-a)
	fc, fd := f(math.Exp(c)), f(math.Exp(d))
	for range 80 {
		if fc < fd {
			b, d, fd = d, c, fc
			c = b - g*(b-a)
			fc = f(math.Exp(c))
		} else {
			a, c, fc = c, d, fd
			d = a + g*(b-a)
			fd = f(math.Exp(d))
		}
	}
	return math.Exp((a + b) / 2)
}

// CalibrationNote is the run log's line on one schema's calibration.
func CalibrationNote(schema string, c rundir.Calibration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "calibration of %s: ", schema)
	if c.Method == rundir.CalibrationNone {
		b.WriteString("none: " + c.Reason)
	} else {
		what := "temperature scaling"
		if c.Method == rundir.CalibrationTopLabelTemperature {
			what = "temperature scaling of the top label (the trainer wrote no probs)"
		}
		fmt.Fprintf(&b, "%s, T %.3f fitted on %d val items", what, c.Temperature, c.NVal)
	}
	if c.ECEBefore != nil {
		fmt.Fprintf(&b, "; expected calibration error on %d test items %.3f", c.NTest, *c.ECEBefore)
		if c.ECEAfter != nil {
			fmt.Fprintf(&b, " before, %.3f after", *c.ECEAfter)
		}
	}
	return b.String()
}
