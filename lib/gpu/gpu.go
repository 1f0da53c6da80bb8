// Package gpu reads nvidia-smi, chooses a GPU for a run and picks the device
// of a local run.
//
// Query and ParseQuery turn nvidia-smi's CSV query into GPUs, Choose is
// `gpus: auto` of an ssh backend (SPEC S4, S5), and LocalDevice resolves a
// local run's `device` setting (SPEC L1, L2).
package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// GPU is one line of nvidia-smi's query.
type GPU struct {
	Index          int    `json:"index"`
	UUID           string `json:"uuid"`
	Name           string `json:"name"`
	MemoryTotalMB  int    `json:"memory_total_mb"` // -1 when nvidia-smi does not report it
	MemoryFreeMB   int    `json:"memory_free_mb"`  // -1 when nvidia-smi does not report it
	UtilizationPct int    `json:"utilization_pct"` // -1 when nvidia-smi does not report it
	ComputeCap     string `json:"compute_cap"`     // "9.0"; "" when unknown
}

// User-visible texts (SPEC F3, F5).
const (
	// NoFreeGPUFormat is NoFreeGPUError's text; %d is the threshold in MB.
	NoFreeGPUFormat = "No GPU has %d MB free"
	// NoUsableGPUText is ErrNoUsableGPU's text.
	NoUsableGPUText = "This host's torch has no kernels for any of its GPUs"
)

var (
	// ErrNoNvidiaSMI means nvidia-smi is not on this machine: it has no
	// NVIDIA GPU to offer, which callers treat as "no GPU", not as a failure.
	ErrNoNvidiaSMI = errors.New("nvidia-smi is not on this machine")
	// ErrNoGPU is Choose's answer for an empty list: the host trains on CPU.
	ErrNoGPU = errors.New("no GPU is listed")
	// ErrNoUsableGPU is Choose's answer when usable refuses every GPU.
	ErrNoUsableGPU = errors.New(NoUsableGPUText)
)

// NoFreeGPUError is Choose's refusal when no usable GPU has MinFreeMB free.
type NoFreeGPUError struct {
	MinFreeMB int
}

func (e *NoFreeGPUError) Error() string {
	return fmt.Sprintf(NoFreeGPUFormat, e.MinFreeMB)
}

const (
	// QueryFields is the query every driver answers; QueryFieldsComputeCap
	// adds compute_cap, which drivers older than about 510 refuse.
	QueryFields           = "index,uuid,name,memory.total,memory.free,utilization.gpu"
	QueryFieldsComputeCap = QueryFields + ",compute_cap"
)

// queryTimeout bounds one Query, both attempts included; a wedged driver can
// leave nvidia-smi hanging for minutes.
var queryTimeout = 10 * time.Second

// markers nvidia-smi prints, on stdout or stderr, for the cases Query
// handles rather than reports.
const (
	noComputeCapMarker = `"compute_cap" is not a valid field`
	noDevicesMarker    = "No devices were found"
)

// ParseQuery parses the output of
//
//	nvidia-smi --query-gpu=<QueryFieldsComputeCap> --format=csv,noheader,nounits
//
// or, when withComputeCap is false, of the same query with QueryFields.
// Fields are trimmed; "[N/A]", "[Not Supported]" and any other bracketed
// value make a number -1 and compute_cap ""; a " MiB" or " %" unit is
// dropped. Blank lines are skipped. A comma inside a GPU's name is kept,
// since the fields around the name are fixed. A line without the expected
// fields, or whose index or a number does not parse, is an error naming it.
func ParseQuery(out []byte, withComputeCap bool) ([]GPU, error) {
	tail := 3 // memory.total, memory.free, utilization.gpu
	if withComputeCap {
		tail = 4
	}
	var gpus []GPU
	for n, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("nvidia-smi line %d %q: %s", n+1, line, fmt.Sprintf(format, args...))
		}
		fields := strings.Split(line, ",")
		if len(fields) < 3+tail {
			return nil, bad("want %d fields, got %d", 3+tail, len(fields))
		}
		for i := range fields {
			fields[i] = strings.TrimSpace(fields[i])
		}
		g := GPU{
			UUID: fields[1],
			Name: strings.Join(fields[2:len(fields)-tail], ","),
		}
		var err error
		if g.Index, err = strconv.Atoi(fields[0]); err != nil || g.Index < 0 {
			return nil, bad("index %q is not a GPU index", fields[0])
		}
		nums := fields[len(fields)-tail:]
		for i, dst := range []*int{&g.MemoryTotalMB, &g.MemoryFreeMB, &g.UtilizationPct} {
			if *dst, err = number(nums[i]); err != nil {
				return nil, bad("%v", err)
			}
		}
		if withComputeCap && !unknown(nums[3]) {
			g.ComputeCap = nums[3]
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// unknown reports nvidia-smi's way of saying it has no value:
// "[N/A]", "[Not Supported]", "[Unknown Error]" and the like.
func unknown(s string) bool {
	return s == "" || strings.HasPrefix(s, "[")
}

func number(s string) (int, error) {
	if unknown(s) {
		return -1, nil
	}
	v := strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(s, "MiB"), "%"))
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return n, nil
}

// Query runs nvidiaSMI (a name looked up on PATH, or a path; "" is
// "nvidia-smi") and parses its answer. It asks for compute_cap first and,
// when the driver refuses that field, asks again without it. nvidia-smi
// not found is ErrNoNvidiaSMI; "No devices were found" is an empty list and
// no error. Both attempts together are bounded by 10 seconds.
func Query(ctx context.Context, nvidiaSMI string) ([]GPU, error) {
	name := nvidiaSMI
	if name == "" {
		name = "nvidia-smi"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			if nvidiaSMI == "" {
				return nil, ErrNoNvidiaSMI
			}
			return nil, fmt.Errorf("%w (looked for %q)", ErrNoNvidiaSMI, name)
		}
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()

	withCap := true
	out, msg, err := runQuery(ctx, path, QueryFieldsComputeCap)
	if err != nil && strings.Contains(msg, noComputeCapMarker) {
		withCap = false
		out, msg, err = runQuery(ctx, path, QueryFields)
	}
	if err != nil {
		if strings.Contains(msg, noDevicesMarker) {
			return nil, nil
		}
		if ctx.Err() != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("%s did not answer within %v: %w", path, queryTimeout, ctx.Err())
			}
			return nil, fmt.Errorf("%s: %w", path, ctx.Err())
		}
		if line := firstLine(msg); line != "" {
			return nil, fmt.Errorf("%s: %w: %s", path, err, line)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ParseQuery(out, withCap)
}

// runQuery returns stdout, and stdout and stderr together for error texts:
// nvidia-smi prints its complaints on either.
func runQuery(ctx context.Context, path, fields string) (stdout []byte, msg string, err error) {
	cmd := exec.CommandContext(ctx, path, "--query-gpu="+fields, "--format=csv,noheader,nounits")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	// A child of nvidia-smi holding the pipes must not outlive the timeout.
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	return out.Bytes(), out.String() + "\n" + errOut.String(), err
}

func firstLine(s string) string {
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// Choose is `gpus: auto` (SPEC S4): of the GPUs usable accepts (nil accepts
// all), the one with the most free memory, the lowest index among equals.
// Utilisation plays no part: a busy GPU with room beats an idle full one.
// usable is where a caller says whether the trainer can run on a GPU, as
// whether the host's torch has kernels for its compute capability (S5).
//
// Errors: ErrNoGPU for an empty list (the host trains on CPU),
// ErrNoUsableGPU when usable refuses every GPU, and *NoFreeGPUError when
// the best has less than minFreeMB free.
func Choose(gpus []GPU, minFreeMB int, usable func(GPU) bool) (GPU, error) {
	if len(gpus) == 0 {
		return GPU{}, ErrNoGPU
	}
	var best GPU
	found := false
	for _, g := range gpus {
		if usable != nil && !usable(g) {
			continue
		}
		if !found || g.MemoryFreeMB > best.MemoryFreeMB ||
			g.MemoryFreeMB == best.MemoryFreeMB && g.Index < best.Index {
			best, found = g, true
		}
	}
	if !found {
		return GPU{}, ErrNoUsableGPU
	}
	if best.MemoryFreeMB < minFreeMB {
		return GPU{}, &NoFreeGPUError{MinFreeMB: minFreeMB}
	}
	return best, nil
}
