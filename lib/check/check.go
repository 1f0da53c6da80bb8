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

	"potato-training/lib/config"
	"potato-training/lib/gpu"
	"potato-training/lib/probe"
	"potato-training/lib/rundir"
	"potato-training/lib/validate"
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
	// Python is the host's interpreter and its version (ssh, slurm).
	Python        string `json:"python,omitempty"`
	PythonVersion string `json:"python_version,omitempty"`
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
	// Notes are advice that neither stops a run nor warns of a fault
	// (validate.PrelabelsHidden).
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

// Local checks the local backend (SPEC L2): the device a local run would
// use, given model_training.device.
func Local(ctx context.Context, cfg *config.Config, gp gpu.Probe) Report {
	r := Report{Backend: "local", Type: config.TypeLocal, GPUs: []GPUInfo{}, Warnings: []string{}, Problems: []string{}}
	if gpus, err := gpu.Query(ctx, gp.NvidiaSMI); err == nil {
		for _, g := range gpus {
			r.GPUs = append(r.GPUs, GPUInfo{GPU: g})
		}
	}
	dev, warnings, err := gpu.LocalDevice(ctx, cfg.Training.Device, gp)
	r.Warnings = append(r.Warnings, warnings...)
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
		r.Summary = "local: " + err.Error()
		return r
	}
	r.OK = true
	r.Device = &DeviceInfo{Kind: dev.Kind, Name: dev.Name, Device: dev.String(), Describe: dev.Describe(), Cores: dev.Cores}
	r.Summary = "local: this machine, " + dev.Describe()
	return r
}

// Backend checks a configured backend. A config whose prelabels Potato
// would not show (validate.PrelabelsHidden) adds that note, once.
func Backend(ctx context.Context, cfg *config.Config, b *config.Backend, gp gpu.Probe) Report {
	r := backendReport(ctx, cfg, b, gp)
	r.Notes = []string{}
	if validate.PrelabelsWithoutPreAnnotation(cfg) {
		r.Notes = append(r.Notes, validate.PrelabelsHidden)
	}
	return r
}

func backendReport(ctx context.Context, cfg *config.Config, b *config.Backend, gp gpu.Probe) Report {
	switch b.Type {
	case config.TypeLocal:
		return Local(ctx, cfg, gp)
	case config.TypeSSH:
		return SSH(ctx, b)
	case config.TypeSLURM:
		return SLURM(ctx, b)
	case config.TypeAgent:
		return Agent(cfg, b, time.Now())
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
		fmt.Fprintf(&b, "  python: %s\n", strings.TrimSpace(r.Python+" "+r.PythonVersion))
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
