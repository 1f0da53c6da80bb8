package ssh_test

// Against the real sshd of scripts/test-sshd; the GPUs are a fake
// nvidia-smi on the remote PATH, since this machine has none.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"potato-training/internal/fakebin"
	"potato-training/internal/testcli"
	sshbackend "potato-training/lib/backend/ssh"
	"potato-training/lib/check"
	"potato-training/lib/config"
	"potato-training/lib/gpu"
	"potato-training/lib/probe"
)

// exec is a judged trainer that may use a GPU and needs no package: the
// device it gets is the one gpus and min_free_gpu_mb choose.
var execJudged = check.Judged{Name: "exec:/bin/true", From: check.FromFlag}

func sshBackend(t *testing.T, host, python, gpus string) *config.Backend {
	t.Helper()
	return sshBackendEnv(t, host, python, gpus, "")
}

// sshBackendEnv is sshBackend with more variables in the backend's env,
// written "NAME: value, ".
func sshBackendEnv(t *testing.T, host, python, gpus, env string) *config.Backend {
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
      env: {%sPATH: "%s:/usr/bin:/bin"}
`, host, dir, python, env, fakes)
	c := config.ParseConfig([]byte(text), t.TempDir())
	if len(c.Problems) > 0 {
		t.Fatal(c.Problems)
	}
	b, _ := c.Backend("gpu-server")
	return b
}

func TestSSHReport(t *testing.T) {
	b := sshBackend(t, "potato-test", "python3", "0, GPU-a, NVIDIA H200, 143771, 3000, 90, 9.0\n1, GPU-b, NVIDIA H200, 143771, 100000, 4, 9.0\n")
	r := sshbackend.Check(context.Background(), b, execJudged)
	if !r.OK || r.Device == nil || r.Device.Device != "cuda:1" || len(r.GPUs) != 2 || r.PythonVersion == "" {
		t.Fatalf("%+v", r)
	}
	if got := r.Missing["hf-text-classification"]; !strings.Contains(strings.Join(got, " "), "transformers") {
		t.Errorf("missing packages: %v", r.Missing)
	}
	var out strings.Builder
	check.WriteText(&out, r)
	for _, want := range []string{"gpu-server (ssh to potato-test) (Linux", ": a run can start", "  GPU 1: NVIDIA H200, 100000 of 143771 MB free, 4% used", "a run would get: GPU 1, NVIDIA H200, 100000 MB free (cuda:1)",
		"  trainer: exec:/bin/true (--trainer)", "  tfidf-logreg: can start on CPU\n",
		"  hf-text-classification: cannot start: Trainer 'hf-text-classification' could not be imported",
		"  decision-calibrate: cannot start: it runs only on the annotation server"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// F2: a missing interpreter is the verdict of the Python trainers; the
// built-in trainer can still run, so its answer is yes, and the answer for
// hf-text-classification no.
func TestSSHReportMissingPython(t *testing.T) {
	b := sshBackend(t, "potato-test", "/opt/conda/bin/python3", "")
	want := "hf-text-classification cannot start: /opt/conda/bin/python3 was not found on potato-test"
	r := sshbackend.Check(context.Background(), b, check.Judged{Name: "tfidf-logreg", From: check.FromFlag})
	if !r.OK || r.Device == nil || r.Device.Device != "cpu" || len(r.Trainers) != 6 || r.Trainers[1].OK ||
		"hf-text-classification cannot start: "+r.Trainers[1].Reason != want {
		t.Errorf("tfidf-logreg: %+v", r)
	}
	r = sshbackend.Check(context.Background(), b, check.Judged{Name: "hf-text-classification", From: check.FromFirstGPU})
	if r.OK || !strings.HasSuffix(r.Summary, ": "+want) || r.Problems[0] != want {
		t.Errorf("hf-text-classification: %+v", r)
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
		r := sshbackend.Check(context.Background(), sshBackend(t, c.host, c.python, c.gpus), execJudged)
		if r.OK || !strings.Contains(strings.Join(r.Problems, "\n"), c.want) || !strings.Contains(r.Summary, c.want) {
			t.Errorf("%s: %+v", c.name, r)
		}
	}
}

// TestChooseDeviceForTorch: the host's torch decides the GPUs of a trainer
// that needs torch, and only of one. Facts as the probe gives them; the
// real CPU build is TestSSHReportCPUTorch's.
func TestChooseDeviceForTorch(t *testing.T) {
	h200 := gpu.GPU{Index: 0, Name: "NVIDIA H200", MemoryFreeMB: 140000, ComputeCap: "9.0"}
	cpuTorch := probe.Facts{Torch: "1.13.1", GPUs: []gpu.GPU{h200}}
	sm80 := probe.Facts{Torch: "2.4.0", TorchCUDA: "12.4", TorchArch: []string{"sm_80"}, GPUs: []gpu.GPU{h200}}
	auto := &config.Backend{Host: "gpu.example.org", MinFreeGPUMB: 2000}
	pinned := &config.Backend{Host: "gpu.example.org", GPUs: config.GPUs{Indices: []int{0}}}
	for _, tc := range []struct {
		name       string
		b          *config.Backend
		f          probe.Facts
		needsTorch bool
		dev, err   string
		note       string
	}{
		{"built-in, CPU torch", auto, cpuTorch, false, "cuda:0", "", ""},
		{"built-in, no kernels", auto, sm80, false, "cuda:0", "", ""},
		{"torch trainer, CPU torch, auto: CPU with a warning", auto, cpuTorch, true, "cpu", "",
			"warning: this host's torch 1.13.1 is a CPU build, so the run trains on the CPU of gpu.example.org"},
		{"torch trainer, CPU torch, pinned: refused", pinned, cpuTorch, true, "",
			"gpus pins GPU 0, but the torch 1.13.1 on gpu.example.org is a CPU build and cannot use it", ""},
		{"built-in, CPU torch, pinned", pinned, cpuTorch, false, "cuda:0", "", ""},
		{"torch trainer, no kernels for any GPU: F5", auto, sm80, true, "", gpu.NoUsableGPUText, ""},
	} {
		dev, notes, err := sshbackend.ChooseDevice(tc.b, tc.f, tc.needsTorch)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if dev != tc.dev || gotErr != tc.err || tc.note != "" && !slices.Contains(notes, tc.note) {
			t.Errorf("%s: %q %q %q", tc.name, dev, notes, gotErr)
		}
	}
}

// TestSSHReportCPUTorch runs the check against this machine's real
// /usr/bin/python3, whose torch is Debian's CPU build (scripts/install-deps
// installs it; outside CI a host without it skips), with two GPUs from the
// fake nvidia-smi. The built-in trainer runs on the CPU, as it uses no
// GPU; the torch trainer would train on the CPU too, which is a warning;
// no GPU is what it would get.
func TestSSHReportCPUTorch(t *testing.T) {
	version, cuda, err := debianTorch()
	if err == nil && cuda != "None" {
		err = fmt.Errorf("torch %s is built for CUDA %s", version, cuda)
	}
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("/usr/bin/python3 has no CPU-only torch (%v); scripts/install-deps installs python3-torch", err)
		}
		t.Fatalf("/usr/bin/python3 has no CPU-only torch: %v", err)
	}
	b := sshBackend(t, "potato-test", "/usr/bin/python3", "0, GPU-a, NVIDIA H200, 143771, 3000, 90, 9.0\n1, GPU-b, NVIDIA H200, 143771, 100000, 4, 9.0\n")
	r := sshbackend.Check(context.Background(), b, check.Judged{Name: "tfidf-logreg", From: check.FromFlag})
	warnings := strings.Join(r.Warnings, "\n")
	if !r.OK || r.Device == nil || r.Device.Device != "cpu" || len(r.Problems) > 0 ||
		!strings.Contains(warnings, "is a CPU build, so hf-text-classification trains on the CPU of potato-test") {
		t.Fatalf("%+v", r)
	}
	for _, g := range r.GPUs {
		if !g.NoTorchKernels {
			t.Errorf("GPU %d not marked: a CPU torch has no kernels for it", g.Index)
		}
	}
	r = sshbackend.Check(context.Background(), b, check.Judged{Name: "hf-text-classification", From: check.FromFlag})
	if r.OK || r.Device == nil || r.Device.Device != "cpu" {
		t.Errorf("hf-text-classification: %+v", r)
	}
	b.GPUs = config.GPUs{Indices: []int{0}}
	r = sshbackend.Check(context.Background(), b, check.Judged{Name: "hf-text-classification", From: check.FromFlag})
	want := "gpus pins GPU 0, but the torch " + version + " on potato-test is a CPU build and cannot use it"
	if r.OK || r.Device != nil || !strings.Contains(r.Trainers[1].Reason, want) {
		t.Errorf("pinned: %+v", r)
	}
}

// A torch built for sm_80 only (a fake module on the remote PYTHONPATH:
// this machine has no CUDA torch) has no kernels for an H200 (9.0). With
// gpus: auto the report never gives such a GPU as the one a run of the
// torch trainer gets, though it has the most free memory; with only such
// GPUs the trainer cannot start (F5).
func TestSSHReportNeverANoKernelGPU(t *testing.T) {
	py, _ := os.MkdirTemp("/tmp", "potato-check-torch-")
	os.Chmod(py, 0o755)
	t.Cleanup(func() { os.RemoveAll(py) })
	os.MkdirAll(py+"/torch/cuda", 0o755)
	os.WriteFile(py+"/torch/__init__.py", []byte("__version__ = '2.4.0'\nfrom . import cuda, version\n"), 0o644)
	os.WriteFile(py+"/torch/version.py", []byte("cuda = '12.4'\n"), 0o644)
	os.WriteFile(py+"/torch/cuda/__init__.py", []byte("def get_arch_list():\n    return ['sm_80', 'sm_86']\ndef is_available():\n    return True\n"), 0o644)
	env := `PYTHONPATH: "` + py + `", `
	hf := check.Judged{Name: "hf-text-classification", From: check.FromFirstGPU}

	b := sshBackendEnv(t, "potato-test", "python3", "0, GPU-a, NVIDIA A100, 81920, 70000, 0, 8.0\n1, GPU-b, NVIDIA H200, 143771, 140000, 0, 9.0\n", env)
	r := sshbackend.Check(context.Background(), b, hf)
	var out strings.Builder
	check.WriteText(&out, r)
	if r.Device == nil || r.Device.Device != "cuda:0" || !r.GPUs[1].NoTorchKernels || r.GPUs[0].NoTorchKernels {
		t.Errorf("%+v", r)
	}
	if !strings.Contains(out.String(), "a run would get: GPU 0, NVIDIA A100") || strings.Contains(out.String(), "a run would get: GPU 1") {
		t.Errorf("report:\n%s", out.String())
	}

	b = sshBackendEnv(t, "potato-test", "python3", "0, GPU-b, NVIDIA H200, 143771, 140000, 0, 9.0\n", env)
	r = sshbackend.Check(context.Background(), b, hf)
	if r.OK || r.Device != nil || !strings.Contains(r.Problems[0], gpu.NoUsableGPUText) {
		t.Errorf("only a GPU without kernels: %+v", r)
	}
}

// debianTorch returns the version of /usr/bin/python3's torch and the CUDA
// it was built for ("None" for a CPU build), read from torch/version.py,
// which torch's own torch.__version__ and torch.version.cuda come from:
// importing torch would cost seconds of CPU.
func debianTorch() (version, cuda string, err error) {
	out, err := exec.Command("/usr/bin/python3", "-c", `import importlib.util, os, sys
s = importlib.util.find_spec("torch")
if s is None:
    sys.exit("no module named torch")
v = {}
exec(open(os.path.join(s.submodule_search_locations[0], "version.py")).read(), v)
print(v["__version__"], v.get("cuda"))`).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			err = errors.New(strings.TrimSpace(string(ee.Stderr)))
		}
		return "", "", err
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return "", "", fmt.Errorf("torch/version.py: %q", out)
	}
	return f[0], f[1], nil
}
