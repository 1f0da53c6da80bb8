package report

import (
	"encoding/json"
	"fmt"
	"slices"

	"potato-training/lib/project"
)

// A span schema's prelabel is a list of spans, {start, end, label,
// confidence} (potato-agent(1), THE HF-SPAN TRAINER): Explain gives each
// as LABEL START-END (characters [START, END) of the item's text), in the
// payload's order, and an annotator's answer is the prelabel when their
// spans are its spans: the same characters and labels, in any order.

type spanOf struct {
	Start int    `json:"start"`
	End   int    `json:"end"`
	Label string `json:"label"`
}

// prelabelSpans reads a span prelabel's spans; ok is false for a payload
// that is not a list of spans.
func prelabelSpans(payload []byte) (spans []spanOf, ok bool) {
	if json.Unmarshal(payload, &spans) != nil {
		return nil, false
	}
	return spans, true
}

// spanLabels are a span prelabel's spans as Explain words them.
func spanLabels(payload []byte) ([]string, bool) {
	spans, ok := prelabelSpans(payload)
	if !ok {
		return nil, false
	}
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = fmt.Sprintf("%s %d-%d", s.Label, s.Start, s.End)
	}
	return out, true
}

// spansAccepted says whether an annotator's spans (a vote's target) are
// the prelabel's; ok is false when either is not a list of spans.
func spansAccepted(target any, payload []byte) (same, ok bool) {
	pre, ok := prelabelSpans(payload)
	if !ok {
		return false, false
	}
	var mine []spanOf
	switch t := target.(type) {
	case []project.Span:
		for _, s := range t {
			mine = append(mine, spanOf{s.Start, s.End, s.Name})
		}
	case nil:
	default:
		return false, false
	}
	key := func(s spanOf) string { return fmt.Sprintf("%d:%d:%s", s.Start, s.End, s.Label) }
	a, b := make([]string, len(pre)), make([]string, len(mine))
	for i, s := range pre {
		a[i] = key(s)
	}
	for i, s := range mine {
		b[i] = key(s)
	}
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b), true
}

// spansText is an annotator's spans as Explain words a prelabel's.
func spansText(spans []project.Span) string {
	if len(spans) == 0 {
		return "no span"
	}
	out := ""
	for i, s := range spans {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s %d-%d", s.Name, s.Start, s.End)
	}
	return out
}
