package fakebin

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const twoGPUs = `0, GPU-5d2f7a8e-1c3b-4f6a-9e2d-7b8c9d0e1f2a, NVIDIA H200, 143771, 143252, 0, 9.0
1, GPU-0b1c2d3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e, NVIDIA A100-SXM4-80GB, 81920, 1021, 97, 8.0
`

const (
	capQuery = "--query-gpu=index,uuid,name,memory.total,memory.free,utilization.gpu,compute_cap"
	oldQuery = "--query-gpu=index,uuid,name,memory.total,memory.free,utilization.gpu"
	format   = "--format=csv,noheader,nounits"
)

// run runs the fake nvidia-smi in dir and returns its stdout and exit code.
func run(t *testing.T, dir string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "nvidia-smi"), args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	}
	t.Fatalf("running the fake: %v", err)
	return "", "", 0
}

func TestNvidiaSMIAnswersBothQueries(t *testing.T) {
	dir := NvidiaSMI(t, t.TempDir(), twoGPUs)
	out, _, code := run(t, dir, capQuery, format)
	if code != 0 || out != twoGPUs {
		t.Errorf("compute_cap query: exit %d, stdout %q", code, out)
	}
	out, _, code = run(t, dir, oldQuery, format)
	want := "0, GPU-5d2f7a8e-1c3b-4f6a-9e2d-7b8c9d0e1f2a, NVIDIA H200, 143771, 143252, 0\n" +
		"1, GPU-0b1c2d3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e, NVIDIA A100-SXM4-80GB, 81920, 1021, 97\n"
	if code != 0 || out != want {
		t.Errorf("six-field query: exit %d, stdout %q, want %q", code, out, want)
	}
}

func TestNvidiaSMIOldDriverRefusesComputeCap(t *testing.T) {
	dir := NvidiaSMIOldDriver(t, t.TempDir(), twoGPUs)
	out, _, code := run(t, dir, capQuery, format)
	if code != 2 || strings.TrimSpace(out) != NoComputeCapText {
		t.Errorf("compute_cap query on an old driver: exit %d, stdout %q", code, out)
	}
	out, _, code = run(t, dir, oldQuery, format)
	if code != 0 || strings.Count(out, "\n") != 2 || strings.Contains(out, "9.0") {
		t.Errorf("six-field query on an old driver: exit %d, stdout %q", code, out)
	}
}

func TestNvidiaSMINoGPU(t *testing.T) {
	dir := NvidiaSMI(t, t.TempDir(), "")
	out, _, code := run(t, dir, capQuery, format)
	if code != 6 || strings.TrimSpace(out) != NoDevicesText {
		t.Errorf("no GPU: exit %d, stdout %q", code, out)
	}
}

func TestNvidiaSMIRefusesOtherArguments(t *testing.T) {
	dir := NvidiaSMI(t, t.TempDir(), twoGPUs)
	out, stderr, code := run(t, dir, "-L")
	if code != 2 || out != "" || !strings.Contains(stderr, "-L") {
		t.Errorf("-L: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

func TestNvidiaSMIKeepsShellCharacters(t *testing.T) {
	// The GPU text reaches the script verbatim: no expansion of $ or quotes.
	gpus := "0, GPU-x, Weird $HOME `id` 'q' \"d\", 100, 50, 0, 9.0\n"
	dir := NvidiaSMI(t, t.TempDir(), gpus)
	if out, _, code := run(t, dir, capQuery, format); code != 0 || out != gpus {
		t.Errorf("exit %d, stdout %q, want %q", code, out, gpus)
	}
}
