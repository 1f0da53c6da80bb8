package slurm

import (
	"context"
	"fmt"
	"maps"
	"slices"

	sshbackend "potato-training/lib/backend/ssh"
	"potato-training/lib/check"
	"potato-training/lib/config"
	"potato-training/lib/trainer"
)

// Check connects to a cluster's login node (SPEC M4, F8): sbatch, squeue
// and scancel on PATH with the backend's env, scontrol where present,
// remote_dir not under /tmp, and the login node's Python and shell; it
// names the job_python the job will use, whose packages it cannot see
// from the login node.
func Check(ctx context.Context, b *config.Backend, j check.Judged) check.Report {
	r, f, ok := sshbackend.ProbeHost(ctx, b, label(b), nil)
	if !ok {
		check.Conclude(&r, j, check.Unreachable(j, r.Problems[0]), "")
		return r
	}
	r.Python = f.Python
	if r.Python == "" {
		r.Python = b.Python
	}
	r.PythonVersion = f.PythonVersion
	if f.PythonMissing {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s is not on the login node (the agent needs none there)", b.Python))
	}
	r.JobPython = b.JobPython
	if r.JobPython == "" {
		r.JobPython = b.Python
	}
	r.Shell = f.Shell
	r.Commands = map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(f.Commands)) {
		r.Commands[k] = f.Commands[k]
	}
	c := CheckHost(b, f)
	r.Problems = append(r.Problems, c.Problems...)
	r.Warnings = append(r.Warnings, c.Warnings...)
	r.Hints = append(r.Hints, c.Hints...)
	host := fmt.Sprintf("%s (%s %s)", label(b), f.OS, f.Arch)
	var verdicts []check.Verdict
	for _, name := range check.Candidates(j) {
		v := check.Verdict{Trainer: name, OK: true}
		dev := &check.DeviceInfo{Kind: "slurm", Name: "SLURM job", Device: "cpu", Describe: "a SLURM job without gres (CPU only)"}
		switch g := b.Gres; {
		case check.LocalOnly(name) != "":
			v.OK, v.Reason, dev = false, check.LocalOnly(name), nil
		case !trainer.UsesGPU(name):
			dev.Describe = "the CPUs of a SLURM job"
		case g != "":
			dev.Device = "cuda"
			dev.Describe = "a SLURM job with gres " + g
		}
		if len(r.Problems) > 0 {
			v.OK, v.Reason = false, r.Problems[0]
		}
		if dev != nil && v.OK {
			if why := check.QuantizeReason(j, name, dev.Device); why != "" {
				v.OK, v.Reason = false, why
			}
		}
		if check.IsPython(name) {
			v.Note = "its packages on the compute nodes cannot be seen from the login node"
		}
		if dev != nil {
			v.Device = dev.Describe
			if name == j.Name {
				r.Device = dev
			}
		}
		verdicts = append(verdicts, v)
	}
	if len(r.Problems) == 0 {
		r.Summary = host + ": a run can start"
	} else {
		r.Summary = host + ": " + r.Problems[0]
	}
	check.Conclude(&r, j, verdicts, host)
	return r
}
