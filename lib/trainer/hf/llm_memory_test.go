package hf_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"potato-training/internal/testcli"
	"potato-training/lib/trainer/hf"
)

// decoder is a Llama-family shape for a model directory that holds its
// config.json alone: the trainer builds it with random weights and says
// so (weights do not change the memory a step takes).
type decoder struct {
	Hidden, Inter, Layers, Heads, KV, Vocab int
}

func (d decoder) config() map[string]any {
	return map[string]any{"model_type": "llama", "architectures": []string{"LlamaForCausalLM"},
		"hidden_size": d.Hidden, "intermediate_size": d.Inter, "num_hidden_layers": d.Layers,
		"num_attention_heads": d.Heads, "num_key_value_heads": d.KV, "vocab_size": d.Vocab,
		"max_position_embeddings": 512, "rms_norm_eps": 1e-5, "tie_word_embeddings": false}
}

// llmRun runs the hf-llm-classification launcher on a bundle with
// python, returning its events' log lines and its result's metrics.
func llmRun(t *testing.T, python string, model string, params map[string]string, rows map[string][]string,
	labels map[string][]string, env ...string) (logs []string, metrics map[string]float64, code int, stderr string) {
	t.Helper()
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	os.MkdirAll(bundle, 0o755)
	splits := map[string]any{}
	for split, texts := range rows {
		var b strings.Builder
		for i, text := range texts {
			row := map[string]any{"instance_id": fmt.Sprintf("%s-%d", split, i), "text": text,
				"targets": map[string]string{"s": labels[split][i]}}
			line, _ := json.Marshal(row)
			b.Write(append(line, '\n'))
		}
		os.WriteFile(filepath.Join(bundle, split+".jsonl"), []byte(b.String()), 0o644)
		splits[split] = map[string]any{"path": split + ".jsonl"}
	}
	writeJSON(t, filepath.Join(bundle, "manifest.json"), map[string]any{"v": 1, "splits": splits})
	p := map[string]string{"model": model}
	for k, v := range params {
		p[k] = v
	}
	spec := map[string]any{"v": 1, "run_id": "m", "trainer": hf.LLMName, "bundle_dir": bundle,
		"workdir": filepath.Join(dir, "work"), "params": p, "seed": 1,
		"schemas": []map[string]any{{"name": "s", "kind": "nominal", "annotation_type": "radio", "labels": []string{"a", "b"}}},
		"limits":  map[string]any{"num_threads": 2, "device": "cpu"}}
	specPath := filepath.Join(dir, "spec.json")
	writeJSON(t, specPath, spec)
	script, err := hf.Write(filepath.Join(dir, "trainers"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, filepath.Join(filepath.Dir(script), hf.LLMLauncher), "--spec", specPath)
	cmd.Env = append(os.Environ(), append([]string{"HF_HUB_OFFLINE=1", "HF_HOME=" + t.TempDir()}, env...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Event   string             `json:"event"`
			Msg     string             `json:"msg"`
			Message string             `json:"message"`
			Metrics map[string]float64 `json:"metrics"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch ev.Event {
		case "log":
			logs = append(logs, ev.Msg)
		case "error":
			logs = append(logs, "error: "+ev.Message)
		case "result":
			metrics = ev.Metrics
		}
	}
	return logs, metrics, code, errb.String()
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

var (
	estimateLine = regexp.MustCompile(`^memory estimate: (\d+) MiB \(weights (\d+), adapter with its gradients and optimizer state (\d+), activations (\d+)`)
	residentLine = regexp.MustCompile(`^memory: (\d+) MiB resident before the model is loaded`)
)

// The memory estimate against the memory a LoRA fit takes on the CPU, for
// decoders of three sizes built from a Llama config with random weights:
// the trainer's peak resident memory above its memory before the model
// was loaded (its packages imported) is within 25% of its estimate, for a
// batch of 8 items of 128 tokens, and for the largest also with gradient
// checkpointing.
func TestLLMMemoryEstimate(t *testing.T) {
	python, _ := testcli.Venv(t, "hf-current", "import transformers, peft; print(transformers.__version__)")
	words := strings.Repeat("lorem ipsum dolor sit amet consectetur ", 40)
	texts := make([]string, 16)
	labels := make([]string, 16)
	for i := range texts {
		texts[i] = fmt.Sprintf("%d %s", i, words)
		labels[i] = []string{"a", "b"}[i%2]
	}
	rows := map[string][]string{"train": texts, "val": texts[:2], "test": texts[:2]}
	lab := map[string][]string{"train": labels, "val": labels[:2], "test": labels[:2]}
	cases := []struct {
		d    decoder
		ckpt bool
	}{
		{decoder{256, 688, 4, 4, 2, 8192}, false},
		{decoder{512, 1376, 6, 8, 4, 8192}, false},
		{decoder{768, 2048, 8, 12, 4, 8192}, false},
		{decoder{768, 2048, 8, 12, 4, 8192}, true},
	}
	for _, c := range cases {
		dir := t.TempDir()
		writeJSON(t, filepath.Join(dir, "config.json"), c.d.config())
		logs, metrics, code, stderr := llmRun(t, python, dir, map[string]string{"max_length": "128", "batch_size": "8",
			"epochs": "1", "gradient_checkpointing": strconv.FormatBool(c.ckpt)}, rows, lab)
		if code != 0 {
			t.Fatalf("%+v: exit %d\n%s\n%s", c.d, code, strings.Join(logs, "\n"), stderr)
		}
		var est, before float64
		var parts string
		for _, l := range logs {
			if m := estimateLine.FindStringSubmatch(l); m != nil {
				est, _ = strconv.ParseFloat(m[1], 64)
				parts = l
			}
			if m := residentLine.FindStringSubmatch(l); m != nil {
				before, _ = strconv.ParseFloat(m[1], 64)
			}
		}
		peak := metrics["peak_rss_mib"]
		if est == 0 || before == 0 || peak == 0 {
			t.Fatalf("%+v: no estimate, resident or peak line: %v %v", c.d, logs, metrics)
		}
		used := peak - before
		ratio := est / used
		t.Logf("hidden %d, %d layers, checkpointing %v: measured %.0f MiB above %.0f MiB before the model; estimated %.0f (ratio %.2f): %s",
			c.d.Hidden, c.d.Layers, c.ckpt, used, before, est, ratio, parts)
		if math.Abs(ratio-1) > 0.25 {
			t.Errorf("hidden %d, %d layers, checkpointing %v: the estimate %.0f MiB is %.0f%% off the measured %.0f MiB",
				c.d.Hidden, c.d.Layers, c.ckpt, est, 100*(ratio-1), used)
		}
	}
}
