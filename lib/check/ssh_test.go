package check

// Against the real sshd of scripts/test-sshd; the GPUs are a fake
// nvidia-smi on the remote PATH, since this machine has none.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"potato-training/internal/fakebin"
	"potato-training/internal/testcli"
	"potato-training/lib/config"
)

func sshBackend(t *testing.T, host, python, gpus string) *config.Backend {
	t.Helper()
	dir := testcli.SSHD(t)
	fakes, _ := os.MkdirTemp("/tmp", "potato-check-test-")
	os.Chmod(fakes, 0o755)
	t.Cleanup(func() { os.RemoveAll(fakes) })
	fakebin.NvidiaSMI(t, fakes, gpus)
	text := fmt.Sprintf(`model_training:
  backends:
    gpu-server:
      type: ssh
      host: %s
      ssh_config: %s/ssh_config
      python: %s
      min_free_gpu_mb: 4000
      env: {PATH: "%s:/usr/bin:/bin"}
`, host, dir, python, fakes)
	c := config.ParseConfig([]byte(text), t.TempDir())
	if len(c.Problems) > 0 {
		t.Fatal(c.Problems)
	}
	b, _ := c.Backend("gpu-server")
	return b
}

func TestSSHReport(t *testing.T) {
	b := sshBackend(t, "potato-test", "python3", "0, GPU-a, NVIDIA H200, 143771, 3000, 90, 9.0\n1, GPU-b, NVIDIA H200, 143771, 100000, 4, 9.0\n")
	r := SSH(context.Background(), b)
	if !r.OK || r.Device == nil || r.Device.Device != "cuda:1" || len(r.GPUs) != 2 || r.PythonVersion == "" {
		t.Fatalf("%+v", r)
	}
	if got := r.Missing["hf-text-classification"]; !strings.Contains(strings.Join(got, " "), "transformers") {
		t.Errorf("missing packages: %v", r.Missing)
	}
	var out strings.Builder
	WriteText(&out, r)
	for _, want := range []string{"gpu-server (ssh to potato-test) (Linux", ": a run can start", "  GPU 1: NVIDIA H200, 100000 of 143771 MB free, 4% used", "a run would get: GPU 1, NVIDIA H200, 100000 MB free (cuda:1)", "Trainer 'hf-text-classification' could not be imported"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// F2: a missing interpreter is reported; the built-in trainer can still
// run, so the answer stays yes.
func TestSSHReportMissingPython(t *testing.T) {
	r := SSH(context.Background(), sshBackend(t, "potato-test", "/opt/conda/bin/python3", ""))
	if !r.OK || !strings.Contains(strings.Join(r.Warnings, "\n"), "/opt/conda/bin/python3 was not found on potato-test") {
		t.Errorf("%+v", r)
	}
}

func TestSSHReportFailures(t *testing.T) {
	cases := []struct {
		name, host, python, gpus, want string
	}{
		{"F1", "potato-test-pw", "python3", "", "ssh to potato-test-pw failed: Permission denied"},
		{"F3", "potato-test", "python3", "0, GPU-a, NVIDIA H200, 143771, 3000, 90, 9.0\n", "No GPU has 4000 MB free"},
	}
	for _, c := range cases {
		r := SSH(context.Background(), sshBackend(t, c.host, c.python, c.gpus))
		if r.OK || !strings.Contains(strings.Join(r.Problems, "\n"), c.want) || !strings.Contains(r.Summary, c.want) {
			t.Errorf("%s: %+v", c.name, r)
		}
	}
}
