//go:build faults

package faults

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

// killDispatch kills a detached run's dispatch with SIGKILL and waits
// until it is gone.
func (p *project) killDispatch(id string) {
	p.t.Helper()
	pid := p.Info(id).PID
	if pid == 0 {
		p.t.Fatalf("run %s has no dispatch pid", id)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	testproject.WaitFor(p.t, "the dispatch to die", func() bool { return syscall.Kill(pid, 0) != nil })
}

// The fault: kill -9 of a detached dispatch while the trainer fits.
// Expected: within 5 s of the kill, status --json and run.json say error
// (dispatch_lost), the trainer is gone with its dispatch, and the next
// run succeeds.
func testKillDispatchMidFit(t *testing.T) {
	p := newProject(t, "", 120, 100, "")
	id := p.Detach(p.localEndless().Args()...)
	p.fitting(t, id)
	tr := p.trainer(id)
	p.killDispatch(id)
	killed := time.Now()
	f := p.settled(id, rundir.StateError, "dispatch_lost", 5*time.Second)
	took := time.Since(killed)
	if took > 5*time.Second {
		t.Errorf("settled %s after the kill, want within 5 s", took)
	}
	testproject.WaitFor(t, "the trainer to go with its dispatch", tr.gone)
	stored, kept := p.predictions(id)
	record(t, "kill -9 of the dispatch mid-fit", "error/dispatch_lost within 5 s; next run succeeds",
		fmt.Sprintf("%s after %.1f s; %d predictions produced; %s", f, took.Seconds(), stored+kept, p.nextRunSucceeds()))
}

// TestHostFaults runs the faults that involve no SLURM job one after the
// other, beside TestSLURMFaults.
func TestHostFaults(t *testing.T) {
	testcli.Group(t, []testcli.Case{
		{Name: "TestKillDispatchMidFit", Run: testKillDispatchMidFit},
		{Name: "TestLocalKillDispatchMidBuild", Run: testLocalKillDispatchMidBuild},
		{Name: "TestLocalKillDispatchMidWriteback", Run: testLocalKillDispatchMidWriteback},
		{Name: "TestLocalKillTrainer", Run: testLocalKillTrainer},
		{Name: "TestLocalDiskFull", Run: testLocalDiskFull},
		{Name: "TestLocalStoreLocked", Run: testLocalStoreLocked},
		{Name: "TestRemoteKillDispatchDuringCopyBack", Run: testRemoteKillDispatchDuringCopyBack},
		{Name: "TestRemoteKillSSHAgentMidFit", Run: testRemoteKillSSHAgentMidFit},
		{Name: "TestRemoteKillNATAgentMidFit", Run: testRemoteKillNATAgentMidFit},
		{Name: "TestRemoteServerRestartMidRun", Run: testRemoteServerRestartMidRun},
		{Name: "TestRemoteLinkCutDuringCopyBack", Run: testRemoteLinkCutDuringCopyBack},
		{Name: "TestRemoteLinkDropDuringCopyBack", Run: testRemoteLinkDropDuringCopyBack},
	})
}
