package writeback

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"potato-training/lib/config"
	"potato-training/lib/jsonscan"
)

// MaxPayload bounds a prelabel's payload, in bytes, as the prediction
// has it and as the store would hold it. A classification prelabel is a
// label or a few and a confidence; a payload larger than this is not one,
// and every row is read by Potato at each start.
const MaxPayload = 64 << 10

// prelabelKeys are the keys of a prelabel's objects, the payload's and
// those of the entries of a list in it (FORMATS.md, "Predictions"):
// Potato 2.12 reads a label name from label and shows confidence. A
// payload with any other key is refused rather than stored.
var prelabelKeys = map[string]bool{"label": true, "confidence": true}

// payloadKeys are prelabelKeys in the order refusal scans them.
var payloadKeys = []string{"label", "confidence"}

// The reasons a prediction is refused, the keys of Report.RefusedBy.
const (
	RefusedItem       = "item"       // its instance_id is not an item of the bundle
	RefusedSchema     = "schema"     // its schema_name is not a schema of the bundle
	RefusedLabel      = "label"      // its payload names no label of the schema
	RefusedConfidence = "confidence" // a confidence that is not a number in [0, 1]
	RefusedSize       = "size"       // a payload over MaxPayload
	RefusedKeys       = "keys"       // a payload with keys a prelabel does not have
)

// refusedWords says each reason in the run log, in the order it counts them.
var refusedWords = []struct{ reason, words string }{
	{RefusedItem, "naming no item of the bundle"},
	{RefusedSchema, "naming no schema of the bundle"},
	{RefusedLabel, "naming no label of its schema"},
	{RefusedConfidence, "with a confidence not in [0, 1]"},
	{RefusedSize, "with a payload over 64 KiB"},
	{RefusedKeys, "with keys a prelabel does not have"},
}

// PredictionRules says what a prediction must be to be stored, as the run
// log words it.
const PredictionRules = "each must name an item of the bundle and a label of its schema, with a confidence in [0, 1] or none, " +
	"in a payload of at most 64 KiB with no keys but label and confidence"

// maxNamedRefusals is how many refused predictions a Report names: enough
// to see what a trainer got wrong, few enough for one line of a log.
const maxNamedRefusals = 5

// refuse counts the prediction on line n as refused for reason, and names
// it if it is among the first.
func (r *Report) refuse(n int, reason, why string) {
	r.NRefused++
	if r.RefusedBy == nil {
		r.RefusedBy = map[string]int{}
	}
	r.RefusedBy[reason]++
	if len(r.Refusals) < maxNamedRefusals {
		r.Refusals = append(r.Refusals, fmt.Sprintf("line %d: %s", n, why))
		r.FirstRefused = r.Refusals[0]
	}
}

// RefusedSummary says, in one line for the run log, how many predictions
// were refused and for what, what a prediction must be, and the first
// refused ones with their line numbers; "" when none was.
func (r Report) RefusedSummary() string {
	if r.NRefused == 0 {
		return ""
	}
	var counts []string
	for _, w := range refusedWords {
		if n := r.RefusedBy[w.reason]; n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", n, w.words))
		}
	}
	s := fmt.Sprintf("%d predictions refused (%s): %s; ", r.NRefused, strings.Join(counts, ", "), PredictionRules)
	if r.NRefused > len(r.Refusals) {
		s += fmt.Sprintf("the first %d, ", len(r.Refusals))
	}
	return s + strings.Join(r.Refusals, "; ")
}

// tooLarge says that p's payload, of n bytes, is over MaxPayload.
func tooLarge(p *predLine, n int) string {
	return fmt.Sprintf("the payload of %q %q is %d bytes, over the 64 KiB a prelabel may have", clip(p.schema), clip(p.id), n)
}

// clip shortens a value from a predictions file for a message, which
// names a prediction and should not carry what it holds.
func clip(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	i := most
	for i > 0 && s[i]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		i--
	}
	return s[:i] + "..."
}

// refusal says why p breaks the rules: the reason, one of the Refused*
// constants, and a sentence that names the prediction; "" when it keeps
// them.
func (r predRules) refusal(p *predLine) (reason, why string) {
	if !r.items.has(p.id) {
		return RefusedItem, fmt.Sprintf("%q is not an item of the bundle", clip(p.id))
	}
	// name is the prediction in a message, made only for one.
	name := func() string { return fmt.Sprintf("%q %q", clip(p.schema), clip(p.id)) }
	if _, _, err := p.confidence(); err != nil || !unitOrNull(p.raw[3]) {
		return RefusedConfidence, fmt.Sprintf("the confidence of %s is not a number in [0, 1]", name())
	}
	if err := p.checkProbs(); err != nil {
		return RefusedConfidence, fmt.Sprintf("the probs of %s: %v", name(), err)
	}
	sc, known := r.schemas[p.schema]
	if r.schemas != nil && !known {
		return RefusedSchema, fmt.Sprintf("%q is not a schema of the bundle", clip(p.schema))
	}
	raw := p.raw[2]
	if raw == nil || string(raw) == "null" {
		return RefusedLabel, fmt.Sprintf("the payload of %s names no label", name())
	}
	if len(raw) > MaxPayload {
		return RefusedSize, tooLarge(p, len(raw))
	}
	if known && sc.Kind == config.KindSpan {
		return spanRefusal(raw, sc, name)
	}
	// Potato reads label and confidence of the payload, and of each
	// entry of a list that is the payload or its label; a key beside them
	// is stored for nothing, and Go's decoder would match "Label" to label
	// where Potato does not.
	object := func(raw []byte) (label json.RawMessage, reason, why string) {
		// A million predictions have payloads of label and confidence
		// alone: jsonscan finds those without a map a line. Any other key
		// takes the long way, for the message that names it.
		vals := [2][]byte{}
		if others, err := jsonscan.ObjectOthers(raw, payloadKeys, vals[:], maxDepth); err == nil && others == 0 {
			if !unitOrNull(vals[1]) {
				return nil, RefusedConfidence, fmt.Sprintf("the payload's confidence of %s is not a number in [0, 1]", name())
			}
			return vals[0], "", ""
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return nil, RefusedLabel, fmt.Sprintf("the payload of %s names no label", name())
		}
		var stray []string
		for k := range obj {
			if !prelabelKeys[k] {
				stray = append(stray, k)
			}
		}
		if len(stray) > 0 {
			return nil, RefusedKeys, fmt.Sprintf("the payload of %s has the key %q, which a prelabel does not have (only label and confidence)", name(), clip(slices.Min(stray)))
		}
		if !unitOrNull(obj["confidence"]) {
			return nil, RefusedConfidence, fmt.Sprintf("the payload's confidence of %s is not a number in [0, 1]", name())
		}
		return obj["label"], "", ""
	}
	label := json.RawMessage(raw)
	if raw[0] == '{' {
		var reason, why string
		if label, reason, why = object(raw); reason != "" {
			return reason, why
		}
		if label == nil {
			return RefusedLabel, fmt.Sprintf("the payload of %s names no label", name())
		}
	}
	var list []json.RawMessage
	if label[0] == '[' && json.Unmarshal(label, &list) == nil {
		for _, e := range list {
			if e[0] == '{' {
				if _, reason, why := object(e); reason != "" {
					return reason, why
				}
			}
		}
	}
	if r.schemas == nil {
		return "", ""
	}
	names, ok := labelNames(sc.Kind, label)
	if !ok {
		return RefusedLabel, fmt.Sprintf("the payload of %s is not a label of a %s schema", name(), sc.Kind)
	}
	for _, n := range names {
		if !slices.Contains(sc.Labels, n) {
			return RefusedLabel, fmt.Sprintf("%q is not a label of %q", clip(n), p.schema)
		}
	}
	return "", ""
}

// unitOrNull says whether raw JSON is absent, null, or a number in [0, 1].
// raw is a value the JSON scanner has checked (scanObject, jsonscan,
// encoding/json): one that starts as a number is a JSON number, which
// ParseFloat reads as encoding/json does, at a fraction of its cost.
func unitOrNull(raw json.RawMessage) bool {
	if raw == nil || string(raw) == "null" {
		return true
	}
	if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return false
	}
	c, err := strconv.ParseFloat(string(raw), 64)
	return err == nil && c >= 0 && c <= 1
}
