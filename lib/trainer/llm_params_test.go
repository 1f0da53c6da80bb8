package trainer

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"potato-training/lib/trainer/hf"
)

// The parameters potato_hf/llm.py's table gives hf-llm-classification and
// those the Go declaration has agree: every declared name is in the table
// with the same kind and default, the table's others are the shared
// loop's that the declaration leaves out, and parse_params accepts
// exactly the probe values of the trainer's own parameters that Go
// accepts. Debian's python3 imports the package without torch.
func TestLLMParamsAgree(t *testing.T) {
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skip("no /usr/bin/python3 on this machine")
	}
	ps := Trainers[hf.LLMName].Params
	left := []string{"attention_dropout", "buckets", "char_ngrams", "embed_dim", "word_ngrams"}
	probes := map[string][]string{
		"quantize":               {"none", "4bit", "8bit", "2bit", ""},
		"mode":                   {"fine-tune", "zero-shot", "few-shot"},
		"grad_accum":             {"0", "1", "4", "-1", "x"},
		"gradient_checkpointing": {"true", "off", "maybe"},
		"model":                  {"builtin:ngram", "/models/x.gguf", "org/name"},
	}
	var pairs [][2]string
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range probes {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, v := range probes[name] {
			pairs = append(pairs, [2]string{name, v})
		}
	}
	got := pythonParams(t, python, `from potato_hf import llm
llm.install()
from potato_hf import spec as m`, pairs)
	table := map[string][2]any{}
	for _, row := range got.Params {
		table[row[0].(string)] = [2]any{row[1], row[2]}
	}
	for _, p := range ps {
		row, ok := table[p.Name]
		if !ok {
			t.Errorf("%s is declared in Go, not in the script's table", p.Name)
			continue
		}
		delete(table, p.Name)
		if row[0] != p.Kind {
			t.Errorf("%s: kind %v in the script, %s in Go", p.Name, row[0], p.Kind)
		}
		def := row[1]
		if def == nil || def == "" {
			if p.Default != "" {
				t.Errorf("%s: the script has no default; Go has %q", p.Name, p.Default)
			}
			continue
		}
		x, err := p.Parse(p.Default)
		if err != nil || fmt.Sprint(x) != fmt.Sprint(def) {
			t.Errorf("%s: default %v in the script, %q in Go (%v)", p.Name, def, p.Default, err)
		}
	}
	var rest []string
	for k := range table {
		rest = append(rest, k)
	}
	slices.Sort(rest)
	if !slices.Equal(rest, left) {
		t.Errorf("the script's table has %q beyond the Go declaration; want %q", rest, left)
	}
	if len(got.Accepted) != len(pairs) {
		t.Fatalf("%d answers for %d probes", len(got.Accepted), len(pairs))
	}
	for i, pr := range pairs {
		p, _ := ps.Lookup(pr[0])
		_, err := p.Parse(pr[1])
		if pr[1] == "" {
			err = nil // an empty value is the default, in both
		}
		if goOK := err == nil; goOK != got.Accepted[i] {
			t.Errorf("%s=%q: the script accepts it: %v; Go: %v", pr[0], pr[1], got.Accepted[i], err)
		}
	}
}
