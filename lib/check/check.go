// Package check is the language of potato-check(1)'s answer to: can a run
// start on a backend now, and where would it run? The report, the
// trainers' verdicts and the text are here; each backend type's check,
// which fills a report, is in its own package under lib/backend, and
// lib/backend's Check picks it by the backend's type.
package check

import (
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
	// ThisMachine is set on the report of the backend that trains on the
	// annotation server (local): its summary names the device, so the text
	// has no line of its own for it.
	ThisMachine bool `json:"-"`
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

// Input is what a backend type's check is given (lib/backend's
// Descriptor.Check).
type Input struct {
	Config  *config.Config
	Backend *config.Backend
	// GPU is how this machine's GPUs are found (the local backend).
	GPU    gpu.Probe
	Judged Judged
	// Now is the time of the check (the agent backend's last_seen).
	Now time.Time
}

// MsgNeverSet is an agent backend's last_seen before any agent polled.
const MsgNeverSet = "no agent has connected yet"

// HostOr is an agent's host as a report names it.
func HostOr(h string) string {
	if h == "" {
		return "an unnamed host"
	}
	return h
}

// Ago writes a number of seconds the way a person reads it: 45 s, 12 min,
// 3 h, 2 days.
func Ago(s int64) string {
	switch {
	case s < 120:
		return fmt.Sprintf("%d s", s)
	case s < 2*3600:
		return fmt.Sprintf("%d min", s/60)
	case s < 2*86400:
		return fmt.Sprintf("%d h", s/3600)
	}
	return fmt.Sprintf("%d days", s/86400)
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
			b.WriteString("  last_seen: never (" + MsgNeverSet + ")\n")
		default:
			fmt.Fprintf(&b, "  last_seen: %s on %s (%s ago)\n", r.LastSeen.UTC().Format(time.RFC3339), HostOr(r.LastHost), Ago(*r.LastSeenAgoS))
		}
	}
	if r.Device != nil && !r.ThisMachine {
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
