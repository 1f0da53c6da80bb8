package check

import (
	"potato-training/lib/config"
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

// quantizeReason is why the judged trainer cannot start with its params on
// a device of type deviceType (cpu, cuda, mps), or "": hf-llm-classification
// with quantize=4bit or 8bit needs a CUDA GPU, and the run refuses itself
// with the same sentence (hf.QuantizeRefusal). That bitsandbytes imports
// is the package check's (its packages include it with quantize).
func quantizeReason(j Judged, name, deviceType string) string {
	if name != j.Name || name != hf.LLMName {
		return ""
	}
	return hf.QuantizeRefusal(j.Params["quantize"], deviceType, true)
}
