package trainer

import (
	"slices"
	"testing"
)

// The spec a trainer reads names a device that exists in its own
// environment, whatever the backend chose.
func TestLaunchEnv(t *testing.T) {
	for _, c := range []struct {
		chosen  string
		threads int
		device  string
		env     []string
	}{
		{"cuda:1", 0, "cuda:0", []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=1", "POTATO_TRAINING_DEVICE=cuda:0"}},
		{"cuda:0,3", 4, "cuda", []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=0,3", "POTATO_TRAINING_DEVICE=cuda",
			"MKL_NUM_THREADS=4", "OMP_NUM_THREADS=4", "OPENBLAS_NUM_THREADS=4"}},
		{"cuda", 0, "cuda", []string{"POTATO_TRAINING_DEVICE=cuda"}},
		{"mps", 0, "mps", []string{"POTATO_TRAINING_DEVICE=mps"}},
		{"auto", 0, "auto", []string{"POTATO_TRAINING_DEVICE=auto"}},
		{"cpu", 2, "cpu", []string{"CUDA_VISIBLE_DEVICES=", "POTATO_TRAINING_DEVICE=cpu", "MKL_NUM_THREADS=2", "OMP_NUM_THREADS=2", "OPENBLAS_NUM_THREADS=2"}},
		{"", 0, "cpu", []string{"CUDA_VISIBLE_DEVICES=", "POTATO_TRAINING_DEVICE=cpu"}},
	} {
		spec := Spec{Limits: Limits{Device: c.chosen, NumThreads: c.threads}}
		env := LaunchEnv(&spec)
		if spec.Limits.Device != c.device || !slices.Equal(env, c.env) {
			t.Errorf("chosen %q: device %q, env %q; want %q, %q", c.chosen, spec.Limits.Device, env, c.device, c.env)
		}
	}
}
