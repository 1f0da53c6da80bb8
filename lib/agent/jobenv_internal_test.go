package agent

import (
	"slices"
	"testing"

	"potato-training/lib/slurm"
	"potato-training/lib/trainer"
)

// A job with gres gets a GPU for a trainer that uses one; one that uses
// none runs on the job's CPUs, the GPU hidden, and its spec says so.
func TestJobEnvDevice(t *testing.T) {
	o := slurm.Options{Gres: "gpu:1"}
	for _, c := range []struct {
		trainer, device string
		hidden          bool
	}{
		{"hf-text-classification", "cuda", false},
		{"exec:/bin/true", "cuda", false},
		{"tfidf-logreg", "cpu", true},
	} {
		spec := &trainer.Spec{Trainer: c.trainer}
		env := jobEnv(o, spec, "python3")
		if spec.Limits.Device != c.device || slices.Contains(env, "CUDA_VISIBLE_DEVICES=") != c.hidden ||
			!slices.Contains(env, "POTATO_TRAINING_DEVICE="+c.device) {
			t.Errorf("%s: device %q, env %q", c.trainer, spec.Limits.Device, env)
		}
	}
}
