package main

// The backend conformance suite: one table of behaviours that every
// backend must show, run against each backend with its real parts: the
// local process group; the system's ssh against the test sshd on
// loopback; the single-node SLURM of scripts/test-slurm through that
// sshd; potato-server and a polling potato-agent for the agent backend. A
// new backend adds a rig here and starts from these tests.
//
// A behaviour a backend cannot have is left out of its row, with the
// reason in its rig: the local training process has no heartbeat (it is
// the dispatch's child) and no copy of the model, and the agent backend's
// model never moves (SPEC G8), so it has no artifact limit.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"potato-training/internal/fakebin"
	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

// bench is one project whose default backend is the rig's.
type bench struct {
	*testproject.Runs
	t       *testing.T
	backend string // the backend's name, as the run log says it
	// programs is where a trainer program goes so that the far side can
	// run it.
	programs string
	// worker is the far side's potato-agent, a path or a glob, which
	// ends a released endless fit.
	worker string
	// serve starts what takes a run off the backend's own queue (the
	// agent backend's polling agent); nil when the dispatch does it all.
	serve func()
	// farSide is the processes that speak for the run on the far side
	// (the agent), for the heartbeat and the cancel; nil for local.
	farSide func(id string) []int
	// remoteArtifacts is where a run's model stays on the far side, for
	// the artifact limit.
	remoteArtifacts func(id string) string
}

// A rig makes benches for one backend: a project of n items, labelled
// of them labelled, with more keys of the backend's entry.
type rig struct {
	name  string
	bench func(t *testing.T, n, labelled int, keys string) *bench
	// pinGPU makes the backend's machine show two GPUs (a fake
	// nvidia-smi: these machines have none) and returns the keys that
	// pin GPU 1 for a bench, and the device the training process must be
	// told and the CUDA_VISIBLE_DEVICES it must see, as regexps.
	pinGPU func(t *testing.T) (keys string, env []string, device, visible string)
	// noHeartbeat and noArtifactLimit say why the behaviour does not
	// apply to the backend; empty when it does.
	noHeartbeat, noArtifactLimit string
}

// heartbeatS is every remote backend's heartbeat_timeout_s here, so that
// a silent agent is noticed in seconds.
const heartbeatS = 4

var rigs = []rig{
	{name: "local", bench: localBench, pinGPU: localPin,
		noHeartbeat:     "the training process is the dispatch's own child",
		noArtifactLimit: "the model is written in place, in the run's artifacts/"},
	{name: "ssh", bench: sshBench, pinGPU: sshPin},
	{name: "slurm", bench: slurmBench, pinGPU: slurmPin},
	{name: "agent", bench: agentBench, pinGPU: agentPin,
		noArtifactLimit: "the model stays on the agent's machine (SPEC G8)"},
}

// twoFakeGPUs is what the fake nvidia-smi lists: GPU 1 has the more free
// memory, so that a choice of "the freest" and a pin agree.
const twoFakeGPUs = "0, GPU-aaaa, NVIDIA H200, 143771, 9000, 80, 9.0\n1, GPU-bbbb, NVIDIA H200, 143771, 120000, 5, 9.0\n"

// localPin: device cuda:1, the fake nvidia-smi on the dispatch's PATH.
func localPin(t *testing.T) (string, []string, string, string) {
	fake := fakebin.NvidiaSMI(t, t.TempDir(), twoFakeGPUs)
	return "  device: cuda:1\n", []string{"PATH=" + fake + ":" + testcli.Binaries(t) + ":" + os.Getenv("PATH")}, "cuda:0", "1"
}

// sshPin: gpus "1", the fake nvidia-smi on the host's PATH.
func sshPin(t *testing.T) (string, []string, string, string) {
	fakes := testcli.SharedDir(t, 0o755)
	fakebin.NvidiaSMI(t, fakes, twoFakeGPUs)
	return fmt.Sprintf("      gpus: \"1\"\n      env: {PATH: \"%s:/usr/local/bin:/usr/bin:/bin\"}\n", fakes), nil, "cuda:0", "1"
}

// slurmPin: gres gpu:1; the test SLURM's node has fake GPUs, and the
// scheduler, not the toolkit, sets CUDA_VISIBLE_DEVICES to the one it
// gives the job.
func slurmPin(t *testing.T) (string, []string, string, string) {
	return "      gres: \"gpu:1\"\n", nil, "cuda", `\d+`
}

// agentPin: an agent backend has no key that pins a GPU: the agent's
// machine resolves "auto" itself, in the environment it was started in.
func agentPin(t *testing.T) (string, []string, string, string) {
	return "", nil, "auto", "unset"
}

func TestBackendConformance(t *testing.T) {
	behaviours := []struct {
		name string
		run  func(t *testing.T, r rig)
	}{
		{"success", conformSuccess},
		{"trainer failure", conformTrainerFailure},
		{"cancel while queued", conformCancelQueued},
		{"cancel while running", conformCancelRunning},
		{"heartbeat loss", conformHeartbeatLoss},
		{"artifacts too large", conformArtifactsTooLarge},
		{"device", conformDevice},
	}
	for _, r := range rigs {
		t.Run(r.name, func(t *testing.T) {
			// The backends' rows run side by side, each its behaviours in
			// turn: they share no project, and no other test of the
			// package runs beside this one (a SLURM test that sets the
			// node down would end this one's jobs).
			t.Parallel()
			for _, b := range behaviours {
				t.Run(strings.ReplaceAll(b.name, " ", "_"), func(t *testing.T) { b.run(t, r) })
			}
		})
	}
}

// success: the built-in trainer's run ends in success with a held-out
// score and prelabels, exit 0 and exit_code 0.
func conformSuccess(t *testing.T, r rig) {
	b := r.bench(t, 120, 100, "")
	id := b.Detach("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	b.start()
	info := b.Wait(id, 3*time.Minute)
	if info.State != rundir.StateSuccess || info.Heldout == nil || info.Writeback["n_written"] == 0 || info.ArtifactURI == "" {
		t.Fatalf("state %s error %q heldout %v writeback %v artifact_uri %q\n%s", info.State, info.Error, info.Heldout, info.Writeback, info.ArtifactURI, b.dump(id))
	}
	b.exitCode(id, 0)
}

// device: the spec a training process reads names a device that exists
// in its own environment, and POTATO_TRAINING_DEVICE agrees, on every
// backend: one trainer.LaunchEnv makes both. The endless trainer logs what
// it was given, then hands the run to the built-in trainer.
func conformDevice(t *testing.T, r rig) {
	keys, env, device, visible := r.pinGPU(t)
	b := r.bench(t, 120, 100, keys)
	b.Env = append(b.Env, env...)
	e := b.endless()
	id := b.Detach(append(e.Args(), "--param", "events=1")...)
	b.start()
	info := b.Wait(id, 3*time.Minute)
	log := b.File(id, rundir.LogFile)
	want := regexp.MustCompile(`device: spec ` + regexp.QuoteMeta(device) + `, CUDA_VISIBLE_DEVICES=` + visible + `, POTATO_TRAINING_DEVICE=` + regexp.QuoteMeta(device) + `\n`)
	if info.State != rundir.StateSuccess || !want.MatchString(log) {
		t.Fatalf("state %s error %q; the run log lacks %s\n%s", info.State, info.Error, want, b.dump(id))
	}
}

// trainer failure: a trainer's error event is the run's error and
// error_code, whatever the backend: the built-in trainer refuses a
// schema with too few labelled items (validation_failed).
func conformTrainerFailure(t *testing.T, r rig) {
	b := r.bench(t, 40, 6, "")
	id := b.Detach("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	b.start()
	info := b.Wait(id, 3*time.Minute)
	if info.State != rundir.StateError || info.ErrorCode != "validation_failed" || !strings.Contains(info.Error, "needs at least 10 items") {
		t.Fatalf("state %s error_code %q error %q\n%s", info.State, info.ErrorCode, info.Error, b.dump(id))
	}
	b.exitCode(id, 1)
}

// cancel while queued: a queued run that is cancelled ends cancelled
// without a training process. The run is queued behind a dispatch queue
// that the test holds, or, on the agent backend, for want of an agent.
func conformCancelQueued(t *testing.T, r rig) {
	b := r.bench(t, 120, 100, "")
	if b.serve != nil {
		// The agent backend's own queue: no agent is polling.
	} else {
		release := b.holdQueue()
		defer release()
	}
	id := b.Detach("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	testproject.WaitFor(t, "the run to be queued", func() bool {
		info := b.Info(id)
		return info.State == rundir.StateQueued && strings.HasPrefix(info.Step, "waiting")
	})
	b.cancel(id)
	info := b.Wait(id, time.Minute)
	if info.State != rundir.StateCancelled || !strings.HasPrefix(info.Error, "cancelled") {
		t.Fatalf("state %s error %q\n%s", info.State, info.Error, b.dump(id))
	}
	if ev := b.File(id, rundir.EventsFile); strings.Contains(ev, `"event":"progress"`) {
		t.Errorf("a training process ran:\n%.1000s", ev)
	}
	b.exitCode(id, 3)
}

// cancel while running: the training process is stopped and the run ends
// cancelled, exit 3, with no process left on the far side.
func conformCancelRunning(t *testing.T, r rig) {
	b := r.bench(t, 120, 100, "")
	id := b.Detach(b.endless().Args()...)
	b.start()
	b.waitTraining(id)
	b.cancel(id)
	info := b.Wait(id, 2*time.Minute)
	if info.State != rundir.StateCancelled || info.ErrorCode != "cancelled" {
		t.Fatalf("state %s error_code %q error %q\n%s", info.State, info.ErrorCode, info.Error, b.dump(id))
	}
	b.exitCode(id, 3)
	if b.farSide != nil {
		testproject.WaitFor(t, "the far side to stop", func() bool { return len(b.farSide(id)) == 0 })
	}
}

// heartbeat loss: an agent that falls silent (SIGSTOP: hung, or cut off)
// fails the run after heartbeat_timeout_s with the exact text of F6/G9.
func conformHeartbeatLoss(t *testing.T, r rig) {
	if r.noHeartbeat != "" {
		t.Logf("%s has no heartbeat: %s", r.name, r.noHeartbeat)
		return
	}
	b := r.bench(t, 120, 100, "")
	id := b.Detach(b.endless().Args()...)
	b.start()
	b.waitTraining(id)
	pids := b.farSide(id)
	if len(pids) == 0 {
		t.Fatalf("no far-side process\n%s", b.dump(id))
	}
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGSTOP)
	}
	// The stopped agent's trainer goes with it once the run has ended.
	defer killTree(pids)
	info := b.Wait(id, 2*time.Minute)
	want := fmt.Sprintf("No word from the agent on %s for %d seconds", b.backend, heartbeatS)
	if info.State != rundir.StateError || !strings.Contains(info.Error, want) {
		t.Fatalf("state %s error %q, want %q\n%s", info.State, info.Error, want, b.dump(id))
	}
	b.exitCode(id, 1)
}

// artifacts too large: a model file over max_artifact_mb stays on the far
// side and is named in the run log; the run succeeds with the rest, and
// artifact_uri says where the model is.
func conformArtifactsTooLarge(t *testing.T, r rig) {
	if r.noArtifactLimit != "" {
		t.Logf("%s has no artifact limit: %s", r.name, r.noArtifactLimit)
		return
	}
	b := r.bench(t, 120, 100, "      max_artifact_mb: 1\n")
	tr := testproject.Trainer(t, b.programs, `mkdir -p artifacts
head -c 2000000 /dev/zero > artifacts/big.bin
echo small > artifacts/small.txt
`+testproject.ResultLines)
	id := b.Detach("--trainer", tr, "--schemas", "sentiment")
	info := b.Wait(id, 3*time.Minute)
	log := b.File(id, rundir.LogFile)
	if info.State != rundir.StateSuccess || !strings.Contains(log, "big.bin is over max_artifact_mb (1 MB)") || info.ArtifactURI == "" {
		t.Fatalf("state %s error %q artifact_uri %q\n%s", info.State, info.Error, info.ArtifactURI, b.dump(id))
	}
	art := filepath.Join(b.Root().RunDir(id), rundir.ArtifactsDir)
	if got, err := os.ReadFile(filepath.Join(art, "small.txt")); err != nil || string(got) != "small\n" {
		t.Errorf("small.txt did not come back: %q %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(art, "big.bin")); err == nil {
		t.Errorf("big.bin came back")
	}
	if st, err := os.Stat(filepath.Join(b.remoteArtifacts(id), "big.bin")); err != nil || st.Size() != 2000000 {
		t.Errorf("big.bin is not whole on the far side: %v", err)
	}
	b.exitCode(id, 0)
}

// endless is a fit that lasts until it is stopped (testproject.Endless).
func (b *bench) endless() *testproject.Endless {
	return testproject.NewEndless(b.t, b.programs, b.worker)
}

func (b *bench) start() {
	if b.serve != nil {
		b.serve()
	}
}

func (b *bench) cancel(id string) {
	b.t.Helper()
	if out, err := b.Command("potato-dispatch", "cancel", b.Config, id).CombinedOutput(); err != nil {
		b.t.Fatalf("cancel: %v: %s", err, out)
	}
}

// waitTraining waits until the trainer reports progress, so that a
// process is running on the far side.
func (b *bench) waitTraining(id string) {
	b.t.Helper()
	testproject.WaitFor(b.t, "the training process", func() bool {
		info := b.Info(id)
		return info.Finished || (info.State == rundir.StateRunning && info.Progress != nil && info.Progress.Phase != "fetch")
	})
	if info := b.Info(id); info.Finished {
		b.t.Fatalf("the run ended: %s %q\n%s", info.State, info.Error, b.dump(id))
	}
}

// holdQueue takes the project's queue.lock, as a running dispatch does,
// so that a new run waits in the queue until release.
func (b *bench) holdQueue() (release func()) {
	b.t.Helper()
	if err := os.MkdirAll(b.Root().Dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(b.Root().Dir, "queue.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		b.t.Fatal(err)
	}
	return func() { f.Close() }
}

// exitCode checks the run's exit_code file, which is written last.
func (b *bench) exitCode(id string, want int) {
	b.t.Helper()
	got := strings.TrimSpace(b.File(id, rundir.ExitCodeFile))
	if got != strconv.Itoa(want) {
		b.t.Errorf("exit_code %q, want %d", got, want)
	}
}

func (b *bench) dump(id string) string {
	return "run.log:\n" + b.File(id, rundir.LogFile) + "\nagent.log:\n" + b.File(id, rundir.AgentLogFile)
}

func newBench(t *testing.T, name string, n, labelled int, block string) *bench {
	dir := t.TempDir()
	b := &bench{t: t, backend: name, Runs: &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir}}
	// The project's grace_seconds is 1, so that a cancel ends in seconds,
	// and the agents post at least every grace/2, well within the heartbeat.
	b.Config = testproject.Write(t, dir, n, labelled, block)
	return b
}

func localBench(t *testing.T, n, labelled int, keys string) *bench {
	b := newBench(t, "local", n, labelled, keys)
	b.programs = t.TempDir()
	b.worker = filepath.Join(b.Bin, "potato-agent")
	return b
}

// killTree kills pids and their descendants.
func killTree(pids []int) {
	for _, p := range pids {
		out, _ := exec.Command("pgrep", "-P", strconv.Itoa(p)).Output()
		var children []int
		for _, f := range strings.Fields(string(out)) {
			if c, err := strconv.Atoi(f); err == nil {
				children = append(children, c)
			}
		}
		syscall.Kill(p, syscall.SIGKILL)
		killTree(children)
	}
}

// agentsOf is the potato-agent processes of the test sshd's user whose
// socket is the run's.
func agentsOf(id string) []int {
	out, _ := exec.Command("pgrep", "-u", "potatotest", "-f", "potato-agent --socket /tmp/potato-"+id).Output()
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

func sshBench(t *testing.T, n, labelled int, keys string) *bench {
	sd := testcli.SSHD(t)
	remoteDir := testcli.SharedDir(t, 0o777)
	if !strings.Contains(keys, "gpus:") {
		keys = "      gpus: none\n" + keys
	}
	b := newBench(t, "gpu", n, labelled, testcli.SSHBackend("potato-test", sd+"/ssh_config", remoteDir, heartbeatS, keys))
	b.programs = testcli.SharedDir(t, 0o755)
	b.worker = remoteDir + "/code/*/potato-agent"
	b.farSide = agentsOf
	b.remoteArtifacts = func(id string) string { return filepath.Join(remoteDir, "jobs", id, "artifacts") }
	return b
}

// slurmBench is a project on the real single-node SLURM, its login node
// the test sshd. remote_dir is in the remote user's home, which the
// compute node shares (SPEC V1 refuses /tmp).
func slurmBench(t *testing.T, n, labelled int, keys string) *bench {
	conf := filepath.Join(testcli.SLURM(t), "slurm.conf")
	remoteDir := testcli.UserDir(t, "/home/potatotest")
	env := fmt.Sprintf(`PATH: "/usr/local/bin:/usr/bin:/bin", SLURM_CONF: "%s", POTATO_TRAINING_EXIT_CODE_WAIT_S: "3"`, conf)
	b := newBench(t, "cluster", n, labelled, testcli.SLURMBackend(t, remoteDir, heartbeatS, env, "      time: \"10:00\"\n"+keys))
	b.programs = testcli.SharedDir(t, 0o755)
	b.worker = remoteDir + "/code/*/potato-agent"
	b.farSide = agentsOf
	b.remoteArtifacts = func(id string) string { return filepath.Join(remoteDir, "jobs", id, "artifacts") }
	// A job whose agent was stopped outlives its run: the test cancels
	// the jobs its runs submitted, and no other (the cluster is shared).
	t.Cleanup(func() {
		logs, _ := filepath.Glob(filepath.Join(b.Root().Dir, "runs", "*", rundir.LogFile))
		for _, l := range logs {
			text, _ := os.ReadFile(l)
			for _, m := range regexp.MustCompile(`Submitted SLURM job (\d+)`).FindAllStringSubmatch(string(text), -1) {
				cmd := exec.Command("scancel", m[1])
				cmd.Env = append(os.Environ(), "SLURM_CONF="+conf)
				cmd.Run()
			}
		}
	})
	return b
}

// agentBench is a project whose backend "lab" is of type agent, served by
// potato-server on a free loopback port; serve starts a polling
// potato-agent with the backend's token in its environment.
func agentBench(t *testing.T, n, labelled int, keys string) *bench {
	b := newBench(t, "lab", n, labelled, fmt.Sprintf(`  backend: lab
  backends:
    lab:
      type: agent
      heartbeat_timeout_s: %d
`, heartbeatS)+keys)
	tok, err := b.Root().IssueToken("lab", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	addr := b.StartServer()
	// The agent runs the endless trainer of the tests that need a fit
	// that lasts, and no other program.
	b.programs = testcli.SharedDir(t, 0o755)
	b.worker = filepath.Join(b.Bin, "potato-agent")
	allowed := b.endless().Program()
	var agent *exec.Cmd
	b.serve = func() {
		agent = exec.Command(filepath.Join(b.Bin, "potato-agent"), "--server", "http://"+addr, "--backend", "lab", "--workdir", t.TempDir(),
			"--allow-exec", allowed)
		agent.Env = append(os.Environ(), "POTATO_TRAINING_TOKEN="+tok)
		if err := agent.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { killTree([]int{agent.Process.Pid}); agent.Wait() })
	}
	// The far side of a run is the agent's worker, a child of the agent;
	// the agent itself is what speaks for it.
	b.farSide = func(id string) []int {
		if agent == nil || agent.Process == nil {
			return nil
		}
		out, _ := exec.Command("pgrep", "-P", strconv.Itoa(agent.Process.Pid)).Output()
		if strings.TrimSpace(string(out)) == "" {
			return nil
		}
		return []int{agent.Process.Pid}
	}

	return b
}
