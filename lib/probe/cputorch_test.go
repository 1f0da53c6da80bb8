package probe

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	"potato-training/internal/fakebin"
	"potato-training/internal/testcli"
)

// TestRealCPUTorch runs the probe on this machine with its real
// /usr/bin/python3, whose torch is Debian's CPU build (scripts/install-deps
// installs python3-torch; outside CI a host without it skips), and a fake
// nvidia-smi listing one GPU, since the machine has none. The CPU build is
// recognised, and it keeps a GPU only from trainers that need torch.
func TestRealCPUTorch(t *testing.T) {
	// Whether torch is there is asked without importing it (a second or
	// two of CPU); whether it is a CPU build, of the probe's facts.
	noCPUTorch := func(why string) {
		t.Helper()
		if os.Getenv("CI") == "" {
			t.Skipf("/usr/bin/python3 has no CPU-only torch (%s); scripts/install-deps installs python3-torch", why)
		}
		t.Fatalf("/usr/bin/python3 has no CPU-only torch: %s", why)
	}
	if !testcli.HasModule("/usr/bin/python3", "torch") {
		noCPUTorch("no torch")
	}
	bin := t.TempDir()
	fakebin.NvidiaSMI(t, bin, "0, GPU-a, NVIDIA H200, 143771, 100000, 4, 9.0\n")
	cmd := exec.Command("sh", "-s")
	cmd.Env = append(os.Environ(), "PATH="+bin+":/usr/bin:/bin")
	cmd.Stdin = bytes.NewBufferString(Script("/usr/bin/python3", []string{"torch"}))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	f, err := Parse(out)
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, out)
	}
	if f.TorchCUDA != "" {
		noCPUTorch("its torch is built for CUDA " + f.TorchCUDA)
	}
	if f.Torch == "" || f.TorchError != "" || len(f.Missing) > 0 || len(f.GPUs) != 1 {
		t.Fatalf("facts = %+v\n%s", f, out)
	}
	if !f.CPUTorch() {
		t.Error("CPUTorch() = false for a CPU build")
	}
	g := f.GPUs[0]
	if f.GPUFilter(true)(g) || f.UsableGPU(g) {
		t.Error("a CPU torch can use the GPU, for a torch trainer")
	}
	if !f.GPUFilter(false)(g) {
		t.Error("the GPU is refused to a trainer that needs no torch")
	}
}
