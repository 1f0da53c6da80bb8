package hf

import (
	"fmt"
	"strings"
)

// LLMName is the decoder trainer's name in the registry: the same Python
// package and loop, made that trainer by its own launcher
// (potato_hf/llm.py).
const LLMName = "hf-llm-classification"

// LLMLauncher is its script, beside Launcher in the tree Write writes.
const LLMLauncher = "hf_llm_classification.py"

// LLMDefaultModel is its model when the param is left out: a hub name,
// read from the cache (HF_HOME) offline.
const LLMDefaultModel = "HuggingFaceTB/SmolLM2-135M-Instruct"

// quantizeRefusal is potato_hf/llm.py's QUANTIZE_REFUSAL, word for word:
// check says it before a run, the run the same.
const quantizeRefusal = "quantize=%s needs bitsandbytes on a CUDA GPU, and %s: set --param quantize=none to train the weights unquantized"

// QuantizeRefusal is the sentence refusing quantize (4bit, 8bit) on a
// device of type deviceType (cpu, cuda, mps), or "" where it can run;
// haveBNB is whether bitsandbytes imports there.
func QuantizeRefusal(quantize, deviceType string, haveBNB bool) string {
	if quantize == "" || quantize == "none" {
		return ""
	}
	if deviceType != "cuda" {
		where := deviceType
		if deviceType == "cpu" {
			where = "CPU"
		}
		return fmt.Sprintf(quantizeRefusal, quantize, "this run would train on the "+where)
	}
	if !haveBNB {
		return fmt.Sprintf(quantizeRefusal, quantize, "bitsandbytes is not installed for this interpreter")
	}
	return ""
}

// LLMPackages are the import names a run of the decoder trainer imports:
// torch, transformers, peft and jinja2 (peft's adapter card), and
// bitsandbytes when quantize is 4bit or 8bit.
func LLMPackages(params map[string]string) []string {
	out := []string{"torch", "transformers"}
	switch strings.ToLower(params["lora"]) {
	case "0", "false", "no", "off":
	default:
		out = append(out, "peft", "jinja2")
	}
	if q := params["quantize"]; q != "" && q != "none" {
		out = append(out, "bitsandbytes")
	}
	return out
}
