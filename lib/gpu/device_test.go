package gpu

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"potato-training/internal/fakebin"
)

// smi returns the path of a fake nvidia-smi listing gpus.
func smi(t *testing.T, gpus string) string {
	return filepath.Join(fakebin.NvidiaSMI(t, t.TempDir(), gpus), "nvidia-smi")
}

// absent is an nvidia-smi that is not there.
func absent(t *testing.T) string {
	return filepath.Join(t.TempDir(), "nvidia-smi")
}

func TestLocalDevice(t *testing.T) {
	oneH200 := h200Line + "\n"
	bothGPUs := a100Line + "\n" + h200Line + "\n" // listed out of order on purpose
	linux := func(nvidiaSMI string) Probe {
		return Probe{NvidiaSMI: nvidiaSMI, GOOS: "linux", GOARCH: "amd64", NumCPU: 2}
	}
	mac := func(nvidiaSMI string) Probe {
		return Probe{NvidiaSMI: nvidiaSMI, GOOS: "darwin", GOARCH: "arm64", NumCPU: 10}
	}
	for _, tc := range []struct {
		name, requested string
		probe           Probe
		str, describe   string
		warnings        []string
	}{
		{"auto with a GPU", "auto", linux(smi(t, oneH200)), "cuda:0", "NVIDIA H200 (cuda:0)", nil},
		{"auto takes index 0, not the most free", "", linux(smi(t, bothGPUs)), "cuda:0", "NVIDIA H200 (cuda:0)", nil},
		{"auto without nvidia-smi on linux", "auto", linux(absent(t)), "cpu", "CPU (2 cores)", nil},
		{"auto on a machine whose driver finds no GPU", "auto", linux(smi(t, "")), "cpu", "CPU (2 cores)", nil},
		{"auto on apple silicon", "auto", mac(absent(t)), "mps", "Apple Metal (mps)", nil},
		{"auto on an intel mac", "auto", Probe{NvidiaSMI: absent(t), GOOS: "darwin", GOARCH: "amd64", NumCPU: 1}, "cpu", "CPU (1 core)", nil},
		{"cuda", "cuda", linux(smi(t, bothGPUs)), "cuda:0", "NVIDIA H200 (cuda:0)", nil},
		{"cuda:1 present", "cuda:1", linux(smi(t, bothGPUs)), "cuda:1", "NVIDIA A100-SXM4-80GB (cuda:1)", nil},
		{"cuda:1 absent, another GPU", "cuda:1", linux(smi(t, oneH200)), "cuda:0", "NVIDIA H200 (cuda:0)",
			[]string{"device cuda:1 is not on this machine; using cuda:0 (NVIDIA H200)"}},
		{"cuda:1 absent, no GPU", "cuda:1", linux(absent(t)), "cpu", "CPU (2 cores)",
			[]string{"device cuda:1 is not on this machine; using CPU (2 cores)"}},
		{"cuda absent on a mac", "cuda", mac(absent(t)), "mps", "Apple Metal (mps)",
			[]string{"device cuda is not on this machine; using Apple Metal (mps)"}},
		{"mps on apple silicon", "mps", mac(absent(t)), "mps", "Apple Metal (mps)", nil},
		{"mps on linux with a GPU", "mps", linux(smi(t, oneH200)), "cuda:0", "NVIDIA H200 (cuda:0)",
			[]string{"device mps is not on this machine; using cuda:0 (NVIDIA H200)"}},
		{"mps on linux", "mps", linux(absent(t)), "cpu", "CPU (2 cores)",
			[]string{"device mps is not on this machine; using CPU (2 cores)"}},
		{"cpu with a GPU there", "cpu", linux(smi(t, oneH200)), "cpu", "CPU (2 cores)", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, warnings, err := LocalDevice(context.Background(), tc.requested, tc.probe)
			if err != nil {
				t.Fatal(err)
			}
			if d.String() != tc.str || d.Describe() != tc.describe {
				t.Errorf("got %s / %q, want %s / %q", d, d.Describe(), tc.str, tc.describe)
			}
			if !reflect.DeepEqual(warnings, tc.warnings) {
				t.Errorf("warnings %q, want %q", warnings, tc.warnings)
			}
		})
	}
}

func TestLocalDeviceNvidiaSMIFails(t *testing.T) {
	path := writeScript(t, "echo 'Failed to initialize NVML: Driver/library version mismatch'\nexit 18\n")
	d, warnings, err := LocalDevice(context.Background(), "auto", Probe{NvidiaSMI: path, GOOS: "linux", GOARCH: "amd64", NumCPU: 2})
	if err != nil || d.Kind != KindCPU {
		t.Fatalf("got %+v, %v; want cpu", d, err)
	}
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "nvidia-smi failed, so CUDA is not used: ") ||
		!strings.Contains(warnings[0], "version mismatch") {
		t.Errorf("warnings %q", warnings)
	}
}

func TestLocalDeviceDefaultsToPath(t *testing.T) {
	t.Setenv("PATH", fakebin.NvidiaSMI(t, t.TempDir(), h200Line+"\n"))
	d, _, err := LocalDevice(context.Background(), "auto", Probe{GOOS: "linux"})
	if err != nil || d.String() != "cuda:0" || d.Cores < 1 {
		t.Errorf("got %+v, %v", d, err)
	}
}

func TestLocalDeviceBadSetting(t *testing.T) {
	for _, s := range []string{"gpu", "cuda:", "cuda:x", "cuda:-1", "CUDA", "tpu:0"} {
		_, _, err := LocalDevice(context.Background(), s, Probe{NvidiaSMI: absent(t)})
		if err == nil || !strings.Contains(err.Error(), "use auto, cpu, mps, cuda or cuda:N") {
			t.Errorf("%q: error %v", s, err)
		}
	}
}

func TestLocalDeviceCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := LocalDevice(ctx, "auto", Probe{NvidiaSMI: smi(t, h200Line)}); err == nil {
		t.Error("a cancelled context should be an error")
	}
}
