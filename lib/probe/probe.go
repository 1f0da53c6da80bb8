// Package probe is the one POSIX sh script sent on ssh's standard input that
// reports a host's facts in one round trip, and the parser of its report.
//
// Script gives the text for `sh` on the host (SPEC S3, S5, S7); Parse turns
// what it printed into Facts, whose methods word the failures of SPEC F2,
// F4 and F11 and say which GPUs the host's torch can use (S5, F5).
//
// # The report
//
// One fact a line, "key: value", between a begin and an end marker; lines
// before the begin marker (a login banner) and lines with keys Parse does
// not know are skipped, so new facts may be added:
//
//	potato-probe-begin
//	uname: Linux x86_64                            uname -s, uname -m
//	python: /opt/conda/bin/python3 3.11.7          sys.executable, version
//	python-missing: /opt/conda/bin/python3         instead, as configured
//	python-failed: 124 /opt/conda/bin/python3      exit status, as configured
//	torch: 2.4.0+cu124 12.4                        "none" for a CPU build
//	torch-arch: sm_50 sm_60 sm_70 sm_80 sm_90      kernels it was built with
//	torch-error: OSError: libcudart.so.12: ...     import torch failed
//	missing: transformers peft                     not found by find_spec
//	nvrtc: nvidia-cuda-nvrtc-cu13 13.0.48          one line a distribution
//	nvidia-smi-begin: 7                            fields queried: 7 or 6
//	0, GPU-5d2f..., NVIDIA H200, 143771, 143252, 0, 9.0
//	nvidia-smi-end: 0                              nvidia-smi's exit status
//	nvidia-smi-missing                             instead of the section
//	potato-probe-end
//
// The Python facts come from one run of the interpreter (bounded to 60 s
// where timeout(1) exists), which stops after its version when that is
// older than 3.8. The torch lines appear only when torch is found.
package probe

import (
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"potato-training/lib/gpu"
	"potato-training/lib/shell"
)

//go:embed probe.sh
var script string

// User-visible texts (SPEC F2, F4, F11).
const (
	// PythonMissingFormat is F2: the interpreter as configured, the host.
	PythonMissingFormat = "%s was not found on %s"
	// PythonTooOldFormat: the interpreter, the host, its version.
	PythonTooOldFormat = "%s on %s is Python %s; the agent's trainers need 3.8 or newer"
	// PythonFailedFormat: the interpreter, the host, why (one of the
	// reasons below).
	PythonFailedFormat = "%s on %s did not finish the probe: %s"
	// PythonTimedOutText, PythonExitFormat and PythonSilentText are
	// PythonFailedFormat's reasons.
	PythonTimedOutText = "it ran past 60 s"
	PythonExitFormat   = "exit status %d"
	PythonSilentText   = "it did not print its version"
	// ImportErrorFormat is F4: the trainer's name.
	ImportErrorFormat = "Trainer '%s' could not be imported"
	// InstallHintFormat is F4's hint: the pip names, separated by spaces.
	InstallHintFormat = "pip install %s"
	// NvrtcMismatchFormat is F11: torch's version, torch's CUDA version,
	// the nvidia-cuda-nvrtc version, its CUDA major, and its major.minor.
	NvrtcMismatchFormat = "this host's torch %s is built for CUDA %s but its nvidia-cuda-nvrtc package %s is for CUDA %s, " +
		"so training can fail with \"nvrtc: error: failed to open libnvrtc-builtins.so.%s\""
	// NvidiaSMIFailedFormat is Facts.NvidiaSMIError for a failing
	// nvidia-smi: its exit status, its first line.
	NvidiaSMIFailedFormat = "nvidia-smi failed (exit status %d): %s"
	// NvidiaSMITimedOutText is Facts.NvidiaSMIError for a hanging one.
	NvidiaSMITimedOutText = "nvidia-smi did not answer within 10 s"
	// NoKernelsMark follows a GPU that UsableGPU refuses (SPEC S5).
	NoKernelsMark = "(torch there has no kernels for it)"
	// IncompleteText is ErrIncomplete's text.
	IncompleteText = "the probe's report is incomplete"
)

// ErrIncomplete is Parse's error for a report without its end marker: the
// connection dropped, or sh did not run the script to its end.
var ErrIncomplete = errors.New(IncompleteText)

const (
	beginMarker      = "potato-probe-begin"
	endMarker        = "potato-probe-end"
	smiBeginKey      = "nvidia-smi-begin"
	smiEndKey        = "nvidia-smi-end"
	smiMissingMarker = "nvidia-smi-missing"
	noDevicesMarker  = "No devices were found"
	timeoutStatus    = 124 // timeout(1)'s exit status
	minPython        = 3*100 + 8
)

// Facts is what the probe found on a host.
type Facts struct {
	OS   string `json:"os"`   // uname -s: "Linux"
	Arch string `json:"arch"` // uname -m: "x86_64"

	// Python is the interpreter: as it names itself (sys.executable) when
	// it ran, else as configured.
	Python        string `json:"python"`
	PythonVersion string `json:"python_version"` // "3.11.7"; "" when it did not say
	PythonMissing bool   `json:"python_missing"`
	PythonTooOld  bool   `json:"python_too_old"` // older than 3.8
	// PythonFailed is why the interpreter did not finish: PythonTimedOutText
	// or PythonExitFormat's text; "" when it did.
	PythonFailed string `json:"python_failed,omitempty"`
	// Missing are the import names asked for that the interpreter cannot
	// find, torch included when it is found but its import fails.
	Missing []string `json:"missing"`

	// NvidiaSMI is whether nvidia-smi is on the host's PATH; GPUs is its
	// list, empty when it finds no device or fails, and NvidiaSMIError
	// says why it failed or why its answer did not parse.
	NvidiaSMI      bool      `json:"nvidia_smi"`
	NvidiaSMIError string    `json:"nvidia_smi_error,omitempty"`
	GPUs           []gpu.GPU `json:"gpus"`

	// Torch is torch.__version__, "" when torch is absent or its import
	// failed (TorchError says how). TorchCUDA is torch.version.cuda, ""
	// for a CPU build. TorchArch is the kernels it was built with.
	Torch      string   `json:"torch,omitempty"`
	TorchCUDA  string   `json:"torch_cuda,omitempty"`
	TorchArch  []string `json:"torch_arch,omitempty"`
	TorchError string   `json:"torch_error,omitempty"`

	// NvrtcCUDA is the version of the pip package nvidia-cuda-nvrtc
	// (-cu12, -cu13 or unsuffixed), "13.0.48"; "" when none is installed.
	// With several, the first whose CUDA major differs from torch's.
	NvrtcCUDA string `json:"nvrtc_cuda,omitempty"`

	// Commands maps each of sbatch, squeue, scancel and scontrol found on
	// the host's PATH to its path.
	Commands map[string]string `json:"commands,omitempty"`
	// Shell is the login shell ($SHELL of the session).
	Shell string `json:"shell,omitempty"`
}

// Script is the text to feed to `sh` on the host's standard input: a
// preamble setting PYTHON and PACKAGES, single-quoted, then the probe.
// python is the configured interpreter, a path or a name looked up on PATH
// (a leading "~/" is the host's home); packages are import names, which
// cannot hold white space.
func Script(python string, packages []string) string {
	return ScriptFor(python, packages, true)
}

// ScriptFor is Script, with torch's facts (Torch, TorchArch, TorchError,
// NvrtcCUDA) only when torch is true or packages names torch: importing
// torch takes seconds, which a run whose trainer does not use it need not
// wait.
func ScriptFor(python string, packages []string, torch bool) string {
	t := "torch"
	if !torch {
		t = "no-torch"
	}
	return "PYTHON=" + shell.SingleQuote(python) + "\n" +
		"PACKAGES=" + shell.SingleQuote(strings.Join(packages, " ")) + "\n" +
		"TORCH=" + t + "\n" +
		script
}

// Parse reads the probe's report. Lines before the begin marker and
// unknown lines are skipped; a report without the end marker is
// ErrIncomplete, whatever it held.
func Parse(report []byte) (Facts, error) {
	var (
		f       Facts
		begun   bool
		inSMI   bool
		smiCap  bool
		smiOut  []string
		nvrtc   []string
		lines   = strings.Split(string(report), "\n")
		trimmed = func(s string) string { return strings.TrimSpace(strings.TrimSuffix(s, "\r")) }
	)
	for _, raw := range lines {
		line := trimmed(raw)
		if !begun {
			begun = line == beginMarker
			continue
		}
		key, value, _ := strings.Cut(line, ":")
		value = strings.TrimSpace(value)
		if inSMI {
			if key != smiEndKey {
				smiOut = append(smiOut, raw)
				continue
			}
			inSMI = false
			status, _ := strconv.Atoi(value)
			f.GPUs, f.NvidiaSMIError = parseSMI(strings.Join(smiOut, "\n"), smiCap, status)
			continue
		}
		switch key {
		case endMarker:
			if value != "" || line != endMarker {
				continue
			}
			if f.Torch != "" {
				f.NvrtcCUDA = pickNvrtc(nvrtc, f.TorchCUDA)
			} else if len(nvrtc) > 0 {
				f.NvrtcCUDA = nvrtc[0]
			}
			return f, nil
		case "uname":
			f.OS, f.Arch, _ = strings.Cut(value, " ")
			f.Arch = strings.TrimSpace(f.Arch)
		case "python":
			if i := strings.LastIndexByte(value, ' '); i > 0 {
				f.Python, f.PythonVersion = value[:i], value[i+1:]
			} else {
				f.PythonVersion = value
			}
			f.PythonTooOld = tooOld(f.PythonVersion)
		case "python-missing":
			f.Python, f.PythonMissing = value, true
		case "python-failed":
			st, path, _ := strings.Cut(value, " ")
			if f.Python == "" {
				f.Python = path
			}
			if n, err := strconv.Atoi(st); err == nil && n == timeoutStatus {
				f.PythonFailed = PythonTimedOutText
			} else {
				f.PythonFailed = fmt.Sprintf(PythonExitFormat, n)
			}
		case "missing":
			f.Missing = strings.Fields(value)
		case "torch":
			fields := strings.Fields(value)
			if len(fields) > 0 {
				f.Torch = fields[0]
			}
			if len(fields) > 1 && fields[1] != "none" {
				f.TorchCUDA = fields[1]
			}
		case "command":
			if name, path, ok := strings.Cut(value, " "); ok {
				if f.Commands == nil {
					f.Commands = map[string]string{}
				}
				f.Commands[name] = strings.TrimSpace(path)
			}
		case "shell":
			f.Shell = value
		case "torch-arch":
			f.TorchArch = strings.Fields(value)
		case "torch-error":
			f.TorchError = value
		case "nvrtc":
			if fields := strings.Fields(value); len(fields) == 2 {
				nvrtc = append(nvrtc, fields[1])
			}
		case smiBeginKey:
			f.NvidiaSMI, inSMI, smiCap, smiOut = true, true, value != "6", nil
		case smiMissingMarker:
			if line == smiMissingMarker {
				f.NvidiaSMI = false
			}
		}
	}
	return Facts{}, ErrIncomplete
}

// parseSMI reads the nvidia-smi section as gpu.Query reads nvidia-smi.
func parseSMI(out string, withCap bool, status int) ([]gpu.GPU, string) {
	switch {
	case status == 0:
		gpus, err := gpu.ParseQuery([]byte(out), withCap)
		if err != nil {
			return nil, err.Error()
		}
		return gpus, ""
	case strings.Contains(out, noDevicesMarker):
		return nil, ""
	case status == timeoutStatus:
		return nil, NvidiaSMITimedOutText
	}
	first := ""
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			first = l
			break
		}
	}
	return nil, fmt.Sprintf(NvidiaSMIFailedFormat, status, first)
}

// pickNvrtc is the nvrtc version that matters: one for another CUDA major
// than torch's is the one that breaks it.
func pickNvrtc(versions []string, torchCUDA string) string {
	if len(versions) == 0 {
		return ""
	}
	for _, v := range versions {
		if torchCUDA != "" && cudaMajor(v) != cudaMajor(torchCUDA) {
			return v
		}
	}
	return versions[0]
}

func cudaMajor(v string) string {
	major, _, _ := strings.Cut(v, ".")
	return major
}

// tooOld reports a version older than 3.8; one it cannot read is not.
func tooOld(version string) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return err1 == nil && err2 == nil && major*100+minor < minPython
}

// PythonError is the interpreter's failure on host (SPEC F2 and the
// too-old case), or nil when it ran and is 3.8 or newer.
func (f Facts) PythonError(host string) error {
	switch {
	case f.PythonMissing:
		return fmt.Errorf(PythonMissingFormat, f.Python, host)
	case f.PythonTooOld:
		return fmt.Errorf(PythonTooOldFormat, f.Python, host, f.PythonVersion)
	case f.PythonFailed != "":
		return fmt.Errorf(PythonFailedFormat, f.Python, host, f.PythonFailed)
	case f.PythonVersion == "":
		return fmt.Errorf(PythonFailedFormat, f.Python, host, PythonSilentText)
	}
	return nil
}

// ImportError is F4 for a trainer whose import names missing the host's
// interpreter lacks: the message, and a hint naming their pip packages
// ("" when missing is empty).
func ImportError(trainer string, missing []string) (msg, hint string) {
	msg = fmt.Sprintf(ImportErrorFormat, trainer)
	var pips []string
	for _, name := range missing {
		top, _, _ := strings.Cut(name, ".")
		if pip, ok := pipNames[top]; ok {
			top = pip
		}
		if top != "" && !slices.Contains(pips, top) {
			pips = append(pips, top)
		}
	}
	if len(pips) > 0 {
		hint = fmt.Sprintf(InstallHintFormat, strings.Join(pips, " "))
	}
	return msg, hint
}

// pipNames are the import names whose pip package is named otherwise.
var pipNames = map[string]string{
	"sklearn": "scikit-learn",
	"skimage": "scikit-image",
	"PIL":     "pillow",
	"cv2":     "opencv-python",
	"yaml":    "pyyaml",
	"bs4":     "beautifulsoup4",
}

// NvrtcMismatch is F11: the message when the host's torch and its
// nvidia-cuda-nvrtc package are for different CUDA majors, and whether
// they are.
func (f Facts) NvrtcMismatch() (string, bool) {
	if f.Torch == "" || f.TorchCUDA == "" || f.NvrtcCUDA == "" {
		return "", false
	}
	major := cudaMajor(f.NvrtcCUDA)
	if major == cudaMajor(f.TorchCUDA) {
		return "", false
	}
	majorMinor := major
	if parts := strings.SplitN(f.NvrtcCUDA, ".", 3); len(parts) >= 2 {
		majorMinor = parts[0] + "." + parts[1]
	}
	return fmt.Sprintf(NvrtcMismatchFormat, f.Torch, f.TorchCUDA, f.NvrtcCUDA, major, majorMinor), true
}

// UsableGPU is whether the host's torch has kernels for g, the usable of
// gpu.Choose (SPEC S5). Without torch nothing is known and every GPU is
// usable; a CPU build of torch (no torch.version.cuda) can use none; a CUDA
// build is judged by gpu.TorchSupports on its arch list, and one whose list
// is empty (torch did not give it) can use any.
func (f Facts) UsableGPU(g gpu.GPU) bool {
	switch {
	case f.Torch == "":
		return true
	case f.TorchCUDA == "":
		return false
	case len(f.TorchArch) == 0:
		return true
	}
	return gpu.TorchSupports(f.TorchArch, g.ComputeCap)
}

// CPUTorchFormat is the run log's warning when a trainer that needs torch
// trains on the CPU of a host with GPUs because the host's torch is a CPU
// build (torch's version, then the host).
const CPUTorchFormat = "this host's torch %s is a CPU build, so %s trains on the CPU of %s"

// CPUTorch is whether the host's torch imports and is a CPU build.
func (f Facts) CPUTorch() bool { return f.Torch != "" && f.TorchCUDA == "" }

// GPUFilter is the usable of gpu.Choose for a trainer. The torch checks
// apply only to a trainer that needs torch: for any other (the built-in
// tfidf-logreg) every GPU is usable, whatever torch the host has.
func (f Facts) GPUFilter(needsTorch bool) func(gpu.GPU) bool {
	if !needsTorch {
		return func(gpu.GPU) bool { return true }
	}
	return f.UsableGPU
}
