package trainer

// hfSpanParams are hf-span's: those of hfParams that a token classifier
// reads (span_loop.span_params parses them with parse_params), and
// stride, its own. TestHFSpanParams compares them with hfParams.
var hfSpanParams = func() Params {
	keep := map[string]bool{"model": true, "lora": true, "merge": true, "lora_r": true, "lora_alpha": true,
		"lora_dropout": true, "attention_dropout": true, "target_modules": true, "epochs": true, "batch_size": true,
		"learning_rate": true, "head_learning_rate": true, "weight_decay": true, "warmup_ratio": true,
		"patience": true, "precision": true, "max_grad_norm": true}
	var out Params
	for _, p := range hfParams {
		if !keep[p.Name] {
			continue
		}
		switch p.Name {
		case "model":
			p.Check = hfSpanModel
			p.Help = "a model name or directory for transformers, whose tokenizer is a fast one (character offsets)"
		case "epochs":
			p.DefaultNote = "3, more on a small train split (enough for about 100 steps of windows, at most 10)"
		case "batch_size":
			p.DefaultNote = "16"
			p.Help = "windows per step"
		case "lora":
			// LoRA whatever the model's size: hf-span's defaults were
			// measured with it (scripts/bench-span); hf-text-
			// classification fine-tunes a small model whole.
			p.Default, p.DefaultNote = "true", ""
		case "learning_rate":
			p.DefaultNote = "by the model's size, as hf-text-classification's"
		case "head_learning_rate":
			p.DefaultNote = "0.01"
		}
		out = append(out, p)
	}
	return append(out,
		Param{Name: "max_length", Kind: KindInt, DefaultNote: "the 95th percentile of the token lengths of the train split's items, rounded up to a multiple of 8, at least 16, at most the model's limit and 256 on a GPU, 128 on the CPU", Range: AtLeast(1),
			Help: "tokens per window, special tokens included; a longer item is cut into windows that overlap by stride"},
		Param{Name: "stride", Kind: KindInt, DefaultNote: "a quarter of max_length", Range: AtLeast(0),
			Help: "tokens two windows of a long item share; a token in several takes the window where it is farthest from an edge"})
}()

// hfSpanModel refuses builtin: models, which have no token classifier.
func hfSpanModel(v string) string {
	if len(v) >= 8 && v[:8] == "builtin:" {
		return "a model directory or name: hf-span has no built-in model"
	}
	return ""
}
