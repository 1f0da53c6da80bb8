package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestRealGPUHost runs the probe on this machine, with its real nvidia-smi
// and torch, and checks what Parse makes of them: at least one GPU, torch
// with CUDA, and torch kernels for every GPU. It runs only when
// POTATO_GPU_CHECK is set (scripts/gpu-check sets it), since CI has no GPU.
func TestRealGPUHost(t *testing.T) {
	if os.Getenv("POTATO_GPU_CHECK") == "" {
		t.Skip("set POTATO_GPU_CHECK=1 on a machine with an NVIDIA GPU and torch (scripts/gpu-check)")
	}
	python := os.Getenv("POTATO_TRAINING_PYTHON")
	if python == "" {
		python = "python3"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-s")
	cmd.Stdin = bytes.NewBufferString(Script(python, []string{"torch", "transformers", "peft"}))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	f, err := Parse(out)
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, out)
	}
	b, _ := json.MarshalIndent(f, "", "  ")
	t.Logf("facts:\n%s", b)
	switch {
	case !f.NvidiaSMI || len(f.GPUs) == 0:
		t.Fatalf("no GPU parsed from nvidia-smi (%s)", f.NvidiaSMIError)
	case f.Torch == "":
		t.Fatalf("torch not found by the probe: %s", f.TorchError)
	case f.TorchCUDA == "":
		t.Fatalf("torch %s is a CPU build", f.Torch)
	case len(f.Missing) > 0:
		msg, hint := ImportError("hf-text-classification", f.Missing)
		t.Fatalf("%s (%s)", msg, hint)
	}
	for _, g := range f.GPUs {
		if g.ComputeCap == "" || g.MemoryFreeMB < 0 || g.Name == "" {
			t.Errorf("GPU %d parsed incompletely: %+v", g.Index, g)
		}
		if !f.UsableGPU(g) {
			t.Errorf("GPU %d (%s, compute %s) %s: torch %s kernels %v", g.Index, g.Name, g.ComputeCap, NoKernelsMark, f.Torch, f.TorchArch)
		}
	}
	if msg, bad := f.NvrtcMismatch(); bad {
		t.Errorf("%s", msg)
	}
}
