package bundle

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"potato-training/lib/config"
)

// Ordinal is whether s is learnt as an ordered scale (a likert schema).
func (s Schema) Ordinal() bool { return s.Kind == config.KindOrdinal }

// Point places an ordinal target or predicted label on the scale labels
// (an ordinal schema's Labels, in order): the index of the label it names.
// A string names a label by its name, or, failing that, by its number
// ("3.0" is the point "3"); a number ({"3": "3"} reads as 3) names the
// label of that number. ok is false for anything not on the scale.
func Point(labels []string, v any) (int, bool) {
	var f float64
	switch x := v.(type) {
	case string:
		if i := slices.Index(labels, x); i >= 0 {
			return i, true
		}
		g, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, false
		}
		f = g
	case float64:
		f = x
	case json.Number:
		g, err := x.Float64()
		if err != nil {
			return 0, false
		}
		f = g
	case int:
		f = float64(x)
	default:
		return 0, false
	}
	for i, l := range labels {
		if g, err := strconv.ParseFloat(strings.TrimSpace(l), 64); err == nil && g == f {
			return i, true
		}
	}
	return 0, false
}

// ObservedScale is the scale of an ordinal schema configured without
// labels or size: the distinct numbers of targets, in increasing order,
// written as strconv's shortest form.
func ObservedScale(targets []any) []string {
	var fs []float64
	for _, t := range targets {
		var f float64
		switch x := t.(type) {
		case float64:
			f = x
		case json.Number:
			g, err := x.Float64()
			if err != nil {
				continue
			}
			f = g
		case string:
			g, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
			if err != nil {
				continue
			}
			f = g
		default:
			continue
		}
		fs = append(fs, f)
	}
	slices.Sort(fs)
	fs = slices.Compact(fs)
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return out
}
