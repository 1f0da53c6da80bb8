package main

import (
	"os/exec"
	"path/filepath"
	"testing"

	"potato-training/internal/testcli"
)

// TestExecLimitedNeverUnderItsOwnLimit: potato-agent exec under a small
// max_ram_mb starts its program every time. When the agent set RLIMIT_AS
// on itself before it executed the program, the Go runtime, whose address
// space is mostly reserved, died of "fatal error: runtime: out of memory"
// (exit 2) whenever it mapped more in between: 1 run in 400 at 300 MB on
// this machine, so that 200 runs of it failed about two times in five
// (it failed at once here).
func TestExecLimitedNeverUnderItsOwnLimit(t *testing.T) {
	t.Parallel()
	agent := filepath.Join(testcli.Binaries(t), "potato-agent")
	for i := range 200 {
		out, err := exec.Command(agent, "exec", "--max-ram-mb", "300", "--", "/bin/true").CombinedOutput()
		if err != nil {
			t.Fatalf("run %d: %v\n%s", i+1, err, out)
		}
	}
}
