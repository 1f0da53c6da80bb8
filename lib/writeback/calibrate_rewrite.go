package writeback

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"potato-training/lib/atomicfile"
	"potato-training/lib/config"
	"potato-training/lib/jsonscan"
	"potato-training/lib/rundir"
)

// rewriteCalibrated rewrites the predictions file with the calibrated
// confidences of the schemas in betas (inverse temperatures), in its place
// (atomicfile, with the file's own mode). It returns the lines rewritten
// by schema.
func rewriteCalibrated(path string, cs map[string]*calSchema, betas map[string]float64, methods map[string]string) (map[string]int, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	f, err := atomicfile.Create(path, st.Mode().Perm())
	if err != nil {
		return nil, err
	}
	defer f.Abort()
	w := bufio.NewWriterSize(f, 256<<10)
	// One set of rewriters and counts a goroutine of mapLines.
	var mu sync.Mutex
	var counts []map[string]int
	err = mapLines(path, runtime.GOMAXPROCS(0), w, func() func(line, dst []byte) ([]byte, error) {
		n := map[string]int{}
		mu.Lock()
		counts = append(counts, n)
		mu.Unlock()
		raw := make([][]byte, len(calKeys))
		rws := map[string]*lineRewriter{}
		for name, beta := range betas {
			rws[name] = &lineRewriter{kind: cs[name].s.Kind, beta: beta, withProbs: methods[name] == rundir.CalibrationTemperature}
		}
		return func(line, dst []byte) ([]byte, error) {
			if err := scanObject(line, calKeys, raw); err != nil {
				return dst, err
			}
			schema, _ := stringValue(raw[1], "schema_name")
			if rw, ok := rws[schema]; ok {
				out, changed, err := rw.rewrite(line, raw)
				if err != nil {
					return dst, err
				}
				if changed {
					n[schema]++
					line = out
				}
			}
			return append(append(dst, line...), '\n'), nil
		}
	})
	if err != nil {
		return nil, err
	}
	n := map[string]int{}
	for _, c := range counts {
		for k, v := range c {
			n[k] += v
		}
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	if err := f.Commit(); err != nil {
		return nil, err
	}
	return n, nil
}

// lineRewriter calibrates prediction lines, reusing its buffers from
// line to line: a line is spliced, its confidence, its payload's and its
// probs replaced where they are and uncalibrated_confidence added, not
// decoded and encoded again.
type lineRewriter struct {
	kind      config.Kind
	beta      float64
	withProbs bool
	pv        [][]byte // the payload's label and confidence
	entries   []probEntry
	probs     []byte
	out       []byte
	edits     []edit
}

// edit replaces line[start:end] with text.
type edit struct {
	start, end int
	text       []byte
}

// rewrite is a prediction line with its confidences calibrated; changed
// is false for one that has nothing to calibrate (no probs under
// temperature scaling, no confidence under top-label scaling, probs
// without the chosen label). raw are the line's values of calKeys, which
// point into line. The result is valid until the next call.
func (rw *lineRewriter) rewrite(line []byte, raw [][]byte) ([]byte, bool, error) {
	var conf float64
	hasConf := false
	if v, ok, err := (&predLine{raw: [5][]byte{3: raw[3]}}).confidence(); err == nil && ok && v >= 0 && v <= 1 {
		conf, hasConf = v, true
	}
	if rw.pv == nil {
		rw.pv = make([][]byte, len(payloadKeys))
	}
	clear(rw.pv)
	if len(raw[2]) > 0 && raw[2][0] == '{' {
		if err := scanObject(raw[2], payloadKeys, rw.pv); err != nil {
			return nil, false, err
		}
	}
	var newConf float64
	rw.probs = rw.probs[:0]
	switch {
	case rw.withProbs:
		var err error
		if rw.entries, err = scanProbs(raw[4], rw.entries); err != nil || len(rw.entries) == 0 {
			return line, false, nil
		}
		var label []byte
		if l := rw.pv[0]; len(l) > 1 && l[0] == '"' && bytes.IndexByte(l, '\\') < 0 {
			label = l[1 : len(l)-1]
		} else {
			label = []byte(labelOf(raw[2]))
		}
		var ok bool
		if newConf, ok = rw.calibrateProbs(label); !ok {
			return line, false, nil
		}
	case hasConf:
		newConf = sigmoid(rw.beta * logit(conf))
	default:
		return line, false, nil
	}
	off := func(sub []byte) int { return cap(line) - cap(sub) }
	rw.edits = rw.edits[:0]
	add := func(sub, text []byte) {
		rw.edits = append(rw.edits, edit{off(sub), off(sub) + len(sub), text})
	}
	c := strconv.AppendFloat(nil, newConf, 'g', -1, 64)
	if raw[3] != nil {
		add(raw[3], c)
	}
	if rw.pv[1] != nil {
		add(rw.pv[1], c)
	}
	if rw.withProbs {
		add(raw[4], rw.probs)
	}
	tail := []byte(`,"uncalibrated_confidence":`)
	if hasConf {
		tail = append(tail, raw[3]...)
	} else {
		tail = append(tail, "null"...)
	}
	if raw[3] == nil {
		tail = append(append(tail, `,"confidence":`...), c...)
	}
	end := bytes.LastIndexByte(line, '}')
	rw.edits = append(rw.edits, edit{end, end, tail})
	slices.SortFunc(rw.edits, func(a, b edit) int { return a.start - b.start })
	rw.out = rw.out[:0]
	at := 0
	for _, e := range rw.edits {
		rw.out = append(append(rw.out, line[at:e.start]...), e.text...)
		at = e.end
	}
	rw.out = append(rw.out, line[at:]...)
	return rw.out, true, nil
}

// calibrateProbs writes the calibrated probs of rw.entries into rw.probs
// and returns the calibrated confidence of the choice label makes: a
// nominal label's probability, or the lowest, over the labels, of the
// probability of the choice made for it (label: names joined by "|").
// ok is false for a nominal label that probs lacks.
func (rw *lineRewriter) calibrateProbs(label []byte) (conf float64, ok bool) {
	es := rw.entries
	if rw.kind == config.KindMultilabel {
		conf, ok = 1, true
		for k := range es {
			es[k].p = sigmoid(rw.beta * logit(es[k].p))
			p := es[k].p
			if !hasName(label, jsonscan.KeyText(es[k].key)) {
				p = 1 - p
			}
			conf = min(conf, p)
		}
	} else {
		m := math.Inf(-1)
		for k := range es {
			es[k].p = rw.beta * math.Log(max(es[k].p, 1e-12))
			m = max(m, es[k].p)
		}
		var sum float64
		for k := range es {
			es[k].p = math.Exp(es[k].p - m)
			sum += es[k].p
		}
		for k := range es {
			es[k].p /= sum
			if !ok && bytes.Equal(jsonscan.KeyText(es[k].key), label) {
				conf, ok = es[k].p, true
			}
		}
	}
	rw.probs = append(rw.probs, '{')
	for k, e := range es {
		if k > 0 {
			rw.probs = append(rw.probs, ',')
		}
		rw.probs = append(append(rw.probs, e.key...), ':')
		rw.probs = strconv.AppendFloat(rw.probs, e.p, 'g', -1, 64)
	}
	rw.probs = append(rw.probs, '}')
	return conf, ok
}

// hasName says whether a multilabel label, names joined by "|", holds
// name.
func hasName(label, name []byte) bool {
	for part := range bytes.SplitSeq(label, []byte("|")) {
		if bytes.Equal(part, name) {
			return true
		}
	}
	return false
}

// probEntry is one label of a probs object: its key as written (quoted,
// escapes kept) and its probability.
type probEntry struct {
	key []byte
	p   float64
}

var errProbs = errors.New("probs is not an object of each label's probability")

// scanProbs reads a probs object into entries (reused), in its order: an
// object whose every value is a number in [0, 1]. raw is valid JSON
// (scanObject has checked its line); a key that repeats comes twice.
func scanProbs(raw []byte, entries []probEntry) ([]probEntry, error) {
	entries = entries[:0]
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errProbs
	}
	white := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	space := func(i int) int {
		for i < len(raw) && white(raw[i]) {
			i++
		}
		return i
	}
	for i := 1; ; {
		i = space(i)
		switch {
		case i >= len(raw):
			return nil, errProbs
		case raw[i] == '}':
			return entries, nil
		case raw[i] == ',':
			i++
			continue
		case raw[i] != '"':
			return nil, errProbs
		}
		k0 := i
		for i++; i < len(raw) && raw[i] != '"'; i++ {
			if raw[i] == '\\' {
				i++
			}
		}
		i++
		if i > len(raw) {
			return nil, errProbs
		}
		key := raw[k0:i]
		i = space(i)
		if i >= len(raw) || raw[i] != ':' {
			return nil, errProbs
		}
		i = space(i + 1)
		v0 := i
		for i < len(raw) && raw[i] != ',' && raw[i] != '}' && !white(raw[i]) {
			i++
		}
		v := raw[v0:i]
		if len(v) == 0 || v[0] != '-' && (v[0] < '0' || v[0] > '9') {
			return nil, fmt.Errorf("the probability of %q is not a number in [0, 1]", clip(string(jsonscan.KeyText(key))))
		}
		p, err := strconv.ParseFloat(string(v), 64)
		if err != nil || p < 0 || p > 1 {
			return nil, fmt.Errorf("the probability of %q is not a number in [0, 1]", clip(string(jsonscan.KeyText(key))))
		}
		entries = append(entries, probEntry{key, p})
	}
}

// checkProbs checks the line's probs: absent, null, or an object of
// numbers in [0, 1].
func (p *predLine) checkProbs() error {
	raw := p.raw[4]
	if raw == nil || string(raw) == "null" {
		return nil
	}
	var err error
	p.probs, err = scanProbs(raw, p.probs)
	return err
}

// probsOf decodes a prediction's probs: an object of each label's
// probability, numbers in [0, 1]; nil when absent or null.
func probsOf(raw []byte) (map[string]float64, error) {
	if raw == nil || string(raw) == "null" {
		return nil, nil
	}
	entries, err := scanProbs(raw, nil)
	if err != nil {
		return nil, err
	}
	out := make(map[string]float64, len(entries))
	for _, e := range entries {
		out[string(jsonscan.KeyText(e.key))] = e.p
	}
	return out, nil
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
