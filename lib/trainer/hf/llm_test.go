package hf_test

import (
	"strings"
	"testing"

	"potato-training/internal/testcli"
	"potato-training/lib/trainer/hf"
)

// quantize=4bit on a machine without CUDA: the run refuses itself before
// it loads anything, exit 3 (missing_dependency), with the sentence
// potato-check says (hf.QuantizeRefusal; cmd/potato-check's llm.txtar).
func TestLLMQuantizeRefused(t *testing.T) {
	python, _ := testcli.Venv(t, "hf-current", "import torch; print(torch.__version__)")
	for _, q := range []string{"4bit", "8bit"} {
		logs, _, code, stderr := llmRun(t, python, "/no/model/needed", map[string]string{"quantize": q},
			map[string][]string{"train": {"x", "y"}}, map[string][]string{"train": {"a", "b"}})
		want := "error: " + hf.QuantizeRefusal(q, "cpu", true)
		if code != 3 || !strings.Contains(strings.Join(logs, "\n"), want) {
			t.Errorf("quantize=%s: exit %d, events:\n%s\nwant exit 3 and %q\n%s", q, code, strings.Join(logs, "\n"), want, stderr)
		}
	}
}
