package main

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"potato-training/internal/fakebin"
	"potato-training/internal/testcli"
)

func TestMain(m *testing.M) {
	testscript.Main(testcli.CleanM{M: m}, map[string]func(){"potato-check": main})
}

// The scripts put a fake nvidia-smi ($FAKEGPU) on PATH where they need a
// GPU: this machine has none. The sibling binaries are on PATH: the
// built-in trainers need potato-agent.
func TestScripts(t *testing.T) {
	p := testcli.Params(t, "testdata", true)
	setup := p.Setup
	gpuDir := fakebin.NvidiaSMI(t, t.TempDir(), "0, GPU-aaaa, NVIDIA H200, 143771, 120000, 12, 9.0\n1, GPU-bbbb, NVIDIA H200, 143771, 143000, 0, 9.0\n")
	p.Setup = func(env *testscript.Env) error {
		env.Setenv("FAKEGPU", gpuDir)
		return setup(env)
	}
	testscript.Run(t, p)
}
