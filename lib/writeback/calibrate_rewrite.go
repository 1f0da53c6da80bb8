package writeback

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"slices"

	"potato-training/lib/config"
	"potato-training/lib/rundir"
)

// rewriteCalibrated rewrites the predictions file with the calibrated
// confidences of the schemas in betas (inverse temperatures), through a
// temporary file renamed over it. It returns the lines rewritten by
// schema.
func rewriteCalibrated(path string, cs map[string]*calSchema, betas map[string]float64, methods map[string]string) (map[string]int, error) {
	tmp := path + ".calibrating"
	f, err := os.Create(tmp)
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp)
	defer f.Close()
	w := bufio.NewWriterSize(f, 256<<10)
	n := map[string]int{}
	raw := make([][]byte, len(calKeys))
	err = scanLines(path, func(line []byte, _ int) error {
		if err := scanObject(line, calKeys, raw); err != nil {
			return err
		}
		schema, _ := stringValue(raw[1], "schema_name")
		beta, ok := betas[schema]
		if ok {
			out, changed, err := calibrateLine(line, raw, cs[schema].s.Kind, beta, methods[schema] == rundir.CalibrationTemperature)
			if err != nil {
				return err
			}
			if changed {
				n[schema]++
				line = out
			}
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		return w.WriteByte('\n')
	})
	if err != nil {
		return nil, err
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return n, os.Rename(tmp, path)
}

// calibrateLine is a prediction line with its confidences calibrated:
// changed is false for one that has nothing to calibrate (no probs under
// temperature scaling, no confidence under top-label scaling).
func calibrateLine(line []byte, raw [][]byte, kind config.Kind, beta float64, withProbs bool) ([]byte, bool, error) {
	var conf float64
	hasConf := false
	if v, ok, err := (&predLine{raw: [5][]byte{3: raw[3]}}).confidence(); err == nil && ok && v >= 0 && v <= 1 {
		conf, hasConf = v, true
	}
	var probs map[string]float64
	if withProbs {
		p, err := probsOf(raw[4])
		if err != nil || len(p) == 0 {
			return line, false, nil
		}
		probs = p
	} else if !hasConf {
		return line, false, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		return nil, false, err
	}
	var newConf float64
	if probs != nil {
		label := labelOf(raw[2])
		names := slices.Sorted(func(yield func(string) bool) {
			for k := range probs {
				if !yield(k) {
					return
				}
			}
		})
		cal := map[string]float64{}
		if kind == config.KindMultilabel {
			chosen := labelSet(label)
			newConf = 1
			for _, n := range names {
				p := sigmoid(beta * logit(probs[n]))
				cal[n] = p
				if !chosen[n] {
					p = 1 - p
				}
				newConf = min(newConf, p)
			}
		} else {
			z := make([]float64, len(names))
			for k, n := range names {
				z[k] = math.Log(max(probs[n], 1e-12))
			}
			ps := softmax(z, beta)
			for k, n := range names {
				cal[n] = ps[k]
			}
			c, ok := cal[label]
			if !ok {
				return line, false, nil
			}
			newConf = c
		}
		obj["probs"] = mustJSON(cal)
	} else {
		newConf = sigmoid(beta * logit(conf))
	}
	if hasConf {
		obj["uncalibrated_confidence"] = raw[3]
	} else {
		obj["uncalibrated_confidence"] = json.RawMessage("null")
	}
	obj["confidence"] = mustJSON(newConf)
	if len(raw[2]) > 0 && raw[2][0] == '{' {
		var payload map[string]json.RawMessage
		if err := json.Unmarshal(raw[2], &payload); err == nil {
			if _, has := payload["confidence"]; has {
				payload["confidence"] = mustJSON(newConf)
				obj["payload"] = mustJSON(payload)
			}
		}
	}
	out, err := json.Marshal(obj)
	return out, err == nil, err
}

func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

// logit of a probability clipped away from 0 and 1.
func logit(p float64) float64 {
	p = min(max(p, 1e-12), 1-1e-12)
	return math.Log(p / (1 - p))
}

// softmax of beta*z.
func softmax(z []float64, beta float64) []float64 {
	m := math.Inf(-1)
	for _, v := range z {
		m = max(m, beta*v)
	}
	out := make([]float64, len(z))
	var sum float64
	for k, v := range z {
		out[k] = math.Exp(beta*v - m)
		sum += out[k]
	}
	for k := range out {
		out[k] /= sum
	}
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
