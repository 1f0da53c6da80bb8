package check

import (
	"context"
	"fmt"
	"strings"

	sshbackend "potato-training/lib/backend/ssh"
	"potato-training/lib/config"
	"potato-training/lib/gpu"
	"potato-training/lib/probe"
	"potato-training/lib/sshx"
	"potato-training/lib/trainer"
)

// SSH connects to an ssh backend's host (SPEC S5): its Python, each GPU
// with its free memory and utilisation, the GPU a run of the judged trainer
// would get, the packages the Python trainers lack there, and each
// trainer's verdict.
func SSH(ctx context.Context, b *config.Backend, j Judged) Report {
	r, f, ok := probeHost(ctx, b, pythonPackages())
	if !ok {
		judge(&r, j, unreachable(j, r.Problems[0]), "")
		return r
	}
	for _, g := range f.GPUs {
		r.GPUs = append(r.GPUs, GPUInfo{GPU: g, NoTorchKernels: !f.UsableGPU(g)})
	}
	r.Python = f.Python
	if r.Python == "" {
		r.Python = b.Python
	}
	r.PythonVersion = f.PythonVersion
	host := fmt.Sprintf("%s (%s %s)", b.Label(), f.OS, f.Arch)
	if f.NvidiaSMIError != "" {
		r.Warnings = append(r.Warnings, "nvidia-smi: "+f.NvidiaSMIError)
	}
	if f.TorchError != "" {
		r.Warnings = append(r.Warnings, "torch does not import: "+f.TorchError)
	}
	r.Missing = missingByTrainer(f)
	if msg, bad := f.NvrtcMismatch(); bad {
		r.Warnings = append(r.Warnings, msg)
	}
	var verdicts []Verdict
	for _, name := range candidates(j) {
		v := Verdict{Trainer: name}
		dev := ""
		switch {
		case localOnly(name) != "":
			v.Reason = localOnly(name)
		case !trainer.UsesGPU(name):
			dev = "cpu"
		case isPython(name):
			// The device is reported even when a package is missing: it
			// is the one the run would get once it is installed.
			v.Reason = pythonVerdict(name, f, b.Host, r.Missing)
			if f.PythonError(b.Host) != nil {
				break
			}
			var err error
			if dev, _, err = sshbackend.ChooseDevice(b, f, sshbackend.NeedsTorch(name, nil)); err != nil {
				v.Reason = strings.TrimPrefix(v.Reason+"; "+err.Error(), "; ")
			} else if dev == "cpu" && f.CPUTorch() && len(f.GPUs) > 0 && !b.GPUs.None {
				r.Warnings = append(r.Warnings, fmt.Sprintf(probe.CPUTorchFormat, f.Torch, name, b.Host))
			}
		default:
			var err error
			if dev, _, err = sshbackend.ChooseDevice(b, f, false); err != nil {
				v.Reason = err.Error()
			}
		}
		if dev != "" {
			free, idx := -1, 0
			if _, err := fmt.Sscanf(dev, "cuda:%d", &idx); err == nil {
				free = freeOf(r.GPUs, idx)
			}
			v.Reason, v.Note = llmVerdict(j, name, deviceInfo(dev, f).Kind, idx, free, v.Reason)
		}
		v.OK = v.Reason == ""
		if dev != "" {
			info := deviceInfo(dev, f)
			v.Device = info.Describe
			if name == j.Name {
				r.Device = info
			}
		}
		verdicts = append(verdicts, v)
	}
	r.Summary = host + ": a run can start"
	judge(&r, j, verdicts, host)
	return r
}

// deviceInfo describes a device a remote run would get: "cuda:N" with
// its GPU's name and free memory, pinned GPUs, or the CPU.
func deviceInfo(dev string, f probe.Facts) *DeviceInfo {
	info := &DeviceInfo{Device: dev, Kind: gpu.KindCPU, Name: "CPU", Describe: "CPU"}
	if strings.HasPrefix(dev, "cuda:") {
		info.Kind = gpu.KindCUDA
		info.Describe = dev
		for _, g := range f.GPUs {
			if dev == fmt.Sprintf("cuda:%d", g.Index) {
				info.Name = g.Name
				info.Describe = fmt.Sprintf("GPU %d, %s, %d MB free (%s)", g.Index, g.Name, g.MemoryFreeMB, dev)
			}
		}
	}
	return info
}

// unreachable is every trainer's verdict on a host the check could not
// probe: none can start, for the same reason.
func unreachable(j Judged, why string) []Verdict {
	var out []Verdict
	for _, name := range candidates(j) {
		v := Verdict{Trainer: name, Reason: why}
		if lo := localOnly(name); lo != "" {
			v.Reason = lo
		}
		out = append(out, v)
	}
	return out
}

// probeHost logs in to b's host and runs the probe, looking for pkgs; a
// login or probe that fails is the report's first problem, and ok is
// false.
func probeHost(ctx context.Context, b *config.Backend, pkgs []string) (r Report, f probe.Facts, ok bool) {
	r = Report{Backend: b.Name, Type: b.Type, GPUs: []GPUInfo{}, Warnings: []string{}, Problems: []string{}}
	conn, err := sshx.Dial(ctx, sshx.TargetOf(b), "")
	if err == nil {
		defer conn.Close()
		f, err = sshbackend.Probe(ctx, conn, b, pkgs)
	}
	if err != nil {
		r.Summary = b.Label() + ": " + err.Error()
		r.Problems = append(r.Problems, err.Error())
		return r, f, false
	}
	return r, f, true
}
