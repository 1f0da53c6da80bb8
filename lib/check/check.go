// Package check answers potato-check(1)'s question: can a run start on a
// backend now, and where would it run?
package check

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"potato-training/lib/backend/local"
	"potato-training/lib/config"
	"potato-training/lib/gpu"
	"potato-training/lib/probe"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
)

// Report is what potato-check prints; --json prints it as it is. New
// fields may be added.
type Report struct {
	Backend string `json:"backend"`
	Type    string `json:"type"`
	// OK is true when a run could start now (exit status 0).
	OK bool `json:"ok"`
	// Summary is the first line of the report, e.g.
	// "local: this machine, CPU (2 cores)".
	Summary string      `json:"summary"`
	Device  *DeviceInfo `json:"device,omitempty"`
	GPUs    []GPUInfo   `json:"gpus"`
	// Trainer is the trainer whose verdict is the answer, TrainerFrom why
	// it is that one (--trainer, auto_retrain, the first that uses a
	// GPU); Trainers is every trainer's verdict.
	Trainer     string    `json:"trainer"`
	TrainerFrom string    `json:"trainer_from"`
	Trainers    []Verdict `json:"trainers"`
	// Python is the host's interpreter and its version (local, ssh,
	// slurm); PythonFrom says which setting named it (local).
	Python        string `json:"python,omitempty"`
	PythonVersion string `json:"python_version,omitempty"`
	PythonFrom    string `json:"python_from,omitempty"`
	// Missing lists, per Python trainer, the packages the host lacks.
	Missing map[string][]string `json:"missing_packages,omitempty"`
	// JobPython is the interpreter a SLURM job runs on the compute node;
	// Shell the login node's shell; Commands the scheduler's commands
	// found on its PATH (slurm).
	JobPython string            `json:"job_python,omitempty"`
	Shell     string            `json:"shell,omitempty"`
	Commands  map[string]string `json:"commands,omitempty"`
	// TokenIssuedAt is when the agent backend's token was issued; absent
	// before registration. LastSeen and LastHost are when and from which
	// host an agent last polled with it, LastSeenAgoS how many seconds
	// before the check; AgentPolling is true when that was within
	// heartbeat_timeout_s. AgentRun is the run an agent is training now
	// (agent).
	TokenIssuedAt *time.Time `json:"token_issued_at,omitempty"`
	LastSeen      *time.Time `json:"last_seen,omitempty"`
	LastHost      string     `json:"last_host,omitempty"`
	LastSeenAgoS  *int64     `json:"last_seen_ago_s,omitempty"`
	AgentPolling  bool       `json:"agent_polling,omitempty"`
	AgentRun      string     `json:"agent_run,omitempty"`
	Warnings      []string   `json:"warnings"`
	Problems      []string   `json:"problems"`
	// Notes are advice that neither stops a run nor warns of a fault;
	// none is given at present (the note that Potato would not show the
	// prelabels without pre_annotation.enabled was untrue of Potato 2.11
	// and later), and the list stays in the JSON, empty.
	Notes []string `json:"notes"`
	// Hints say how to fix the problems.
	Hints []string `json:"hints,omitempty"`
}

// GPUInfo is one GPU as nvidia-smi lists it.
type GPUInfo struct {
	gpu.GPU
	// NoTorchKernels marks a GPU the host's torch has no kernels for.
	NoTorchKernels bool `json:"no_torch_kernels,omitempty"`
}

// DeviceInfo is the device a run would get.
type DeviceInfo struct {
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	Device   string `json:"device"` // "cuda:0", "mps", "cpu"
	Describe string `json:"describe"`
	Cores    int    `json:"cores"`
}

// Local checks the local backend (SPEC L2): the device a local run of the
// judged trainer would use, given model_training.device, and the
// interpreter of the Python trainers (model_training.python).
func Local(ctx context.Context, cfg *config.Config, gp gpu.Probe, j Judged) Report {
	r := Report{Backend: "local", Type: config.TypeLocal, GPUs: []GPUInfo{}, Warnings: []string{}, Problems: []string{}}
	if gpus, err := gpu.Query(ctx, gp.NvidiaSMI); err == nil {
		for _, g := range gpus {
			r.GPUs = append(r.GPUs, GPUInfo{GPU: g})
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
		r.Missing = missingByTrainer(f)
	}
	var verdicts []Verdict
	for _, name := range candidates(j) {
		v := Verdict{Trainer: name}
		dev, err := local.Device(ctx, cfg, name, gp, func(w string) {
			if name == j.Name {
				r.Warnings = append(r.Warnings, w)
			}
		})
		switch {
		case err != nil:
			v.Reason = err.Error()
		case isPython(name) && pyErr != "":
			v.Reason = pyErr
		case isPython(name):
			v.Reason = pythonVerdict(name, f, "this machine", r.Missing)
		case trainer.IsExec(name):
			v.Reason = execProgram(name)
		default:
			if _, err := trainer.FindProgram("potato-agent"); err != nil {
				v.Reason = err.Error()
			}
		}
		if err == nil {
			v.Reason, v.Note = llmVerdict(j, name, dev.Kind, dev.Index, freeOf(r.GPUs, dev.Index), v.Reason)
		}
		v.OK = v.Reason == ""
		if err == nil {
			v.Device = dev.Describe()
			if name == j.Name {
				r.Device = &DeviceInfo{Kind: dev.Kind, Name: dev.Name, Device: dev.String(), Describe: dev.Describe(), Cores: dev.Cores}
				r.Summary = "local: this machine, " + dev.Describe()
			}
		}
		verdicts = append(verdicts, v)
	}
	judge(&r, j, verdicts, "local")
	return r
}

// Backend checks a configured backend for the judged trainer.
func Backend(ctx context.Context, cfg *config.Config, b *config.Backend, gp gpu.Probe, j Judged) Report {
	r := backendReport(ctx, cfg, b, gp, j)
	r.Notes = []string{}
	return r
}

func backendReport(ctx context.Context, cfg *config.Config, b *config.Backend, gp gpu.Probe, j Judged) Report {
	switch b.Type {
	case config.TypeLocal:
		return Local(ctx, cfg, gp, j)
	case config.TypeSSH:
		return SSH(ctx, b, j)
	case config.TypeSLURM:
		return SLURM(ctx, b, j)
	case config.TypeAgent:
		return Agent(cfg, b, time.Now(), j)
	}
	msg := fmt.Sprintf("checking %s backends is not available in this version", b.Type)
	return Report{Backend: b.Name, Type: b.Type, Summary: b.Label() + ": " + msg,
		GPUs: []GPUInfo{}, Warnings: []string{}, Problems: []string{msg}}
}

// WriteText prints the report for a person.
func WriteText(w io.Writer, r Report) error {
	var b strings.Builder
	b.WriteString(r.Summary + "\n")
	if r.Python != "" {
		line := strings.TrimSpace(r.Python + " " + r.PythonVersion)
		switch r.PythonFrom {
		case "":
		case trainer.PythonKey, trainer.PythonEnv:
			line += " (" + r.PythonFrom + ")"
		default:
			line += " (the default)"
		}
		fmt.Fprintf(&b, "  python: %s\n", line)
	}
	if r.Shell != "" {
		fmt.Fprintf(&b, "  shell: %s\n", r.Shell)
	}
	for _, c := range slices.Sorted(maps.Keys(r.Commands)) {
		fmt.Fprintf(&b, "  %s: %s\n", c, r.Commands[c])
	}
	if r.JobPython != "" {
		fmt.Fprintf(&b, "  job_python: %s (on the compute nodes; its packages cannot be seen from the login node)\n", r.JobPython)
	}
	for _, g := range r.GPUs {
		util := "utilisation unknown"
		if g.UtilizationPct >= 0 {
			util = fmt.Sprintf("%d%% used", g.UtilizationPct)
		}
		mem := fmt.Sprintf("%d of %d MB free", g.MemoryFreeMB, g.MemoryTotalMB)
		if g.MemoryFreeMB < 0 {
			mem = "free memory unknown"
		}
		mark := ""
		if g.NoTorchKernels {
			mark = " " + probe.NoKernelsMark
		}
		fmt.Fprintf(&b, "  GPU %d: %s, %s, %s%s\n", g.Index, g.Name, mem, util, mark)
	}
	if r.TokenIssuedAt != nil {
		fmt.Fprintf(&b, "  token: issued %s\n", r.TokenIssuedAt.UTC().Format(time.RFC3339))
		switch {
		case r.LastSeen == nil || r.LastSeenAgoS == nil:
			b.WriteString("  last_seen: never (" + msgNeverSet + ")\n")
		default:
			fmt.Fprintf(&b, "  last_seen: %s on %s (%s ago)\n", r.LastSeen.UTC().Format(time.RFC3339), hostOr(r.LastHost), ago(*r.LastSeenAgoS))
		}
	}
	if r.Device != nil && r.Type != config.TypeLocal {
		fmt.Fprintf(&b, "  a run would get: %s\n", r.Device.Describe)
	}
	if r.Trainer != "" {
		fmt.Fprintf(&b, "  trainer: %s (%s)\n", r.Trainer, r.TrainerFrom)
	}
	for _, v := range r.Trainers {
		line := "can start"
		if v.Device != "" {
			line += " on " + v.Device
		}
		if !v.OK {
			line = "cannot start: " + v.Reason
		} else if v.Note != "" {
			line += "; " + v.Note
		}
		fmt.Fprintf(&b, "  %s: %s\n", v.Trainer, line)
	}
	for _, t := range slices.Sorted(maps.Keys(r.Missing)) {
		fmt.Fprintf(&b, "  %s lacks: %s\n", t, strings.Join(r.Missing[t], " "))
	}
	for _, wn := range r.Warnings {
		b.WriteString("  warning: " + wn + "\n")
	}
	for _, p := range r.Problems {
		if !strings.HasSuffix(r.Summary, p) {
			b.WriteString("  problem: " + p + "\n")
		}
	}
	for _, h := range r.Hints {
		b.WriteString("  hint: " + h + "\n")
	}
	for _, n := range r.Notes {
		b.WriteString("  note: " + n + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints the report as JSON.
func WriteJSON(w io.Writer, r Report) error {
	return rundir.WriteJSON(w, r)
}
