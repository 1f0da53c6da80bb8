package trainer

import "potato-training/lib/trainer/hf"

// llmParams are hf-llm-classification's, the PARAMS table of
// potato_hf/llm.py (llm_params: hf-text-classification's, with its own
// defaults and quantize, gradient_checkpointing, grad_accum, mode and
// prompt); the builtin:ngram parameters and attention_dropout, which the
// table keeps for the shared loop, are not declared, so a run cannot set
// them. TestLLMParamsAgree compares the two.
var llmParams = Params{
	{Name: "model", Kind: KindString, Default: hf.LLMDefaultModel, Check: llmModel,
		Help: "a decoder LLM: a model directory, a .gguf file, a directory under POTATO_MODEL_CACHE or a hub name in the cache (HF_HOME), read offline"},
	{Name: "mode", Kind: KindString, Default: "fine-tune", Choices: []string{"fine-tune", "zero-shot"},
		Help: "fine-tune a classifier with LoRA, or zero-shot: prompt an instruction-tuned model with the schema's description and labels and score each label, training nothing"},
	{Name: "quantize", Kind: KindString, Default: "none", Choices: []string{"none", "4bit", "8bit"},
		Help: "the base weights as LoRA trains over them: 4bit (NF4 with double quantization) or 8bit through bitsandbytes, on a CUDA GPU only; none as they are"},
	{Name: "gradient_checkpointing", Kind: KindBool, DefaultNote: "true on a GPU, false on the CPU",
		Help: "keep only each layer's input for the backward pass and compute the rest again: less memory, a second forward pass"},
	{Name: "grad_accum", Kind: KindInt, DefaultNote: "1; doubled when an out-of-memory halves batch_size", Range: AtLeast(1),
		Help: "batches whose gradients make one optimizer step: the effective batch is batch_size times grad_accum"},
	{Name: "prompt", Kind: KindString, DefaultNote: "the schema's description",
		Help: "mode=zero-shot: what the labels mean, in the instruction"},
	{Name: "lora", Kind: KindBool, Default: "true", Help: "train LoRA adapters instead of every weight (required with quantize)"},
	{Name: "merge", Kind: KindBool, Default: "false", Help: "merge the LoRA adapters into the saved model (not with quantize)"},
	{Name: "lora_r", Kind: KindInt, Default: "8", Range: AtLeast(1), Help: "the LoRA rank"},
	{Name: "lora_alpha", Kind: KindInt, Default: "16", Range: AtLeast(1), Help: "the LoRA scaling"},
	{Name: "lora_dropout", Kind: KindFloat, Default: "0.1", Range: &Range{Min: 0, Max: 1, MaxOpen: true}, Help: "the LoRA dropout"},
	{Name: "target_modules", Kind: KindList, DefaultNote: "q_proj,v_proj for the Llama family", Help: "the modules LoRA adapts"},
	{Name: "epochs", Kind: KindInt, DefaultNote: "3, more on a small train split (enough for about 100 batches, at most 10)", Range: AtLeast(1), Help: "the most passes over the training items"},
	{Name: "batch_size", Kind: KindInt, Default: "8", Range: AtLeast(1), Help: "items per batch"},
	{Name: "learning_rate", Kind: KindFloat, DefaultNote: "1e-3 for LoRA on a model of 110 million parameters, divided by the square root of how many times larger it is, at least 1e-4", Range: Above(0), Help: "the step size"},
	{Name: "head_learning_rate", Kind: KindFloat, DefaultNote: "0.01", Range: Above(0), Help: "the step size of the new score head"},
	{Name: "weight_decay", Kind: KindFloat, Default: "0.01", Help: "AdamW's weight decay"},
	{Name: "warmup_ratio", Kind: KindFloat, Default: "0.06", Help: "the share of steps the learning rate warms up over"},
	{Name: "max_length", Kind: KindInt, DefaultNote: "the 95th percentile of the train split's token lengths, at most 256 on a GPU and 128 on the CPU (zero-shot: 256 tokens of the text)", Range: AtLeast(1), Help: "tokens per item"},
	{Name: "truncation", Kind: KindString, Default: "head_tail", Choices: []string{"head_tail", "head"}, Help: "how an item longer than max_length is cut"},
	{Name: "patience", Kind: KindInt, Default: "1", Help: "epochs without improvement of the val loss before training stops; below 0 trains every epoch"},
	{Name: "class_weights", Kind: KindString, Default: "auto", Choices: []string{"auto", "balanced", "none"}, Help: "as hf-text-classification's"},
	{Name: "precision", Kind: KindString, Default: "auto", Choices: []string{"auto", "fp32", "bf16", "fp16"}, Help: "the compute precision on a CUDA GPU: auto is bf16 where the compute capability is 8.0 or more, else fp16"},
	{Name: "threshold", Kind: KindFloat, Default: "0.5", Range: &Range{Min: 0, Max: 1, MinOpen: true, MaxOpen: true}, Help: "a multilabel schema's decision threshold"},
	{Name: "max_grad_norm", Kind: KindFloat, Default: "1.0", Range: AtLeast(0), Help: "gradient clipping; 0 for none"},
}

// llmModel refuses a builtin: model, which is hf-text-classification's.
func llmModel(v string) string {
	if len(v) >= 8 && v[:8] == "builtin:" {
		return "a decoder's directory, .gguf file or name"
	}
	return ""
}
