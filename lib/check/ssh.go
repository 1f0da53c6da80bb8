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
)

// pythonTrainers are the trainers whose packages the check looks for.
var pythonTrainers = []string{"hf-text-classification"}

// SSH connects to an ssh backend's host (SPEC S5): its Python, each GPU
// with its free memory and utilisation, the GPU a run would get, and the
// packages the Python trainers lack there.
func SSH(ctx context.Context, b *config.Backend) Report {
	seen := map[string]bool{}
	var pkgs []string
	for _, t := range pythonTrainers {
		for _, p := range sshbackend.TrainerPackages(t, nil) {
			if !seen[p] {
				seen[p] = true
				pkgs = append(pkgs, p)
			}
		}
	}
	r, f, ok := probeHost(ctx, b, pkgs)
	if !ok {
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
	// The built-in trainer needs no Python: a missing interpreter stops
	// only the Python trainers, so it is a warning.
	if err := f.PythonError(b.Host); err != nil {
		r.Warnings = append(r.Warnings, err.Error()+" (the Python trainers cannot run there; the built-in tfidf-logreg can)")
	}
	if f.NvidiaSMIError != "" {
		r.Warnings = append(r.Warnings, "nvidia-smi: "+f.NvidiaSMIError)
	}
	if f.TorchError != "" {
		r.Warnings = append(r.Warnings, "torch does not import: "+f.TorchError)
	}
	missing := map[string]bool{}
	for _, m := range f.Missing {
		missing[m] = true
	}
	for _, t := range pythonTrainers {
		var lacks []string
		for _, p := range sshbackend.TrainerPackages(t, nil) {
			if missing[p] {
				lacks = append(lacks, p)
			}
		}
		if len(lacks) > 0 && !f.PythonMissing {
			if r.Missing == nil {
				r.Missing = map[string][]string{}
			}
			r.Missing[t] = lacks
			msg, hint := probe.ImportError(t, lacks)
			r.Warnings = append(r.Warnings, msg+" ("+hint+")")
		}
	}
	if msg, bad := f.NvrtcMismatch(); bad {
		r.Warnings = append(r.Warnings, msg)
	}
	// The torch trainers' device: what the host's torch allows them does
	// not keep the built-in trainer from running, so it is a warning.
	for _, t := range pythonTrainers {
		if !sshbackend.NeedsTorch(t, nil) || f.PythonMissing || f.Torch == "" {
			continue
		}
		switch dev, _, err := sshbackend.ChooseDevice(b, f, true); {
		case err != nil:
			r.Warnings = append(r.Warnings, t+": "+err.Error())
		case dev == "cpu" && f.CPUTorch() && len(f.GPUs) > 0 && !b.GPUs.None:
			r.Warnings = append(r.Warnings, fmt.Sprintf(probe.CPUTorchFormat, f.Torch, t, b.Host))
		}
	}
	// The device line is the built-in trainer's, which needs no torch.
	dev, _, err := sshbackend.ChooseDevice(b, f, false)
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
	} else {
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
		r.Device = info
	}
	r.OK = len(r.Problems) == 0
	if r.OK {
		r.Summary = host + ": a run can start"
	} else {
		r.Summary = host + ": " + r.Problems[0]
	}
	return r
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
