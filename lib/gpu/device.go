package gpu

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// Device kinds, as Device.Kind and the `device` setting name them.
const (
	KindCUDA = "cuda"
	KindMPS  = "mps"
	KindCPU  = "cpu"
)

// User-visible texts of LocalDevice (SPEC L1).
const (
	// DeviceAbsentFormat is the warning for a requested device this machine
	// lacks: the request, then what is used instead, as
	// "cuda:0 (NVIDIA H200)", "Apple Metal (mps)" or "CPU (2 cores)".
	DeviceAbsentFormat = "device %s is not on this machine; using %s"
	// NvidiaSMIFailedFormat is the warning when nvidia-smi is there but
	// does not answer; the run goes on without CUDA.
	NvidiaSMIFailedFormat = "nvidia-smi failed, so CUDA is not used: %v"
	// BadDeviceFormat is LocalDevice's error for a setting it cannot read.
	BadDeviceFormat = "device %q: use auto, cpu, mps, cuda or cuda:N"
)

const (
	mpsName = "Apple Metal"
	cpuName = "CPU"
)

// Device is where a local run trains.
type Device struct {
	Kind  string // KindCUDA, KindMPS or KindCPU
	Index int    // the GPU's nvidia-smi index, for cuda
	Name  string // "NVIDIA H200", "Apple Metal", "CPU"
	Cores int    // this machine's logical CPUs, whatever the kind
}

// String is the device as a setting names it: "cuda:0", "mps", "cpu".
func (d Device) String() string {
	if d.Kind == KindCUDA {
		return KindCUDA + ":" + strconv.Itoa(d.Index)
	}
	return d.Kind
}

// Describe is the device as potato-check prints it after
// "local: this machine, " (SPEC L2): "NVIDIA H200 (cuda:0)",
// "Apple Metal (mps)", "CPU (2 cores)".
func (d Device) Describe() string {
	switch d.Kind {
	case KindCPU:
		if d.Cores == 1 {
			return cpuName + " (1 core)"
		}
		return fmt.Sprintf("%s (%d cores)", cpuName, d.Cores)
	case KindCUDA:
		name := d.Name
		if name == "" {
			name = "GPU"
		}
		return name + " (" + d.String() + ")"
	}
	return d.Name + " (" + d.String() + ")"
}

// replacement is the device as DeviceAbsentFormat's "using" names it: a GPU
// by its index first, since the request named an index.
func (d Device) replacement() string {
	if d.Kind == KindCUDA && d.Name != "" {
		return d.String() + " (" + d.Name + ")"
	}
	return d.Describe()
}

// Probe is what LocalDevice looks at. Each zero field means this machine's
// own: nvidia-smi on PATH, runtime.GOOS, runtime.GOARCH, runtime.NumCPU().
type Probe struct {
	NvidiaSMI    string
	GOOS, GOARCH string
	NumCPU       int
}

func (p Probe) defaults() Probe {
	if p.GOOS == "" {
		p.GOOS = runtime.GOOS
	}
	if p.GOARCH == "" {
		p.GOARCH = runtime.GOARCH
	}
	if p.NumCPU <= 0 {
		p.NumCPU = runtime.NumCPU()
	}
	return p
}

// CPU is this machine's CPU as a device: the device of a local run whose
// trainer uses no GPU.
func CPU(probe Probe) Device {
	return Device{Kind: KindCPU, Name: cpuName, Cores: probe.defaults().NumCPU}
}

// LocalDevice resolves a local run's `device` setting (SPEC L1).
//
// "auto" or "" takes CUDA when nvidia-smi lists a GPU (the lowest index,
// the GPU CUDA calls 0 in PCI order, not the one with most free memory: a
// local run gets the machine's first GPU, as a trainer left alone would),
// else Apple Metal on darwin/arm64, else the CPU. "cuda" is the lowest
// index, "cuda:N" GPU N, "mps" Apple Metal, "cpu" the CPU.
//
// A requested device the machine lacks is replaced, with a
// DeviceAbsentFormat warning, by another accelerator when there is one
// (the lowest-index GPU, else Apple Metal for a GPU request) and by the CPU
// otherwise. nvidia-smi missing means no GPU, silently; nvidia-smi failing
// means no GPU, with a warning. The error is for a setting that is none of
// the above, or ctx ending.
func LocalDevice(ctx context.Context, requested string, probe Probe) (Device, []string, error) {
	kind, index, err := parseDevice(requested)
	if err != nil {
		return Device{}, nil, err
	}
	p := probe.defaults()
	cpu := Device{Kind: KindCPU, Name: cpuName, Cores: p.NumCPU}
	mps := Device{Kind: KindMPS, Name: mpsName, Cores: p.NumCPU}
	hasMPS := p.GOOS == "darwin" && p.GOARCH == "arm64"

	switch {
	case kind == KindCPU:
		return cpu, nil, nil
	case kind == KindMPS && hasMPS:
		return mps, nil, nil
	}

	var warnings []string
	gpus, err := Query(ctx, p.NvidiaSMI)
	if err != nil {
		if ctx.Err() != nil {
			return Device{}, nil, ctx.Err()
		}
		if !errors.Is(err, ErrNoNvidiaSMI) {
			warnings = append(warnings, fmt.Sprintf(NvidiaSMIFailedFormat, err))
		}
		gpus = nil
	}
	slices.SortFunc(gpus, func(a, b GPU) int { return a.Index - b.Index })
	cuda := func(g GPU) Device {
		return Device{Kind: KindCUDA, Index: g.Index, Name: g.Name, Cores: p.NumCPU}
	}

	if kind == KindCUDA && index >= 0 {
		for _, g := range gpus {
			if g.Index == index {
				return cuda(g), warnings, nil
			}
		}
	} else if kind != KindMPS && len(gpus) > 0 {
		return cuda(gpus[0]), warnings, nil
	}

	// The request, or auto, found nothing of its kind.
	var got Device
	switch {
	case len(gpus) > 0:
		got = cuda(gpus[0])
	case kind != KindMPS && hasMPS:
		got = mps
	default:
		got = cpu
	}
	if kind != "auto" {
		warnings = append(warnings, fmt.Sprintf(DeviceAbsentFormat, requestName(kind, index), got.replacement()))
	}
	return got, warnings, nil
}

// parseDevice reads a `device` setting; index is -1 unless it names one.
func parseDevice(s string) (kind string, index int, err error) {
	switch s = strings.TrimSpace(s); s {
	case "", "auto":
		return "auto", -1, nil
	case KindCPU, KindMPS, KindCUDA:
		return s, -1, nil
	}
	if rest, ok := strings.CutPrefix(s, KindCUDA+":"); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
		if n, err := strconv.Atoi(rest); err == nil {
			return KindCUDA, n, nil
		}
	}
	return "", 0, fmt.Errorf(BadDeviceFormat, s)
}

func requestName(kind string, index int) string {
	if kind == KindCUDA && index >= 0 {
		return KindCUDA + ":" + strconv.Itoa(index)
	}
	return kind
}
