package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"potato-training/lib/check"
	"potato-training/lib/config"
	"potato-training/lib/gpu"
	"potato-training/lib/probe"
	"potato-training/lib/trainer"
)

// Check checks the local backend (SPEC L2): the device a local run of the
// judged trainer would use, given model_training.device, and the
// interpreter of the Python trainers (model_training.python).
func Check(ctx context.Context, cfg *config.Config, gp gpu.Probe, j check.Judged) check.Report {
	r := check.Report{Backend: "local", Type: config.TypeLocal, GPUs: []check.GPUInfo{}, Warnings: []string{}, Problems: []string{}, ThisMachine: true}
	if gpus, err := gpu.Query(ctx, gp.NvidiaSMI); err == nil {
		for _, g := range gpus {
			r.GPUs = append(r.GPUs, check.GPUInfo{GPU: g})
		}
	}
	py := trainer.LocalPythonOf(cfg)
	r.Python, r.PythonFrom = py.Name, py.From
	pyErr := ""
	var f probe.Facts
	if path, err := py.Find(); err != nil {
		pyErr = err.Error()
	} else if f, err = probeLocal(ctx, path); err != nil {
		pyErr = err.Error()
	} else {
		r.Python, r.PythonVersion = f.Python, f.PythonVersion
		r.Missing = check.MissingByTrainer(f)
	}
	var verdicts []check.Verdict
	for _, name := range check.Candidates(j) {
		v := check.Verdict{Trainer: name}
		dev, err := Device(ctx, cfg, name, gp, func(w string) {
			if name == j.Name {
				r.Warnings = append(r.Warnings, w)
			}
		})
		switch {
		case err != nil:
			v.Reason = err.Error()
		case check.IsPython(name) && pyErr != "":
			v.Reason = pyErr
		case check.IsPython(name):
			v.Reason = check.PythonVerdict(name, f, "this machine", r.Missing)
		case trainer.IsExec(name):
			v.Reason = execProgram(name)
		default:
			if _, err := trainer.FindProgram("potato-agent"); err != nil {
				v.Reason = err.Error()
			}
		}
		if err == nil {
			v.Reason, v.Note = check.LLMVerdict(j, name, dev.Kind, dev.Index, check.FreeOf(r.GPUs, dev.Index), v.Reason)
		}
		v.OK = v.Reason == ""
		if err == nil {
			v.Device = dev.Describe()
			if name == j.Name {
				r.Device = &check.DeviceInfo{Kind: dev.Kind, Name: dev.Name, Device: dev.String(), Describe: dev.Describe(), Cores: dev.Cores}
				r.Summary = "local: this machine, " + dev.Describe()
			}
		}
		verdicts = append(verdicts, v)
	}
	check.Conclude(&r, j, verdicts, "local")
	return r
}

// execProgram is why an exec: trainer's program cannot run here, or "".
func execProgram(name string) string {
	p := strings.TrimPrefix(name, trainer.ExecPrefix)
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return fmt.Sprintf("%s was not found on this machine", p)
	case st.IsDir() || st.Mode()&0o111 == 0:
		return fmt.Sprintf("%s is not an executable file", p)
	}
	return ""
}

// probeLocal runs the probe on this machine, with python and the Python
// trainers' packages, without importing torch (a local run's device comes
// from nvidia-smi, not from torch).
func probeLocal(ctx context.Context, python string) (probe.Facts, error) {
	cmd := exec.CommandContext(ctx, "sh", "-s")
	cmd.Stdin = strings.NewReader(probe.ScriptFor(python, check.PythonPackages(), false))
	out, err := cmd.Output()
	if err != nil {
		return probe.Facts{}, fmt.Errorf("the probe of this machine failed: %v", err)
	}
	return probe.Parse(out)
}
