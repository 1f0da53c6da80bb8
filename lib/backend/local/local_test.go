package local

import (
	"context"
	"path/filepath"
	"testing"

	"potato-training/internal/fakebin"
	"potato-training/lib/config"
	"potato-training/lib/gpu"
	"potato-training/lib/trainer"
	"potato-training/lib/trainer/calibrate"
	"potato-training/lib/writeback"
)

// The device of a local run, with two GPUs listed by a fake nvidia-smi
// (this machine has none): a trainer that uses a GPU gets the one asked
// for, or the other with a warning when it is absent; one that uses no GPU
// gets the CPU whatever model_training.device says.
func TestDevice(t *testing.T) {
	smi := filepath.Join(fakebin.NvidiaSMI(t, t.TempDir(), "0, GPU-aaaa, NVIDIA H200, 143771, 9000, 80, 9.0\n1, GPU-bbbb, NVIDIA H200, 143771, 120000, 5, 9.0\n"), "nvidia-smi")
	probe := gpu.Probe{NvidiaSMI: smi, NumCPU: 2}
	for _, c := range []struct {
		device, trainer, want string
		warned                bool
	}{
		{"cuda:1", "exec:/bin/true", "cuda:1", false},
		{"cuda:0", "hf-text-classification", "cuda:0", false},
		{"cuda:7", "exec:/bin/true", "cuda:", true},
		{"cuda:1", "tfidf-logreg", "cpu", false},
		{"cpu", "exec:/bin/true", "cpu", false},
	} {
		cfg := &config.Config{}
		cfg.Training.Device = c.device
		var warnings []string
		dev, err := Device(context.Background(), cfg, c.trainer, probe, func(w string) { warnings = append(warnings, w) })
		if err != nil {
			t.Errorf("%s for %s: %v", c.device, c.trainer, err)
			continue
		}
		got := dev.String()
		if c.warned {
			if len(warnings) != 1 || got[:len(c.want)] != c.want {
				t.Errorf("%s for %s: %s, warnings %q; want a GPU and one warning", c.device, c.trainer, got, warnings)
			}
			continue
		}
		if got != c.want || len(warnings) != 0 {
			t.Errorf("%s for %s: %s, warnings %q; want %s", c.device, c.trainer, got, warnings, c.want)
		}
	}
}

// decision-calibrate gets the project's store and name unless the run
// gave its own; other trainers' params are left as they were.
func TestCalibrateParams(t *testing.T) {
	cfg := &config.Config{TaskDir: "/srv/task", TaskName: "reviews"}
	p := calibrateParams(cfg, trainer.Spec{Trainer: calibrate.Name, Params: map[string]string{"target_precision": "0.8"}})
	if p[calibrate.ParamStore] != filepath.Join("/srv/task", writeback.StoreName) || p[calibrate.ParamProject] != "reviews" || p["target_precision"] != "0.8" {
		t.Errorf("params %v", p)
	}
	given := map[string]string{calibrate.ParamStore: "/elsewhere.sqlite"}
	if p := calibrateParams(cfg, trainer.Spec{Trainer: calibrate.Name, Params: given}); p[calibrate.ParamStore] != "/elsewhere.sqlite" {
		t.Errorf("the run's store was replaced: %v", p)
	}
	if len(given) != 1 {
		t.Errorf("the run's own map was changed: %v", given)
	}
	if p := calibrateParams(cfg, trainer.Spec{Trainer: "tfidf-logreg"}); p != nil {
		t.Errorf("tfidf-logreg's params: %v, want none added", p)
	}
}
