package writeback

import (
	"fmt"
	"strings"
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
