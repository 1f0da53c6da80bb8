package trainer

import (
	"math"
	"strings"

	"potato-training/lib/trainer/hf"
)

// hfParams are hf-text-classification's, declared once in the trainer's
// own table (hf.ParamsFile), which its script reads too and checks values
// against; only the model's check, code, is added here.
var hfParams = func() Params {
	var out Params
	for _, r := range hf.Params() {
		p := Param{Name: r.Name, Kind: r.Kind, Default: r.Default, DefaultNote: r.DefaultNote, Choices: r.Choices, Help: r.Help}
		if r.Min != nil || r.Max != nil {
			p.Range = &Range{Min: math.Inf(-1), Max: math.Inf(1), MinOpen: r.MinOpen, MaxOpen: r.MaxOpen}
			if r.Min != nil {
				p.Range.Min = *r.Min
			}
			if r.Max != nil {
				p.Range.Max = *r.Max
			}
		}
		if p.Name == "model" {
			p.Check = hfModel
		}
		out = append(out, p)
	}
	return out
}()

// hfModel refuses a builtin: model the script does not have.
func hfModel(v string) string {
	if strings.HasPrefix(v, "builtin:") && v != "builtin:ngram" {
		return "a directory, a model name or one of builtin:ngram"
	}
	return ""
}
