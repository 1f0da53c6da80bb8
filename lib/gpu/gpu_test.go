package gpu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"potato-training/internal/fakebin"
)

// Lines as nvidia-smi 550 prints them for the compute_cap query.
const (
	h200Line = "0, GPU-5d2f7a8e-1c3b-4f6a-9e2d-7b8c9d0e1f2a, NVIDIA H200, 143771, 143252, 0, 9.0"
	a100Line = "1, GPU-0b1c2d3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e, NVIDIA A100-SXM4-80GB, 81920, 1021, 97, 8.0"
)

var (
	h200 = GPU{Index: 0, UUID: "GPU-5d2f7a8e-1c3b-4f6a-9e2d-7b8c9d0e1f2a", Name: "NVIDIA H200",
		MemoryTotalMB: 143771, MemoryFreeMB: 143252, UtilizationPct: 0, ComputeCap: "9.0"}
	a100 = GPU{Index: 1, UUID: "GPU-0b1c2d3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e", Name: "NVIDIA A100-SXM4-80GB",
		MemoryTotalMB: 81920, MemoryFreeMB: 1021, UtilizationPct: 97, ComputeCap: "8.0"}
)

func TestParseQuery(t *testing.T) {
	for _, tc := range []struct {
		name    string
		out     string
		withCap bool
		want    []GPU
	}{
		{"h200 and a100", h200Line + "\n" + a100Line + "\n\n", true, []GPU{h200, a100}},
		{"crlf and extra spaces", "  0 ,GPU-a,   NVIDIA H200  , 143771 ,143252,  0 , 9.0 \r\n", true,
			[]GPU{{Index: 0, UUID: "GPU-a", Name: "NVIDIA H200", MemoryTotalMB: 143771, MemoryFreeMB: 143252, ComputeCap: "9.0"}}},
		{"utilisation n/a (a MIG instance)", "0, MIG-1a2b, NVIDIA A100-SXM4-40GB, 40960, 39800, [N/A], 8.0\n", true,
			[]GPU{{Index: 0, UUID: "MIG-1a2b", Name: "NVIDIA A100-SXM4-40GB", MemoryTotalMB: 40960, MemoryFreeMB: 39800, UtilizationPct: -1, ComputeCap: "8.0"}}},
		{"not supported", "0, GPU-g, GRID T4-8Q, [Not Supported], [Not Supported], [Not Supported], [N/A]\n", true,
			[]GPU{{Index: 0, UUID: "GPU-g", Name: "GRID T4-8Q", MemoryTotalMB: -1, MemoryFreeMB: -1, UtilizationPct: -1}}},
		{"old driver, six fields", "0, GPU-v, Tesla V100-PCIE-16GB, 16160, 16150, 0\n1, GPU-w, Tesla V100-PCIE-16GB, 16160, 2, 100\n", false,
			[]GPU{{Index: 0, UUID: "GPU-v", Name: "Tesla V100-PCIE-16GB", MemoryTotalMB: 16160, MemoryFreeMB: 16150},
				{Index: 1, UUID: "GPU-w", Name: "Tesla V100-PCIE-16GB", MemoryTotalMB: 16160, MemoryFreeMB: 2, UtilizationPct: 100}}},
		{"units left in", "0, GPU-u, NVIDIA L4, 23034 MiB, 22700 MiB, 3 %, 8.9\n", true,
			[]GPU{{Index: 0, UUID: "GPU-u", Name: "NVIDIA L4", MemoryTotalMB: 23034, MemoryFreeMB: 22700, UtilizationPct: 3, ComputeCap: "8.9"}}},
		{"comma in a name", "0, GPU-c, Odd, Name, 100, 50, 1, 7.5\n", true,
			[]GPU{{Index: 0, UUID: "GPU-c", Name: "Odd,Name", MemoryTotalMB: 100, MemoryFreeMB: 50, UtilizationPct: 1, ComputeCap: "7.5"}}},
		{"empty", "\n", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseQuery([]byte(tc.out), tc.withCap)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseQueryMalformed(t *testing.T) {
	for _, tc := range []struct {
		name, out, inErr string
		withCap          bool
	}{
		{"too few fields", h200Line + "\n0, GPU-x, NVIDIA H200\n", `line 2 "0, GPU-x, NVIDIA H200": want 7 fields, got 3`, true},
		{"six fields where seven are due", "0, GPU-v, Tesla V100-PCIE-16GB, 16160, 16150, 0\n", "line 1", true},
		{"bad index", "GPU 0, GPU-x, NVIDIA H200, 1, 1, 0, 9.0\n", `index "GPU 0"`, true},
		{"bad number", "0, GPU-x, NVIDIA H200, lots, 1, 0, 9.0\n", `"lots" is not a number`, true},
		{"an error message", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "line 1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseQuery([]byte(tc.out), tc.withCap)
			if err == nil || !strings.Contains(err.Error(), tc.inErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.inErr)
			}
		})
	}
}

// emptyPath leaves the test with a PATH on which nothing is found.
func emptyPath(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
}

func TestQueryFake(t *testing.T) {
	gpus := h200Line + "\n" + a100Line + "\n"
	t.Run("current driver", func(t *testing.T) {
		dir := fakebin.NvidiaSMI(t, t.TempDir(), gpus)
		t.Setenv("PATH", dir)
		got, err := Query(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, []GPU{h200, a100}) {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("old driver", func(t *testing.T) {
		dir := fakebin.NvidiaSMIOldDriver(t, t.TempDir(), gpus)
		emptyPath(t)
		got, err := Query(context.Background(), filepath.Join(dir, "nvidia-smi"))
		if err != nil {
			t.Fatal(err)
		}
		oldH200, oldA100 := h200, a100
		oldH200.ComputeCap, oldA100.ComputeCap = "", ""
		if !reflect.DeepEqual(got, []GPU{oldH200, oldA100}) {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("no devices", func(t *testing.T) {
		dir := fakebin.NvidiaSMI(t, t.TempDir(), "")
		got, err := Query(context.Background(), filepath.Join(dir, "nvidia-smi"))
		if err != nil || len(got) != 0 {
			t.Errorf("got %+v, %v; want no GPU and no error", got, err)
		}
	})
}

func TestQueryAbsent(t *testing.T) {
	emptyPath(t)
	if _, err := Query(context.Background(), ""); err != ErrNoNvidiaSMI {
		t.Errorf("nvidia-smi not on PATH: error %v, want ErrNoNvidiaSMI", err)
	}
	_, err := Query(context.Background(), filepath.Join(t.TempDir(), "nvidia-smi"))
	if !errors.Is(err, ErrNoNvidiaSMI) {
		t.Errorf("missing path: error %v, want ErrNoNvidiaSMI", err)
	}
}

func writeScript(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nvidia-smi")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestQueryFailure(t *testing.T) {
	// What nvidia-smi says when the kernel module is not loaded.
	path := writeScript(t, "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\nexit 9\n")
	_, err := Query(context.Background(), path)
	if err == nil || errors.Is(err, ErrNoNvidiaSMI) ||
		!strings.Contains(err.Error(), "exit status 9: NVIDIA-SMI has failed") {
		t.Errorf("error %v", err)
	}
}

func TestQueryTimeout(t *testing.T) {
	defer func(d time.Duration) { queryTimeout = d }(queryTimeout)
	queryTimeout = 100 * time.Millisecond
	path := writeScript(t, "exec sleep 10\n")
	start := time.Now()
	_, err := Query(context.Background(), path)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not answer within 100ms") {
		t.Errorf("error %v", err)
	}
	// It gave up at its timeout, not when the program ended by itself.
	if d := time.Since(start); d >= 10*time.Second {
		t.Errorf("Query took %v: it waited for the program's end", d)
	}
}

func TestChoose(t *testing.T) {
	busyRoomy := GPU{Index: 0, Name: "busy", MemoryFreeMB: 60000, UtilizationPct: 95}
	idleFull := GPU{Index: 1, Name: "idle", MemoryFreeMB: 3000, UtilizationPct: 0}
	if got, err := Choose([]GPU{idleFull, busyRoomy}, 2000, nil); err != nil || got.Index != 0 {
		t.Errorf("most free memory should win over least utilised: got %+v, %v", got, err)
	}

	tied := []GPU{{Index: 3, MemoryFreeMB: 8000}, {Index: 1, MemoryFreeMB: 8000}, {Index: 2, MemoryFreeMB: 100}}
	if got, err := Choose(tied, 2000, nil); err != nil || got.Index != 1 {
		t.Errorf("a tie should go to the lowest index: got %+v, %v", got, err)
	}

	_, err := Choose([]GPU{{Index: 0, MemoryFreeMB: 3999}, {Index: 1, MemoryFreeMB: 12}}, 4000, nil)
	var nf *NoFreeGPUError
	if !errors.As(err, &nf) || nf.MinFreeMB != 4000 || err.Error() != "No GPU has 4000 MB free" {
		t.Errorf("none with 4000 MB free: error %v", err)
	}
	if _, err := Choose([]GPU{{Index: 0, MemoryFreeMB: 4000}}, 4000, nil); err != nil {
		t.Errorf("exactly the threshold free: %v", err)
	}

	noKernels := func(g GPU) bool { return g.ComputeCap != "12.0" }
	gpus := []GPU{{Index: 0, MemoryFreeMB: 90000, ComputeCap: "12.0"}, {Index: 1, MemoryFreeMB: 5000, ComputeCap: "8.0"}}
	if got, err := Choose(gpus, 2000, noKernels); err != nil || got.Index != 1 {
		t.Errorf("the usable filter should exclude GPU 0: got %+v, %v", got, err)
	}
	if _, err := Choose(gpus[:1], 2000, noKernels); err != ErrNoUsableGPU ||
		err.Error() != "This host's torch has no kernels for any of its GPUs" {
		t.Errorf("no usable GPU: error %v", err)
	}
	if _, err := Choose(nil, 2000, nil); err != ErrNoGPU {
		t.Errorf("no GPU: error %v", err)
	}
}
