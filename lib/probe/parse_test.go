package probe

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"potato-training/lib/gpu"
)

// nvidia-smi's lines for the compute_cap query, as driver 550 prints them.
const (
	h200Line   = "0, GPU-5d2f7a8e-1c3b-4f6a-9e2d-7b8c9d0e1f2a, NVIDIA H200, 143771, 143252, 0, 9.0"
	a100Line   = "1, GPU-0b1c2d3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e, NVIDIA A100-SXM4-80GB, 81920, 1021, 97, 8.0"
	rtx5090    = "2, GPU-9a8b7c6d-5e4f-3a2b-1c0d-9e8f7a6b5c4d, NVIDIA GeForce RTX 5090, 32607, 32100, 3, 12.0"
	h200Old    = "0, GPU-5d2f7a8e-1c3b-4f6a-9e2d-7b8c9d0e1f2a, NVIDIA H200, 143771, 143252, 0"
	h200UUID   = "GPU-5d2f7a8e-1c3b-4f6a-9e2d-7b8c9d0e1f2a"
	a100UUID   = "GPU-0b1c2d3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e"
	rtx5090ID  = "GPU-9a8b7c6d-5e4f-3a2b-1c0d-9e8f7a6b5c4d"
	cu124Arch  = "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90"
	exampleOrg = "gpu.example.org"
)

var (
	h200 = gpu.GPU{Index: 0, UUID: h200UUID, Name: "NVIDIA H200",
		MemoryTotalMB: 143771, MemoryFreeMB: 143252, UtilizationPct: 0, ComputeCap: "9.0"}
	a100 = gpu.GPU{Index: 1, UUID: a100UUID, Name: "NVIDIA A100-SXM4-80GB",
		MemoryTotalMB: 81920, MemoryFreeMB: 1021, UtilizationPct: 97, ComputeCap: "8.0"}
	blackwell = gpu.GPU{Index: 2, UUID: rtx5090ID, Name: "NVIDIA GeForce RTX 5090",
		MemoryTotalMB: 32607, MemoryFreeMB: 32100, UtilizationPct: 3, ComputeCap: "12.0"}
)

func report(lines ...string) []byte {
	return []byte(strings.Join(lines, "\n") + "\n")
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		report []byte
		want   Facts
	}{
		{"full", report(
			"potato-probe-begin",
			"uname: Linux x86_64",
			"python: /opt/conda/bin/python3 3.11.7",
			"torch: 2.4.0+cu124 12.4",
			"torch-arch: "+cu124Arch,
			"missing: transformers peft",
			"nvrtc: nvidia-cuda-nvrtc-cu12 12.4.127",
			"nvidia-smi-begin: 7",
			h200Line,
			a100Line,
			"nvidia-smi-end: 0",
			"potato-probe-end",
		), Facts{
			OS: "Linux", Arch: "x86_64",
			Python: "/opt/conda/bin/python3", PythonVersion: "3.11.7",
			Missing:   []string{"transformers", "peft"},
			NvidiaSMI: true, GPUs: []gpu.GPU{h200, a100},
			Torch: "2.4.0+cu124", TorchCUDA: "12.4", TorchArch: strings.Fields(cu124Arch),
			NvrtcCUDA: "12.4.127",
		}},
		{"no GPU: nvidia-smi finds no device", report(
			"potato-probe-begin",
			"uname: Linux aarch64",
			"python: /usr/bin/python3 3.10.12",
			"missing:",
			"nvidia-smi-begin: 7",
			"No devices were found",
			"nvidia-smi-end: 6",
			"potato-probe-end",
		), Facts{
			OS: "Linux", Arch: "aarch64",
			Python: "/usr/bin/python3", PythonVersion: "3.10.12",
			Missing: []string{}, NvidiaSMI: true,
		}},
		{"no GPU: no nvidia-smi", report(
			"potato-probe-begin",
			"uname: Darwin arm64",
			"python: /usr/bin/python3 3.9.6",
			"missing: torch",
			"nvidia-smi-missing",
			"potato-probe-end",
		), Facts{
			OS: "Darwin", Arch: "arm64",
			Python: "/usr/bin/python3", PythonVersion: "3.9.6",
			Missing: []string{"torch"},
		}},
		{"no python", report(
			"potato-probe-begin",
			"uname: Linux x86_64",
			"python-missing: /opt/conda/bin/python3",
			"nvidia-smi-missing",
			"potato-probe-end",
		), Facts{
			OS: "Linux", Arch: "x86_64",
			Python: "/opt/conda/bin/python3", PythonMissing: true,
		}},
		{"python too old", report(
			"potato-probe-begin",
			"uname: Linux x86_64",
			"python: /usr/bin/python3 3.6.9",
			"nvidia-smi-missing",
			"potato-probe-end",
		), Facts{
			OS: "Linux", Arch: "x86_64",
			Python: "/usr/bin/python3", PythonVersion: "3.6.9", PythonTooOld: true,
		}},
		{"python timed out importing torch", report(
			"potato-probe-begin",
			"python: /opt/conda/bin/python3 3.11.7",
			"python-failed: 124 python3",
			"nvidia-smi-missing",
			"potato-probe-end",
		), Facts{
			Python: "/opt/conda/bin/python3", PythonVersion: "3.11.7",
			PythonFailed: PythonTimedOutText,
		}},
		{"python failed before its version", report(
			"potato-probe-begin",
			"python-failed: 126 /home/ann/venv/bin/python",
			"nvidia-smi-missing",
			"potato-probe-end",
		), Facts{
			Python: "/home/ann/venv/bin/python", PythonFailed: "exit status 126",
		}},
		{"old driver: no compute_cap", report(
			"potato-probe-begin",
			"python: /usr/bin/python3 3.8.10",
			"missing:",
			"nvidia-smi-begin: 6",
			h200Old,
			"nvidia-smi-end: 0",
			"potato-probe-end",
		), Facts{
			Python: "/usr/bin/python3", PythonVersion: "3.8.10", Missing: []string{},
			NvidiaSMI: true,
			GPUs: []gpu.GPU{{Index: 0, UUID: h200UUID, Name: "NVIDIA H200",
				MemoryTotalMB: 143771, MemoryFreeMB: 143252}},
		}},
		{"nvidia-smi fails", report(
			"potato-probe-begin",
			"nvidia-smi-begin: 7",
			"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.",
			"",
			"nvidia-smi-end: 9",
			"potato-probe-end",
		), Facts{
			NvidiaSMI:      true,
			NvidiaSMIError: "nvidia-smi failed (exit status 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.",
		}},
		{"nvidia-smi hangs", report(
			"potato-probe-begin",
			"nvidia-smi-begin: 7",
			"nvidia-smi-end: 124",
			"potato-probe-end",
		), Facts{NvidiaSMI: true, NvidiaSMIError: NvidiaSMITimedOutText}},
		{"nvidia-smi answer that does not parse", report(
			"potato-probe-begin",
			"nvidia-smi-begin: 7",
			"0, GPU-a, NVIDIA H200",
			"nvidia-smi-end: 0",
			"potato-probe-end",
		), Facts{NvidiaSMI: true, NvidiaSMIError: `nvidia-smi line 1 "0, GPU-a, NVIDIA H200": want 7 fields, got 3`}},
		{"torch CPU build", report(
			"potato-probe-begin",
			"python: /usr/bin/python3 3.12.3",
			"torch: 2.4.0+cpu none",
			"torch-arch:",
			"missing:",
			"nvidia-smi-begin: 7",
			h200Line,
			"nvidia-smi-end: 0",
			"potato-probe-end",
		), Facts{
			Python: "/usr/bin/python3", PythonVersion: "3.12.3", Missing: []string{},
			Torch: "2.4.0+cpu", TorchArch: []string{},
			NvidiaSMI: true, GPUs: []gpu.GPU{h200},
		}},
		{"torch import fails", report(
			"potato-probe-begin",
			"python: /usr/bin/python3 3.12.3",
			"torch-error: OSError: libcudart.so.12: cannot open shared object file: No such file or directory",
			"missing: torch peft",
			"nvidia-smi-missing",
			"potato-probe-end",
		), Facts{
			Python: "/usr/bin/python3", PythonVersion: "3.12.3", Missing: []string{"torch", "peft"},
			TorchError: "OSError: libcudart.so.12: cannot open shared object file: No such file or directory",
		}},
		{"banner lines, CRLF and unknown keys", []byte(
			"Welcome to Ubuntu 22.04.4 LTS\r\n" +
				"missing: this line is the banner's\r\n" +
				"python: /not/the/probe 9.9\r\n" +
				"  potato-probe-begin  \r\n" +
				"uname: Linux x86_64\r\n" +
				"python: /opt/conda/bin/python3 3.11.7\r\n" +
				"kernel-modules: nvidia nvidia_uvm\r\n" +
				"missing: peft\r\n" +
				"nvidia-smi-begin: 7\r\n" +
				h200Line + "\r\n" +
				"nvidia-smi-end: 0\r\n" +
				"potato-probe-end\r\n" +
				"logout\r\n"),
			Facts{
				OS: "Linux", Arch: "x86_64",
				Python: "/opt/conda/bin/python3", PythonVersion: "3.11.7",
				Missing: []string{"peft"}, NvidiaSMI: true, GPUs: []gpu.GPU{h200},
			}},
		{"several nvrtc packages: the one for another CUDA major", report(
			"potato-probe-begin",
			"python: /usr/bin/python3 3.11.7",
			"torch: 2.5.1 12.4",
			"torch-arch: sm_90",
			"missing:",
			"nvrtc: nvidia-cuda-nvrtc-cu12 12.4.127",
			"nvrtc: nvidia-cuda-nvrtc-cu13 13.0.48",
			"nvidia-smi-missing",
			"potato-probe-end",
		), Facts{
			Python: "/usr/bin/python3", PythonVersion: "3.11.7", Missing: []string{},
			Torch: "2.5.1", TorchCUDA: "12.4", TorchArch: []string{"sm_90"},
			NvrtcCUDA: "13.0.48",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.report)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseIncomplete(t *testing.T) {
	full := report(
		"potato-probe-begin",
		"uname: Linux x86_64",
		"python: /opt/conda/bin/python3 3.11.7",
		"missing:",
		"nvidia-smi-begin: 7",
		h200Line,
		"nvidia-smi-end: 0",
		"potato-probe-end",
	)
	if _, err := Parse(full); err != nil {
		t.Fatalf("the whole report: %v", err)
	}
	for _, tc := range []struct {
		name   string
		report string
	}{
		{"empty", ""},
		{"a banner only", "Welcome to gpu.example.org\n"},
		{"no begin marker", strings.Replace(string(full), "potato-probe-begin\n", "", 1)},
		{"cut before the end marker", strings.TrimSuffix(string(full), "potato-probe-end\n")},
		{"cut inside nvidia-smi's answer", string(full[:strings.Index(string(full), h200Line)+10])},
		{"nvidia-smi's section never closed", strings.Replace(string(full), "nvidia-smi-end: 0\n", "", 1)},
		{"end marker with a value", strings.Replace(string(full), "potato-probe-end", "potato-probe-end: no", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.report))
			if !errors.Is(err, ErrIncomplete) || err.Error() != "the probe's report is incomplete" {
				t.Fatalf("Parse = %+v, %v; want ErrIncomplete", f, err)
			}
			if !reflect.DeepEqual(f, Facts{}) {
				t.Errorf("Parse gave facts from an incomplete report: %+v", f)
			}
		})
	}
}

func TestPythonError(t *testing.T) {
	for _, tc := range []struct {
		name  string
		facts Facts
		want  string // "" is no error
	}{
		{"F2", Facts{Python: "/opt/conda/bin/python3", PythonMissing: true},
			"/opt/conda/bin/python3 was not found on gpu.example.org"},
		{"too old", Facts{Python: "/usr/bin/python3", PythonVersion: "3.6.9", PythonTooOld: true},
			"/usr/bin/python3 on gpu.example.org is Python 3.6.9; the agent's trainers need 3.8 or newer"},
		{"timed out", Facts{Python: "/opt/conda/bin/python3", PythonVersion: "3.11.7", PythonFailed: PythonTimedOutText},
			"/opt/conda/bin/python3 on gpu.example.org did not finish the probe: it ran past 60 s"},
		{"crashed", Facts{Python: "python3", PythonFailed: "exit status 139"},
			"python3 on gpu.example.org did not finish the probe: exit status 139"},
		{"silent", Facts{Python: "/usr/local/bin/python3"},
			"/usr/local/bin/python3 on gpu.example.org did not finish the probe: it did not print its version"},
		{"fine", Facts{Python: "/usr/bin/python3", PythonVersion: "3.8.0"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.facts.PythonError(exampleOrg)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("PythonError = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTooOld(t *testing.T) {
	for v, want := range map[string]bool{
		"2.7.18": true, "3.6.9": true, "3.7.17": true, "3.8.0": false, "3.10.12": false,
		"3.13.1": false, "4.0.0": false, "": false, "3": false, "x.y": false,
	} {
		if got := tooOld(v); got != want {
			t.Errorf("tooOld(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestImportError(t *testing.T) {
	msg, hint := ImportError("hf-text-classification", []string{"torch", "transformers", "peft"})
	if msg != "Trainer 'hf-text-classification' could not be imported" {
		t.Errorf("msg = %q", msg)
	}
	if hint != "pip install torch transformers peft" {
		t.Errorf("hint = %q", hint)
	}
	_, hint = ImportError("sk", []string{"sklearn", "sklearn.linear_model", "PIL", "yaml"})
	if hint != "pip install scikit-learn pillow pyyaml" {
		t.Errorf("hint for import names that are not pip names = %q", hint)
	}
	if _, hint = ImportError("tfidf-logreg", nil); hint != "" {
		t.Errorf("hint with nothing missing = %q, want none", hint)
	}
}

func TestNvrtcMismatch(t *testing.T) {
	cu124 := Facts{Torch: "2.4.0+cu124", TorchCUDA: "12.4", TorchArch: strings.Fields(cu124Arch)}
	for _, tc := range []struct {
		name  string
		nvrtc string
		facts Facts
		want  string // "" is no mismatch
	}{
		{"cu13 nvrtc under cu12 torch", "13.0.48", cu124,
			`this host's torch 2.4.0+cu124 is built for CUDA 12.4 but its nvidia-cuda-nvrtc package 13.0.48 is for CUDA 13, ` +
				`so training can fail with "nvrtc: error: failed to open libnvrtc-builtins.so.13.0"`},
		{"cu12 nvrtc under cu13 torch", "12.8.93", Facts{Torch: "2.9.0", TorchCUDA: "13.0"},
			`this host's torch 2.9.0 is built for CUDA 13.0 but its nvidia-cuda-nvrtc package 12.8.93 is for CUDA 12, ` +
				`so training can fail with "nvrtc: error: failed to open libnvrtc-builtins.so.12.8"`},
		{"same major", "12.1.105", cu124, ""},
		{"no nvrtc package", "", cu124, ""},
		{"CPU torch", "13.0.48", Facts{Torch: "2.4.0+cpu"}, ""},
		{"no torch", "13.0.48", Facts{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.facts
			f.NvrtcCUDA = tc.nvrtc
			got, ok := f.NvrtcMismatch()
			if ok != (tc.want != "") || got != tc.want {
				t.Errorf("NvrtcMismatch = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}

func TestUsableGPU(t *testing.T) {
	gpus := []gpu.GPU{h200, a100, blackwell}
	for _, tc := range []struct {
		name  string
		facts Facts
		want  []bool // for h200, a100, blackwell
	}{
		{"no torch: nothing known, all usable", Facts{}, []bool{true, true, true}},
		{"torch import failed: all usable", Facts{TorchError: "OSError: x"}, []bool{true, true, true}},
		{"cu124 torch: no Blackwell kernels", Facts{Torch: "2.4.0", TorchCUDA: "12.4", TorchArch: strings.Fields(cu124Arch)},
			[]bool{true, true, false}},
		{"cu128 torch", Facts{Torch: "2.7.0", TorchCUDA: "12.8", TorchArch: strings.Fields("sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 compute_120")},
			[]bool{true, true, true}},
		{"CPU build: none usable", Facts{Torch: "2.4.0+cpu"}, []bool{false, false, false}},
		{"CPU build with a list: none usable", Facts{Torch: "2.4.0+cpu", TorchArch: []string{"sm_90"}}, []bool{false, false, false}},
		{"CUDA build that gave no list: all usable", Facts{Torch: "2.4.0", TorchCUDA: "12.4"}, []bool{true, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, g := range gpus {
				if got := tc.facts.UsableGPU(g); got != tc.want[i] {
					t.Errorf("UsableGPU(%s, %s) = %v, want %v", g.Name, g.ComputeCap, got, tc.want[i])
				}
			}
		})
	}

	// gpus: auto skips what UsableGPU refuses (S5), and F5 when it refuses all.
	cu124 := Facts{Torch: "2.4.0", TorchCUDA: "12.4", TorchArch: strings.Fields(cu124Arch)}
	best := blackwell
	best.MemoryFreeMB = 200000
	got, err := gpu.Choose([]gpu.GPU{best, a100, h200}, 2000, cu124.UsableGPU)
	if err != nil || got.UUID != h200UUID {
		t.Errorf("Choose with the cu124 torch = %s, %v; want the H200", got.Name, err)
	}
	cpu := Facts{Torch: "2.4.0+cpu"}
	if _, err := gpu.Choose(gpus, 2000, cpu.UsableGPU); err == nil || err.Error() != gpu.NoUsableGPUText {
		t.Errorf("Choose with a CPU torch: %v, want %q", err, gpu.NoUsableGPUText)
	}
	if NoKernelsMark != "(torch there has no kernels for it)" {
		t.Errorf("NoKernelsMark = %q", NoKernelsMark)
	}
}

func TestScriptPreamble(t *testing.T) {
	s := Script("/opt/conda/bin/python3", []string{"torch", "transformers", "peft"})
	want := "PYTHON='/opt/conda/bin/python3'\nPACKAGES='torch transformers peft'\n"
	if !strings.HasPrefix(s, want) {
		t.Errorf("Script begins %q, want %q", s[:min(len(s), len(want)+20)], want)
	}
	if !strings.HasSuffix(s, script) {
		t.Error("Script does not end with the probe")
	}
}
