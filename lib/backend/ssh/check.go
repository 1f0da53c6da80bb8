package ssh

import (
	"context"
	"fmt"
	"strings"

	"potato-training/lib/check"
	"potato-training/lib/config"
	"potato-training/lib/gpu"
	"potato-training/lib/probe"
	"potato-training/lib/sshx"
	"potato-training/lib/trainer"
)

// Check connects to an ssh backend's host (SPEC S5): its Python, each GPU
// with its free memory and utilisation, the GPU a run of the judged trainer
// would get, the packages the Python trainers lack there, and each
// trainer's verdict.
func Check(ctx context.Context, b *config.Backend, j check.Judged) check.Report {
	r, f, ok := ProbeHost(ctx, b, label(b), check.PythonPackages())
	if !ok {
		check.Conclude(&r, j, check.Unreachable(j, r.Problems[0]), "")
		return r
	}
	for _, g := range f.GPUs {
		r.GPUs = append(r.GPUs, check.GPUInfo{GPU: g, NoTorchKernels: !f.UsableGPU(g)})
	}
	r.Python = f.Python
	if r.Python == "" {
		r.Python = b.Python
	}
	r.PythonVersion = f.PythonVersion
	host := fmt.Sprintf("%s (%s %s)", label(b), f.OS, f.Arch)
	if f.NvidiaSMIError != "" {
		r.Warnings = append(r.Warnings, "nvidia-smi: "+f.NvidiaSMIError)
	}
	if f.TorchError != "" {
		r.Warnings = append(r.Warnings, "torch does not import: "+f.TorchError)
	}
	r.Missing = check.MissingByTrainer(f)
	if msg, bad := f.NvrtcMismatch(); bad {
		r.Warnings = append(r.Warnings, msg)
	}
	var verdicts []check.Verdict
	for _, name := range check.Candidates(j) {
		v := check.Verdict{Trainer: name}
		dev := ""
		switch {
		case check.LocalOnly(name) != "":
			v.Reason = check.LocalOnly(name)
		case !trainer.UsesGPU(name):
			dev = "cpu"
		case check.IsPython(name):
			// The device is reported even when a package is missing: it
			// is the one the run would get once it is installed.
			v.Reason = check.PythonVerdict(name, f, b.Host, r.Missing)
			if f.PythonError(b.Host) != nil {
				break
			}
			var err error
			if dev, _, err = ChooseDevice(b, f, trainer.NeedsTorch(name, nil)); err != nil {
				v.Reason = strings.TrimPrefix(v.Reason+"; "+err.Error(), "; ")
			} else if dev == "cpu" && f.CPUTorch() && len(f.GPUs) > 0 && !b.GPUs.None {
				r.Warnings = append(r.Warnings, fmt.Sprintf(probe.CPUTorchFormat, f.Torch, name, b.Host))
			}
		default:
			var err error
			if dev, _, err = ChooseDevice(b, f, false); err != nil {
				v.Reason = err.Error()
			}
		}
		if dev != "" {
			free, idx := -1, 0
			if _, err := fmt.Sscanf(dev, "cuda:%d", &idx); err == nil {
				free = check.FreeOf(r.GPUs, idx)
			}
			v.Reason, v.Note = check.LLMVerdict(j, name, deviceInfo(dev, f).Kind, idx, free, v.Reason)
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
	check.Conclude(&r, j, verdicts, host)
	return r
}

// deviceInfo describes a device a remote run would get: "cuda:N" with
// its GPU's name and free memory, pinned GPUs, or the CPU.
func deviceInfo(dev string, f probe.Facts) *check.DeviceInfo {
	info := &check.DeviceInfo{Device: dev, Kind: gpu.KindCPU, Name: "CPU", Describe: "CPU"}
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

// ProbeHost logs in to b's host and runs the probe, looking for pkgs; a
// login or probe that fails is the report's first problem, after the
// backend's label on its first line, and ok is false. The SLURM backend's
// check starts with it too.
func ProbeHost(ctx context.Context, b *config.Backend, label string, pkgs []string) (r check.Report, f probe.Facts, ok bool) {
	r = check.Report{Backend: b.Name, Type: b.Type, GPUs: []check.GPUInfo{}, Warnings: []string{}, Problems: []string{}}
	conn, err := sshx.Dial(ctx, sshx.TargetOf(b), "")
	if err == nil {
		defer conn.Close()
		f, err = Probe(ctx, conn, b, pkgs)
	}
	if err != nil {
		r.Summary = label + ": " + err.Error()
		r.Problems = append(r.Problems, err.Error())
		return r, f, false
	}
	return r, f, true
}
