// Package check answers potato-check(1)'s question: can a run start on a
// backend now, and where would it run?
package check

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"potato-training/lib/config"
	"potato-training/lib/gpu"
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
	Summary  string      `json:"summary"`
	Device   *DeviceInfo `json:"device,omitempty"`
	GPUs     []gpu.GPU   `json:"gpus"`
	Warnings []string    `json:"warnings"`
	Problems []string    `json:"problems"`
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
func Local(ctx context.Context, cfg *config.Config, probe gpu.Probe) Report {
	r := Report{Backend: "local", Type: config.TypeLocal, GPUs: []gpu.GPU{}, Warnings: []string{}, Problems: []string{}}
	if gpus, err := gpu.Query(ctx, probe.NvidiaSMI); err == nil {
		r.GPUs = gpus
	}
	dev, warnings, err := gpu.LocalDevice(ctx, cfg.Training.Device, probe)
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

// Backend checks a configured backend.
func Backend(ctx context.Context, cfg *config.Config, b *config.Backend, probe gpu.Probe) Report {
	if b.Type == config.TypeLocal {
		return Local(ctx, cfg, probe)
	}
	msg := fmt.Sprintf("checking %s backends is not available in this version", b.Type)
	return Report{Backend: b.Name, Type: b.Type, Summary: b.Label() + ": " + msg,
		GPUs: []gpu.GPU{}, Warnings: []string{}, Problems: []string{msg}}
}

// WriteText prints the report for a person.
func WriteText(w io.Writer, r Report) error {
	var b strings.Builder
	b.WriteString(r.Summary + "\n")
	for _, g := range r.GPUs {
		util := "utilisation unknown"
		if g.UtilizationPct >= 0 {
			util = fmt.Sprintf("%d%% used", g.UtilizationPct)
		}
		fmt.Fprintf(&b, "  GPU %d: %s, %d of %d MB free, %s\n", g.Index, g.Name, g.MemoryFreeMB, g.MemoryTotalMB, util)
	}
	for _, wn := range r.Warnings {
		b.WriteString("  warning: " + wn + "\n")
	}
	for _, p := range r.Problems {
		if !strings.HasSuffix(r.Summary, p) {
			b.WriteString("  problem: " + p + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints the report as JSON.
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
