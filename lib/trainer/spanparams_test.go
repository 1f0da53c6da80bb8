package trainer

import (
	"reflect"
	"testing"
)

// TestHFSpanParams: hf-span's parameters are hf-text-classification's
// that a token classifier reads, of the same kinds and ranges (its script
// parses them with the same parse_params), with max_length and stride its
// own; a builtin: model is refused.
func TestHFSpanParams(t *testing.T) {
	i, ok := Lookup("hf-span")
	if !ok || !reflect.DeepEqual(i.Kinds, []string{"span"}) || !i.GPU || !i.Curve {
		t.Fatalf("hf-span in the registry: %+v, %v", i, ok)
	}
	for _, p := range i.Params {
		switch p.Name {
		case "max_length", "stride":
			continue
		}
		q, ok := hfParams.Lookup(p.Name)
		if !ok {
			t.Errorf("hf-span's %s is not a parameter of hf-text-classification", p.Name)
			continue
		}
		if p.Name == "lora" {
			// LoRA by default whatever the size, where hf-text-
			// classification chooses by the size (no default).
			if p.Kind != q.Kind || p.Default != "true" || q.Default != "" {
				t.Errorf("hf-span's lora is %s default %q, hf-text-classification's %s default %q; want true and none", p.Kind, p.Default, q.Kind, q.Default)
			}
			continue
		}
		if p.Kind != q.Kind || !reflect.DeepEqual(p.Range, q.Range) || p.Default != q.Default {
			t.Errorf("hf-span's %s is %s %v default %q; hf-text-classification's %s %v %q", p.Name, p.Kind, p.Range, p.Default, q.Kind, q.Range, q.Default)
		}
	}
	if _, ok := i.Params.Lookup("stride"); !ok {
		t.Error("hf-span has no stride")
	}
	if err := CheckParams("hf-span", map[string]string{"model": "builtin:ngram"}); err == nil {
		t.Error("hf-span took model=builtin:ngram")
	}
	if err := CheckParams("hf-span", map[string]string{"stride": "-1"}); err == nil {
		t.Error("hf-span took stride=-1")
	}
	if err := CheckParams("hf-span", map[string]string{"threshold": "0.5"}); err == nil {
		t.Error("hf-span took threshold, a parameter it does not read")
	}
}
