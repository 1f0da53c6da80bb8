package trainer

import (
	"fmt"
	"os"
	"testing"

	"potato-training/lib/trainer/hf"
)

// embed-logreg's script and its Go declaration agree: the same names,
// kinds and defaults, and the same values accepted and refused.
func TestEmbedParamsAgree(t *testing.T) {
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skip("no /usr/bin/python3 on this machine")
	}
	ps := Trainers[hf.EmbedName].Params
	probes := map[string][]string{
		KindInt:    {"abc", "1.5", "-1", "0", "1", "64", "1e3"},
		KindFloat:  {"abc", "nan", "inf", "-0.5", "0", "0.1", "0.5", "1", "100", "2e-4"},
		KindString: {"auto", "balanced", "none", "some", "builtin:ngram", "sentence-transformers/all-MiniLM-L6-v2"},
	}
	var pairs [][2]string
	for _, p := range ps {
		for _, v := range probes[p.Kind] {
			pairs = append(pairs, [2]string{p.Name, v})
		}
	}
	got := pythonParams(t, python, `from potato_hf import embed as m`, pairs)
	if len(got.Params) != len(ps) {
		t.Fatalf("the script declares %v; Go declares %d", got.Params, len(ps))
	}
	for i, row := range got.Params {
		p := ps[i]
		def := ""
		if row[2] != nil {
			def = fmt.Sprint(row[2])
		}
		if row[0] != p.Name || row[1] != p.Kind || def != p.Default {
			t.Errorf("the script has %v; Go %s %s default %q", row, p.Name, p.Kind, p.Default)
		}
	}
	for i, pr := range pairs {
		p, _ := ps.Lookup(pr[0])
		_, err := p.Parse(pr[1])
		if goOK := err == nil; goOK != got.Accepted[i] {
			t.Errorf("%s=%q: the script accepts it: %v; Go: %v", pr[0], pr[1], got.Accepted[i], err)
		}
	}
}
