package check

import (
	"fmt"
	"os"
	"strings"

	"potato-training/lib/config"
	"potato-training/lib/gpu"
	"potato-training/lib/trainer"
	"potato-training/lib/trainer/hf"
)

// autoParams are model_training.auto_retrain.params as --param values.
func autoParams(cfg *config.Config) map[string]string {
	out := map[string]string{}
	for k, v := range cfg.Training.AutoRetrain.Params {
		out[k] = trainer.ParamString(v)
	}
	return out
}

// QuantizeReason is why the judged trainer cannot start with its params on
// a device of type deviceType (cpu, cuda, mps), or "": hf-llm-classification
// with quantize=4bit or 8bit needs a CUDA GPU, and the run refuses itself
// with the same sentence (hf.QuantizeRefusal). That bitsandbytes imports
// is the package check's (its packages include it with quantize).
func QuantizeReason(j Judged, name, deviceType string) string {
	if name != j.Name || name != hf.LLMName {
		return ""
	}
	return hf.QuantizeRefusal(j.Params["quantize"], deviceType, true)
}

// LLMVerdict is the judged hf-llm-classification run's verdict on a
// device, given the reason other checks found (why): the quantize refusal
// first, then a run that would not fit, then why; and the note of the
// memory estimate. Other trainers keep why, with no note.
func LLMVerdict(j Judged, name, deviceType string, index, freeMB int, why string) (reason, note string) {
	if q := QuantizeReason(j, name, deviceType); q != "" {
		return q, ""
	}
	fit, note := memoryVerdict(j, name, deviceType, index, freeMB)
	if fit != "" {
		return fit, ""
	}
	return why, note
}

// memoryVerdict is the judged hf-llm-classification run's memory estimate
// (hf.LLMEstimate, the run's own) on a device of type deviceType with
// freeMB free (nvidia-smi's; below 0 when unknown): a reason when it
// would not fit on a GPU, worded as the run refuses itself, else a note
// with the estimate. The model is read on this machine; where it is not
// there (another host's path), the note says the run estimates it there.
func memoryVerdict(j Judged, name, deviceType string, index, freeMB int) (reason, note string) {
	if name != j.Name || name != hf.LLMName || j.Params["mode"] == "zero-shot" {
		return "", ""
	}
	model := j.Params["model"]
	if model == "" {
		model = hf.LLMDefaultModel
	}
	shape, err := hf.ModelShape(model, os.Getenv)
	if err != nil {
		return "", "no memory estimate here (" + err.Error() + "): the run makes it on its host before it loads the model"
	}
	e := hf.LLMEstimate(shape, j.Params, 2, deviceType)
	if deviceType != gpu.KindCUDA || freeMB < 0 {
		return "", "memory estimate: " + e.String()
	}
	if e.Total > float64(freeMB) {
		return fmt.Sprintf("the run would not fit: it needs about %s, and GPU %d has %d MiB free: lower %s",
			e.String(), index, freeMB, lowerWhat(j.Params, e)), ""
	}
	return "", fmt.Sprintf("memory estimate: %s; GPU %d has %d MiB free", e.String(), index, freeMB)
}

// lowerWhat is potato_hf/memory.py's lower_what: what to lower, by the
// parts of the estimate that weigh most.
func lowerWhat(params map[string]string, e hf.Estimate) string {
	var out []string
	if e.Activations >= e.Weights/4 {
		bs := 8
		fmt.Sscan(params["batch_size"], &bs)
		out = append(out, fmt.Sprintf("--param batch_size=%d (grad_accum keeps the effective batch)", max(1, bs/2)),
			"--param max_length=N")
		switch strings.ToLower(params["gradient_checkpointing"]) {
		case "1", "true", "yes", "on":
		default:
			out = append(out, "--param gradient_checkpointing=true")
		}
	}
	if q := params["quantize"]; q == "" || q == "none" || q == "8bit" {
		out = append(out, "--param quantize=4bit")
	}
	return strings.Join(append(out, "a smaller model"), ", ")
}

// FreeOf is the free memory nvidia-smi reports of GPU index, or -1.
func FreeOf(gpus []GPUInfo, index int) int {
	for _, g := range gpus {
		if g.Index == index {
			return g.MemoryFreeMB
		}
	}
	return -1
}
