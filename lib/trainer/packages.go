package trainer

import (
	"slices"

	"potato-training/lib/trainer/hf"
)

// Packages are the import names a Python trainer needs with these
// parameters (nil: its defaults): what a backend's probe looks for on the
// machine that would run it.
func Packages(name string, params map[string]string) []string {
	switch name {
	case hf.Name, hf.SpanName:
		return hf.Packages(params)
	case hf.EmbedName:
		return hf.EmbedPackages()
	case hf.LLMName:
		return hf.LLMPackages(params)
	}
	return nil
}

// NeedsTorch is whether a trainer imports torch, so that the torch
// kernels of the machine that runs it matter.
func NeedsTorch(name string, params map[string]string) bool {
	return slices.Contains(Packages(name, params), "torch")
}
