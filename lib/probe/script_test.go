package probe

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"potato-training/internal/fakebin"
	"potato-training/lib/gpu"
)

// These tests run the probe for real: sh reads Script on its standard
// input, as on the far side of ssh, with this machine's python3 and, on
// PATH, internal/fakebin's nvidia-smi.

// host is what a test's sh runs with.
type host struct {
	shell      []string // sh -s, by default
	bin        string   // PATH: uname and timeout, plus what a test adds
	pythonPath string
}

// realPython is this machine's interpreter as it names itself, so that the
// probe runs it without the PATH it may need to resolve (a pyenv shim), and
// its version. No python3 of 3.8 or newer skips the test.
func realPython(t *testing.T) (path, version string) {
	t.Helper()
	pythonOnce.Do(func() { pythonPath, pythonVersion, pythonSkip = findPython() })
	if pythonSkip != "" {
		t.Skip(pythonSkip)
	}
	return pythonPath, pythonVersion
}

var (
	pythonOnce                            sync.Once
	pythonPath, pythonVersion, pythonSkip string
)

func findPython() (path, version, skip string) {
	py, err := exec.LookPath("python3")
	if err != nil {
		return "", "", "no python3 on this machine"
	}
	out, err := exec.Command(py, "-c",
		`import sys; print(sys.executable); print("%d.%d.%d" % sys.version_info[:3]); print(sys.version_info >= (3, 8))`).Output()
	if err != nil {
		return "", "", fmt.Sprintf("python3 does not run: %v", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != 3 || lines[2] != "True" {
		return "", "", fmt.Sprintf("python3 says %q; the probe's trainers need 3.8 or newer", out)
	}
	return lines[0], lines[1], ""
}

// hasModules reports whether python finds any of names without help.
func hasModules(t *testing.T, python string, names ...string) bool {
	t.Helper()
	args := append([]string{"-c",
		`import importlib.util, sys; sys.exit(0 if any(importlib.util.find_spec(n) for n in sys.argv[1:]) else 1)`}, names...)
	return exec.Command(python, args...).Run() == nil
}

// newHost is a PATH holding only uname and timeout, so that no nvidia-smi
// of this machine's can answer.
func newHost(t *testing.T) *host {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh on this machine")
	}
	bin := t.TempDir()
	for _, name := range []string{"uname", "timeout"} {
		if p, err := exec.LookPath(name); err == nil {
			if err := os.Symlink(p, filepath.Join(bin, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return &host{shell: []string{"sh", "-s"}, bin: bin}
}

func (h *host) run(t *testing.T, python string, packages ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.shell[0], h.shell[1:]...)
	cmd.Stdin = strings.NewReader(Script(python, packages))
	cmd.Env = []string{"PATH=" + h.bin, "HOME=" + t.TempDir(), "PYTHONDONTWRITEBYTECODE=1"}
	if h.pythonPath != "" {
		cmd.Env = append(cmd.Env, "PYTHONPATH="+h.pythonPath)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(h.shell, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	if stderr.Len() > 0 {
		t.Logf("stderr:\n%s", stderr.Bytes())
	}
	return stdout.Bytes()
}

func (h *host) probe(t *testing.T, python string, packages ...string) Facts {
	t.Helper()
	out := h.run(t, python, packages...)
	f, err := Parse(out)
	if err != nil {
		t.Fatalf("Parse: %v\nreport:\n%s", err, out)
	}
	return f
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
}

// fakeTorch writes a torch package into dir. It is a stand-in: this
// machine has no GPU and no GPU build of torch, so the package has only
// what the probe reads (__version__, version.cuda, cuda.get_arch_list()).
// cuda "" is None, as in a CPU build.
func fakeTorch(t *testing.T, dir, version, cuda string, arch ...string) {
	t.Helper()
	cudaValue := "None"
	if cuda != "" {
		cudaValue = `"` + cuda + `"`
	}
	list := make([]string, len(arch))
	for i, a := range arch {
		list[i] = `"` + a + `"`
	}
	writeFile(t, filepath.Join(dir, "torch", "__init__.py"),
		"__version__ = \""+version+"\"\nfrom . import version, cuda\n")
	writeFile(t, filepath.Join(dir, "torch", "version.py"), "cuda = "+cudaValue+"\n")
	writeFile(t, filepath.Join(dir, "torch", "cuda.py"),
		"def get_arch_list():\n    return ["+strings.Join(list, ", ")+"]\n")
}

// fakeDist writes the metadata of an installed distribution into dir, as
// pip leaves it, which is all importlib.metadata reads.
func fakeDist(t *testing.T, dir, name, version string) {
	t.Helper()
	info := strings.ReplaceAll(name, "-", "_") + "-" + version + ".dist-info"
	writeFile(t, filepath.Join(dir, info, "METADATA"),
		"Metadata-Version: 2.1\nName: "+name+"\nVersion: "+version+"\n")
}

func TestScriptNoTorch(t *testing.T) {
	t.Parallel()
	python, version := realPython(t)
	if hasModules(t, python, "torch", "transformers", "peft") {
		t.Skip("this machine's python3 has torch, transformers or peft")
	}
	h := newHost(t)
	fakebin.NvidiaSMI(t, h.bin, h200Line+"\n"+a100Line+"\n")
	f := h.probe(t, python, "torch", "transformers", "peft", "json")
	want := Facts{
		OS: unameS(t), Arch: unameM(t),
		Python: python, PythonVersion: version,
		Missing:   []string{"torch", "transformers", "peft"},
		NvidiaSMI: true, GPUs: []gpu.GPU{h200, a100},
	}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("facts:\n got %+v\nwant %+v", f, want)
	}
	if err := f.PythonError(exampleOrg); err != nil {
		t.Errorf("PythonError: %v", err)
	}
	if !f.UsableGPU(h200) || !f.UsableGPU(blackwell) {
		t.Error("without torch every GPU is usable")
	}
}

func unameS(t *testing.T) string { return uname(t, "-s") }
func unameM(t *testing.T) string { return uname(t, "-m") }

func uname(t *testing.T, flag string) string {
	t.Helper()
	out, err := exec.Command("uname", flag).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func TestScriptNvidiaSMI(t *testing.T) {
	t.Parallel()
	python, _ := realPython(t)
	t.Run("old driver: the query without compute_cap", func(t *testing.T) {
		h := newHost(t)
		fakebin.NvidiaSMIOldDriver(t, h.bin, h200Line+"\n"+a100Line+"\n")
		f := h.probe(t, python)
		old := func(g gpu.GPU) gpu.GPU { g.ComputeCap = ""; return g }
		if want := []gpu.GPU{old(h200), old(a100)}; !f.NvidiaSMI || f.NvidiaSMIError != "" || !reflect.DeepEqual(f.GPUs, want) {
			t.Errorf("nvidia-smi %v %q, GPUs %+v; want %+v", f.NvidiaSMI, f.NvidiaSMIError, f.GPUs, want)
		}
	})
	t.Run("no device", func(t *testing.T) {
		h := newHost(t)
		fakebin.NvidiaSMI(t, h.bin, "")
		f := h.probe(t, python)
		if !f.NvidiaSMI || f.NvidiaSMIError != "" || len(f.GPUs) != 0 {
			t.Errorf("nvidia-smi %v %q, GPUs %+v; want it there, without GPUs or error", f.NvidiaSMI, f.NvidiaSMIError, f.GPUs)
		}
	})
	t.Run("no nvidia-smi", func(t *testing.T) {
		f := newHost(t).probe(t, python)
		if f.NvidiaSMI || f.NvidiaSMIError != "" || len(f.GPUs) != 0 {
			t.Errorf("nvidia-smi %v %q, GPUs %+v; want none", f.NvidiaSMI, f.NvidiaSMIError, f.GPUs)
		}
		if f.PythonVersion == "" {
			t.Error("the Python facts are lost without nvidia-smi")
		}
	})
	t.Run("a GPU name with a comma", func(t *testing.T) {
		h := newHost(t)
		fakebin.NvidiaSMI(t, h.bin, "0, GPU-x, NVIDIA A100, PCIe, 40960, 40000, 0, 8.0\n")
		f := h.probe(t, python)
		if len(f.GPUs) != 1 || f.GPUs[0].Name != "NVIDIA A100,PCIe" || f.GPUs[0].ComputeCap != "8.0" {
			t.Errorf("GPUs %+v", f.GPUs)
		}
	})
}

func TestScriptFakeTorch(t *testing.T) {
	t.Parallel()
	python, _ := realPython(t)
	if hasModules(t, python, "transformers", "peft") {
		t.Skip("this machine's python3 has transformers or peft")
	}
	h := newHost(t)
	fakebin.NvidiaSMI(t, h.bin, h200Line+"\n"+a100Line+"\n"+rtx5090+"\n")
	h.pythonPath = t.TempDir()
	fakeTorch(t, h.pythonPath, "2.4.0+cu124", "12.4", strings.Fields(cu124Arch)...)
	fakeDist(t, h.pythonPath, "nvidia-cuda-nvrtc-cu13", "13.0.48")

	f := h.probe(t, python, "torch", "transformers", "peft")
	if f.Torch != "2.4.0+cu124" || f.TorchCUDA != "12.4" || !reflect.DeepEqual(f.TorchArch, strings.Fields(cu124Arch)) || f.TorchError != "" {
		t.Errorf("torch %q, CUDA %q, arch %q, error %q", f.Torch, f.TorchCUDA, f.TorchArch, f.TorchError)
	}
	if !reflect.DeepEqual(f.Missing, []string{"transformers", "peft"}) {
		t.Errorf("missing %q, want transformers peft", f.Missing)
	}
	msg, hint := ImportError("hf-text-classification", f.Missing)
	if msg != "Trainer 'hf-text-classification' could not be imported" || hint != "pip install transformers peft" {
		t.Errorf("ImportError = %q, %q", msg, hint)
	}
	if f.NvrtcCUDA != "13.0.48" {
		t.Errorf("nvrtc %q, want 13.0.48", f.NvrtcCUDA)
	}
	mismatch, ok := f.NvrtcMismatch()
	if !ok || !strings.Contains(mismatch, `"nvrtc: error: failed to open libnvrtc-builtins.so.13.0"`) ||
		!strings.Contains(mismatch, "CUDA 12.4") || !strings.Contains(mismatch, "13.0.48") {
		t.Errorf("NvrtcMismatch = %q, %v", mismatch, ok)
	}
	var usable []bool
	for _, g := range f.GPUs {
		usable = append(usable, f.UsableGPU(g))
	}
	if want := []bool{true, true, false}; len(f.GPUs) != 3 || !reflect.DeepEqual(usable, want) {
		t.Errorf("usable %v for %+v; want %v (no sm_120 in a cu124 torch)", usable, f.GPUs, want)
	}
	if g, err := gpu.Choose(f.GPUs, 2000, f.UsableGPU); err != nil || g.UUID != h200UUID {
		t.Errorf("Choose = %+v, %v; want the H200", g, err)
	}

	t.Run("nvrtc of torch's own CUDA major", func(t *testing.T) {
		h2 := *h
		h2.pythonPath = t.TempDir()
		fakeTorch(t, h2.pythonPath, "2.4.0+cu124", "12.4", strings.Fields(cu124Arch)...)
		fakeDist(t, h2.pythonPath, "nvidia-cuda-nvrtc-cu12", "12.4.127")
		f := h2.probe(t, python, "torch")
		if _, ok := f.NvrtcMismatch(); ok || f.NvrtcCUDA != "12.4.127" || len(f.Missing) != 0 {
			t.Errorf("nvrtc %q, missing %q: want 12.4.127 and no mismatch, nothing missing", f.NvrtcCUDA, f.Missing)
		}
	})
}

func TestScriptTorchCPUBuild(t *testing.T) {
	t.Parallel()
	python, _ := realPython(t)
	h := newHost(t)
	fakebin.NvidiaSMI(t, h.bin, h200Line+"\n"+a100Line+"\n")
	h.pythonPath = t.TempDir()
	fakeTorch(t, h.pythonPath, "2.4.0+cpu", "")
	f := h.probe(t, python, "torch")
	if f.Torch != "2.4.0+cpu" || f.TorchCUDA != "" || len(f.TorchArch) != 0 || len(f.Missing) != 0 {
		t.Errorf("torch %q, CUDA %q, arch %q, missing %q", f.Torch, f.TorchCUDA, f.TorchArch, f.Missing)
	}
	for _, g := range f.GPUs {
		if f.UsableGPU(g) {
			t.Errorf("a CPU build of torch can use %s", g.Name)
		}
	}
	if _, err := gpu.Choose(f.GPUs, 2000, f.UsableGPU); err == nil || err.Error() != "This host's torch has no kernels for any of its GPUs" {
		t.Errorf("Choose: %v, want F5", err)
	}
}

func TestScriptTorchImportFails(t *testing.T) {
	t.Parallel()
	python, _ := realPython(t)
	h := newHost(t)
	h.pythonPath = t.TempDir()
	writeFile(t, filepath.Join(h.pythonPath, "torch", "__init__.py"),
		"raise OSError(\"libcudart.so.12: cannot open shared object file: No such file or directory\")\n")
	f := h.probe(t, python, "torch")
	if f.Torch != "" || f.TorchError != "OSError: libcudart.so.12: cannot open shared object file: No such file or directory" {
		t.Errorf("torch %q, error %q", f.Torch, f.TorchError)
	}
	if !reflect.DeepEqual(f.Missing, []string{"torch"}) {
		t.Errorf("missing %q: a torch that does not import is missing", f.Missing)
	}
}

func TestScriptPythonMissing(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	for _, python := range []string{"/nonexistent/python3", "python3", "~/venv/bin/python3", "/no such/it's python3"} {
		f := h.probe(t, python, "torch")
		if !f.PythonMissing || f.Python != python || f.PythonVersion != "" {
			t.Errorf("%s: missing %v, python %q, version %q", python, f.PythonMissing, f.Python, f.PythonVersion)
		}
	}
	f := h.probe(t, "/nonexistent/python3")
	if err := f.PythonError(exampleOrg); err == nil || err.Error() != "/nonexistent/python3 was not found on gpu.example.org" {
		t.Errorf("PythonError: %v", err)
	}
	if dir := t.TempDir(); true {
		f := h.probe(t, dir) // a directory is not an interpreter
		if !f.PythonMissing {
			t.Errorf("%s: a directory is taken for an interpreter", dir)
		}
	}
}

// wrapper writes an executable sh script standing in for an interpreter.
func wrapper(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "python3")
	writeFile(t, path, "#!/bin/sh\n"+body)
	return path
}

func TestScriptPythonTooOld(t *testing.T) {
	t.Parallel()
	python, _ := realPython(t)
	h := newHost(t)
	// The probe's own program, run by this machine's interpreter made to
	// say it is 3.6.9: it must stop after its version.
	old := wrapper(t, `prog=$2; shift 2
exec `+python+` -c 'import sys
sys.version_info = (3, 6, 9, "final", 0)
prog = sys.argv[1]
sys.argv = ["-c"] + sys.argv[2:]
exec(compile(prog, "<probe>", "exec"))' "$prog" "$@"
`)
	f := h.probe(t, old, "torch", "transformers")
	if !f.PythonTooOld || f.PythonVersion != "3.6.9" || f.Missing != nil || f.PythonFailed != "" {
		t.Errorf("too old %v, version %q, missing %q, failed %q", f.PythonTooOld, f.PythonVersion, f.Missing, f.PythonFailed)
	}
	want := python + " on gpu.example.org is Python 3.6.9; the agent's trainers need 3.8 or newer"
	if err := f.PythonError(exampleOrg); err == nil || err.Error() != want {
		t.Errorf("PythonError: %v, want %q", err, want)
	}
}

// The program handed to the interpreter is old Python's syntax as well, so
// an old interpreter gets as far as its version: ast checks 3.4's grammar
// (3.7's from Python 3.13 on, its oldest), which has no f-strings.
func TestScriptPythonSyntax(t *testing.T) {
	t.Parallel()
	python, _ := realPython(t)
	h := newHost(t)
	saved := filepath.Join(t.TempDir(), "probe.py")
	spy := wrapper(t, `printf '%s' "$2" >'`+saved+`'
exec `+python+` "$@"
`)
	if f := h.probe(t, spy); f.PythonVersion == "" {
		t.Fatalf("the interpreter did not run: %+v", f)
	}
	check := `import ast, sys
src = open(sys.argv[1]).read()
ast.parse(src, feature_version=(3, 4) if sys.version_info < (3, 13) else (3, 7))
`
	if out, err := exec.Command(python, "-c", check, saved).CombinedOutput(); err != nil {
		t.Errorf("the probe's Python is not old Python's: %v\n%s", err, out)
	}
}

func TestScriptPythonFails(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	f := h.probe(t, wrapper(t, "echo 'Fatal Python error: init_fs_encoding' >&2\nexit 3\n"), "torch")
	if f.PythonFailed != "exit status 3" || f.PythonMissing {
		t.Errorf("failed %q, missing %v", f.PythonFailed, f.PythonMissing)
	}
	if err := f.PythonError(exampleOrg); err == nil || !strings.Contains(err.Error(), "did not finish the probe: exit status 3") {
		t.Errorf("PythonError: %v", err)
	}
}

func TestScriptQuoting(t *testing.T) {
	t.Parallel()
	python, _ := realPython(t)
	h := newHost(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	pkgs := []string{"json", "$(touch " + marker + ")", "`touch " + marker + "`", "*", "'x"}
	f := h.probe(t, python, pkgs...)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a package name ran as a command")
	}
	if want := []string{"$(touch", marker + ")", "`touch", marker + "`", "*", "'x"}; !reflect.DeepEqual(f.Missing, want) {
		t.Errorf("missing %q, want %q", f.Missing, want)
	}
}

// The probe is POSIX sh: dash (Debian's sh) checks its syntax, and bash in
// POSIX mode (RHEL's sh) runs it to the same report as sh.
func TestScriptShells(t *testing.T) {
	t.Parallel()
	python, _ := realPython(t)
	if dash, err := exec.LookPath("dash"); err == nil {
		cmd := exec.Command(dash, "-n")
		cmd.Stdin = strings.NewReader(Script(python, []string{"torch"}))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("dash -n: %v\n%s", err, out)
		}
	} else {
		t.Log("no dash on this machine")
	}
	shells := [][]string{{"sh", "-s"}, {"dash", "-s"}, {"bash", "--posix", "-s"}, {"busybox", "sh", "-s"}}
	var (
		ran     []string
		reports []Facts
	)
	for _, shell := range shells {
		if _, err := exec.LookPath(shell[0]); err != nil {
			t.Logf("no %s on this machine", shell[0])
			continue
		}
		t.Run(strings.Join(shell, " "), func(t *testing.T) {
			h := newHost(t)
			h.shell = shell
			fakebin.NvidiaSMIOldDriver(t, h.bin, h200Line+"\n")
			f := h.probe(t, python, "json", "transformers")
			if f.PythonVersion == "" || len(f.GPUs) != 1 {
				t.Errorf("facts %+v", f)
			}
			ran, reports = append(ran, strings.Join(shell, " ")), append(reports, f)
		})
	}
	for i := 1; i < len(reports); i++ {
		if !reflect.DeepEqual(reports[i], reports[0]) {
			t.Errorf("%s and %s report differently:\n%+v\n%+v", ran[0], ran[i], reports[0], reports[i])
		}
	}
	if runtime.GOOS == "linux" && len(reports) == 0 {
		t.Error("no shell ran the probe")
	}
}

// TestScriptForWithoutTorch: a run whose trainer does not use torch skips
// its import, which takes seconds with a real torch; a torch that would
// fail to import says nothing then. Named in PACKAGES, torch is imported
// all the same.
func TestScriptForWithoutTorch(t *testing.T) {
	t.Parallel()
	python, _ := realPython(t)
	h := newHost(t)
	h.pythonPath = t.TempDir()
	writeFile(t, filepath.Join(h.pythonPath, "torch", "__init__.py"), "raise ImportError('imported')\n")
	run := func(packages []string, torch bool) Facts {
		t.Helper()
		cmd := exec.Command("sh", "-s")
		cmd.Stdin = strings.NewReader(ScriptFor(python, packages, torch))
		cmd.Env = []string{"PATH=" + h.bin, "HOME=" + t.TempDir(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=" + h.pythonPath}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		f, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse: %v\n%s", err, out)
		}
		return f
	}
	if f := run(nil, false); f.TorchError != "" || f.PythonVersion == "" {
		t.Errorf("without torch: torch error %q, python %q; want no import and the version", f.TorchError, f.PythonVersion)
	}
	if f := run(nil, true); !strings.Contains(f.TorchError, "imported") {
		t.Errorf("with torch: torch error %q, want the import's", f.TorchError)
	}
	if f := run([]string{"torch"}, false); !strings.Contains(f.TorchError, "imported") || !reflect.DeepEqual(f.Missing, []string{"torch"}) {
		t.Errorf("torch named: torch error %q, missing %q", f.TorchError, f.Missing)
	}
}
