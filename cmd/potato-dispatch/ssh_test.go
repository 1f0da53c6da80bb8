package main

// These tests run whole runs through the system's ssh against the real
// sshd that scripts/test-sshd starts on loopback. The GPUs are a fake
// nvidia-smi put first on the remote PATH through the backend's env,
// because this machine has none; torch, where a test needs it, is a fake
// module on the remote PYTHONPATH, for the same reason.

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"potato-training/internal/fakebin"
	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

func sshdDir(t *testing.T) string { return testcli.SSHD(t) }

type sshEnv struct {
	*testproject.Runs
	t         *testing.T
	fakes     string // the remote PATH's first directory
	remoteDir string
}

// sshSetup writes a project whose default backend "gpu" is the test sshd.
// gpus is the fake nvidia-smi's listing ("" = no nvidia-smi at all);
// backend holds extra keys of the backend; extra of model_training.
func sshSetup(t *testing.T, gpus, backend, extra string) *sshEnv {
	sd := sshdDir(t)
	e := &sshEnv{t: t, fakes: testcli.SharedDir(t, 0o755), remoteDir: testcli.SharedDir(t, 0o777), Runs: &testproject.Runs{T: t,
		Bin: testcli.Binaries(t), Dir: t.TempDir(), Env: []string{"POTATO_TRAINING_STALL_TIMEOUT_S=2"}}}
	if gpus != "" {
		fakebin.NvidiaSMI(t, e.fakes, gpus)
	}
	env := fmt.Sprintf("      env: {PATH: \"%s:/usr/local/bin:/usr/bin:/bin\"}\n", e.fakes)
	e.Config = testproject.Write(t, e.Dir, 120, 100, testcli.SSHBackend("potato-test", sd+"/ssh_config", e.remoteDir, 4, env+backend+extra))
	return e
}

const twoGPUs = "0, GPU-aaaa, NVIDIA H200, 143771, 9000, 80, 9.0\n1, GPU-bbbb, NVIDIA H200, 143771, 120000, 5, 9.0\n"

func testRunEndToEndAndCodeReuse(t *testing.T) {
	e := sshSetup(t, twoGPUs, "", "")
	r := e.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s\n%s", r.Code, r.Stderr, e.File(r.ID, "run.log"))
	}
	info := e.Info(r.ID)
	log := e.File(r.ID, "run.log")
	if info.State != rundir.StateSuccess || info.Heldout == nil || info.RanOn != "gpu (ssh to potato-test)" || info.BackendType != "ssh" {
		t.Errorf("record: %+v", info.Record)
	}
	// The built-in trainer uses no GPU: it trains on the host's CPU,
	// however many GPUs the host has.
	for _, want := range []string{"copied Potato's code", "tfidf-logreg uses no GPU: training on the CPU of potato-test", "potato-test: Linux"} {
		if !strings.Contains(log, want) {
			t.Errorf("run log lacks %q:\n%s", want, log)
		}
	}
	if info.Device != "cpu" || strings.Contains(log, "GPU obtained") {
		t.Errorf("device %q", info.Device)
	}
	models, _ := filepath.Glob(filepath.Join(e.Root().RunDir(r.ID), "artifacts", "model-*.json"))
	if len(models) != 1 {
		t.Errorf("the model did not come back: %v", models)
	}
	if _, err := os.Stat(filepath.Join(e.remoteDir, "jobs", r.ID)); !os.IsNotExist(err) {
		t.Errorf("the remote job directory is still there: %v", err)
	}
	second := e.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	log2 := e.File(second.ID, "run.log")
	if second.Code != 0 || strings.Contains(log2, "copied Potato's code") || !strings.Contains(log2, "is on potato-test already") {
		t.Errorf("second run: exit %d, log:\n%s", second.Code, log2)
	}
	codes, _ := os.ReadDir(filepath.Join(e.remoteDir, "code"))
	if len(codes) != 1 {
		t.Errorf("remote code directories: %v", codes)
	}
}

// The token reaches the agent on standard input only: no process of the
// remote user has it in its argv or environment, and no log holds it.
func testTokenNeverOnACommandLineOrInALog(t *testing.T) {
	e := sshSetup(t, "", "", "")
	// The trainer holds the run until the test has looked.
	progs := testcli.SharedDir(t, 0o755)
	gate := filepath.Join(progs, "gate")
	tr := testproject.Trainer(t, progs, `echo '{"v":1,"event":"status","state":"fitting","step":"holding"}'
while [ ! -e `+gate+` ]; do sleep 0.1; done
`+testproject.ResultLines)
	// The dispatch takes the run's token from this variable, a seam for
	// tests only, so the test knows what to look for.
	token := "5e1ec7ab1e" + strings.Repeat("0123456789abcdef", 3) + "feedface0d"
	cmd := e.Command("potato-dispatch", "run", e.Config, "--trainer", tr, "--schemas", "sentiment", "--detach")
	cmd.Env = append(cmd.Env, "POTATO_TRAINING_TEST_TOKEN="+token)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(string(out))
	testproject.WaitFor(t, "the trainer", func() bool { return e.Info(id).Step == "holding" })
	procs, _ := filepath.Glob("/proc/[0-9]*")
	seen := 0
	remoteUID, _ := testcli.RemoteIDs(t)
	uid := uint32(remoteUID)
	for _, p := range procs {
		if st, err := os.Stat(p); err != nil || st.Sys().(*syscall.Stat_t).Uid != uid {
			continue
		}
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(filepath.Join(p, f))
			if err != nil {
				continue
			}
			seen++
			if bytes.Contains(b, []byte(token)) {
				cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
				t.Errorf("%s/%s holds the token (%q)", p, f, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}))
			}
		}
	}
	if seen < 4 {
		t.Fatalf("read only %d /proc files of the remote user's processes", seen)
	}
	socks, _ := filepath.Glob("/tmp/potato-" + id + "-*.sock")
	if len(socks) != 1 {
		t.Fatalf("remote sockets: %v", socks)
	}
	st, err := os.Stat(socks[0])
	if err != nil || st.Mode().Perm() != 0o600 || st.Mode()&os.ModeSocket == 0 {
		t.Errorf("remote socket %s: %v %v", socks[0], st.Mode(), err)
	}
	sock := filepath.Join(e.Root().RunDir(id), "agent.sock")
	if p := e.Info(id).AgentSocket; p != "" {
		sock = p // a run directory too deep for a socket path
	}
	local, err := os.Stat(sock)
	if err != nil || local.Mode().Perm() != 0o600 {
		t.Errorf("local socket %s: %v", sock, err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testproject.WaitFor(t, "the end", func() bool { return e.Info(id).Finished })
	for _, name := range []string{"run.log", "agent.log", "run.json", "events.jsonl", "spec.json"} {
		if strings.Contains(e.File(id, name), token) {
			t.Errorf("%s holds the token", name)
		}
	}
	if s := e.Info(id).State; s != rundir.StateSuccess {
		t.Errorf("state %s:\n%s", s, e.File(id, "run.log"))
	}
}

func testKeyRefusedFailsAtOnce(t *testing.T) {
	e := sshSetup(t, "", "", "")
	cfg, _ := os.ReadFile(e.Config)
	os.WriteFile(e.Config, bytes.Replace(cfg, []byte("host: potato-test\n"), []byte("host: potato-test-pw\n"), 1), 0o644)
	r := e.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	info := e.Info(r.ID)
	if r.Code != 1 || info.Error != "ssh to potato-test-pw failed: Permission denied" {
		t.Errorf("exit %d error %q", r.Code, info.Error)
	}
}

func testGPUChoice(t *testing.T) {
	cases := []struct {
		name, gpus, backend string
		device, err         string
	}{
		{"below the threshold", twoGPUs, "      min_free_gpu_mb: 130000\n", "", "No GPU has 130000 MB free"},
		{"pinned", twoGPUs, "      gpus: \"0\"\n", "cuda:0", ""},
		{"pinned two", twoGPUs, "      gpus: [0, 1]\n", "cuda:0,1", ""},
		{"pinned absent", twoGPUs, "      gpus: \"3\"\n", "", "gpus pins GPU 3, which potato-test does not have"},
		{"none", twoGPUs, "      gpus: none\n", "cpu", ""},
		{"no GPU on the host", "", "", "cpu", ""},
	}
	// A program may use a GPU, so it gets the one gpus chooses.
	tr := testproject.Trainer(t, testcli.SharedDir(t, 0o755), testproject.ResultLines)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := sshSetup(t, c.gpus, c.backend, "")
			r := e.Run("--trainer", tr, "--schemas", "sentiment")
			info := e.Info(r.ID)
			if c.err != "" {
				if r.Code != 1 || info.Error != c.err {
					t.Errorf("exit %d error %q, want %q", r.Code, info.Error, c.err)
				}
				return
			}
			if r.Code != 0 || info.Device != c.device {
				t.Errorf("exit %d device %q, want %q\n%s", r.Code, info.Device, c.device, e.File(r.ID, "run.log"))
			}
		})
	}
}

// A fake torch built for sm_80 only (this machine has no CUDA torch)
// cannot use the H200s (9.0). The torch checks apply only to trainers that
// need torch: a program trainer gets the GPU with the most free memory,
// the H200, and runs even where torch can use no GPU at all. The choice
// for a torch trainer is TestChooseDeviceForTorch's, in lib/check.
func testGPUWithoutTorchKernels(t *testing.T) {
	py := testcli.SharedDir(t, 0o755)
	os.MkdirAll(filepath.Join(py, "torch", "cuda"), 0o755)
	os.WriteFile(filepath.Join(py, "torch", "__init__.py"), []byte("__version__ = '2.4.0'\nfrom . import cuda, version\n"), 0o644)
	os.WriteFile(filepath.Join(py, "torch", "version.py"), []byte("cuda = '12.4'\n"), 0o644)
	os.WriteFile(filepath.Join(py, "torch", "cuda", "__init__.py"), []byte("def get_arch_list():\n    return ['sm_80', 'sm_86']\ndef is_available():\n    return True\n"), 0o644)
	gpus := "0, GPU-aaaa, NVIDIA A100, 81920, 70000, 0, 8.0\n1, GPU-bbbb, NVIDIA H200, 143771, 140000, 0, 9.0\n"
	e := sshSetup(t, gpus, "", "")
	cfg, _ := os.ReadFile(e.Config)
	os.WriteFile(e.Config, bytes.Replace(cfg, []byte("env: {PATH:"), []byte("env: {PYTHONPATH: \""+py+"\", PATH:"), 1), 0o644)
	tr := testproject.Trainer(t, testcli.SharedDir(t, 0o755), testproject.ResultLines)
	r := e.Run("--trainer", tr, "--schemas", "sentiment")
	info := e.Info(r.ID)
	log := e.File(r.ID, "run.log")
	if r.Code != 0 || info.Device != "cuda:1" || strings.Contains(log, "no kernels") {
		t.Errorf("exit %d device %q\n%s", r.Code, info.Device, log)
	}
	e2 := sshSetup(t, "0, GPU-bbbb, NVIDIA H200, 143771, 140000, 0, 9.0\n", "", "")
	cfg, _ = os.ReadFile(e2.Config)
	os.WriteFile(e2.Config, bytes.Replace(cfg, []byte("env: {PATH:"), []byte("env: {PYTHONPATH: \""+py+"\", PATH:"), 1), 0o644)
	r = e2.Run("--trainer", tr, "--schemas", "sentiment")
	if info := e2.Info(r.ID); r.Code != 0 || info.Device != "cuda:0" {
		t.Errorf("exit %d device %q error %q", r.Code, info.Device, info.Error)
	}
}

// The host's real Python is Debian's, with its CPU-only torch and no
// transformers (nvidia-smi is the fake: this machine has no GPU). A torch
// trainer whose model needs torch alone runs there, on the CPU, with the
// warning; the built-in trainer, which uses no GPU, runs on the CPU too.
func testTorchTrainerOnACPUTorchHost(t *testing.T) {
	requireTorch(t)
	e := sshSetup(t, twoGPUs, "", "")
	r := e.Run("--trainer", "hf-text-classification", "--param", "model=builtin:ngram", "--param", "epochs=2", "--schemas", "sentiment")
	info := e.Info(r.ID)
	log := e.File(r.ID, "run.log")
	if r.Code != 0 || info.State != rundir.StateSuccess || info.Device != "cpu" || info.Heldout == nil {
		t.Fatalf("exit %d device %q state %s error %q\n%s", r.Code, info.Device, info.State, info.Error, log)
	}
	if !strings.Contains(log, "is a CPU build, so the run trains on the CPU of potato-test") {
		t.Errorf("run log lacks the CPU torch warning:\n%s", log)
	}
	r = e.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	if info := e.Info(r.ID); r.Code != 0 || info.Device != "cpu" {
		t.Errorf("tfidf-logreg: exit %d device %q error %q", r.Code, info.Device, info.Error)
	}
}

// requireTorch skips a test where the test host's /usr/bin/python3 has no
// torch, except in CI, where scripts/install-deps installed it.
func requireTorch(t *testing.T) {
	t.Helper()
	if !testcli.HasModule("/usr/bin/python3", "torch") {
		if os.Getenv("CI") != "" {
			t.Fatal("CI: /usr/bin/python3 has no torch (scripts/install-deps installs python3-torch)")
		}
		t.Skip("/usr/bin/python3 has no torch: install Debian's python3-torch (scripts/install-deps)")
	}
}

// The fault: a trainer on the host that ignores SIGTERM. Expected: cancel
// reaches the agent in its next reply, the run ends cancelled after
// grace_seconds, and the trainer is killed.
func testCancelATrainerThatIgnoresTERM(t *testing.T) {
	e := sshSetup(t, "", "", "")
	marker := testcli.SharedDir(t, 0o777)
	tr := testproject.Trainer(t, testcli.SharedDir(t, 0o755), `trap '' TERM
echo $$ > `+marker+`/pid
echo '{"v":1,"event":"status","state":"fitting","step":"ignoring TERM"}'
while :; do sleep 0.2; done`)
	id := e.Detach("--trainer", tr, "--schemas", "sentiment")
	testproject.WaitFor(t, "the trainer", func() bool { return e.Info(id).Step == "ignoring TERM" })
	c := e.Command("potato-dispatch", "cancel", e.Config, id)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("cancel: %v %s", err, out)
	}
	testproject.WaitFor(t, "the end", func() bool { return e.Info(id).Finished })
	if info := e.Info(id); info.State != rundir.StateCancelled {
		t.Errorf("state %s: %s", info.State, info.Error)
	}
	pidb, _ := os.ReadFile(filepath.Join(marker, "pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidb)))
	testproject.WaitFor(t, "the trainer to be killed", func() bool { return pid > 0 && syscall.Kill(pid, 0) != nil })
}

// The fault: the agent stops answering (SIGSTOP: a hung agent). Expected:
// F6 after heartbeat_timeout_s, and agent.log kept.
func testSSHSilentAgentFailsTheRun(t *testing.T) {
	e := sshSetup(t, "", "", "")
	tr := testproject.Trainer(t, testcli.SharedDir(t, 0o755), `echo '{"v":1,"event":"status","state":"fitting","step":"working"}'
sleep 60`)
	id := e.Detach("--trainer", tr, "--schemas", "sentiment")
	testproject.WaitFor(t, "the trainer", func() bool { return e.Info(id).Step == "working" })
	out, _ := exec.Command("pgrep", "-u", "potatotest", "-f", "potato-agent --socket /tmp/potato-"+id).Output()
	pids := strings.Fields(string(out))
	if len(pids) == 0 {
		t.Fatal("no remote agent process found")
	}
	for _, p := range pids {
		pid, _ := strconv.Atoi(p)
		syscall.Kill(pid, syscall.SIGSTOP)
		defer syscall.Kill(pid, syscall.SIGKILL)
	}
	testproject.WaitFor(t, "the end", func() bool { return e.Info(id).Finished })
	info := e.Info(id)
	if info.State != rundir.StateError || info.Error != "No word from the agent on gpu for 4 seconds" {
		t.Errorf("state %s error %q", info.State, info.Error)
	}
	if _, err := os.Stat(filepath.Join(e.Root().RunDir(id), "agent.log")); err != nil {
		t.Errorf("agent.log: %v", err)
	}
	exec.Command("pkill", "-u", "potatotest", "-f", tr[len("exec:"):]).Run()
}

// The fault: the ssh session is killed mid-run. Expected: the run fails
// naming the session, and the agent stops its trainer (stdin EOF).
func testSSHSessionKilled(t *testing.T) {
	e := sshSetup(t, "", "", "")
	marker := testcli.SharedDir(t, 0o777)
	tr := testproject.Trainer(t, testcli.SharedDir(t, 0o755), `echo $$ > `+marker+`/pid
echo '{"v":1,"event":"status","state":"fitting","step":"working"}'
sleep 60`)
	id := e.Detach("--trainer", tr, "--schemas", "sentiment")
	testproject.WaitFor(t, "the trainer", func() bool { return e.Info(id).Step == "working" })
	// The session is the ssh client whose command starts the agent.
	out, _ := exec.Command("pgrep", "-u", "root", "-f", "ssh .*--socket /tmp/potato-"+id).Output()
	if len(strings.Fields(string(out))) == 0 {
		t.Fatal("no ssh session process found")
	}
	for _, p := range strings.Fields(string(out)) {
		pid, _ := strconv.Atoi(p)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	testproject.WaitFor(t, "the end", func() bool { return e.Info(id).Finished })
	info := e.Info(id)
	if info.State != rundir.StateError || !strings.Contains(info.Error, "the ssh session to potato-test ended before the agent reported a result") {
		t.Errorf("state %s error %q\n%s\n%s", info.State, info.Error, e.File(id, "run.log"), e.File(id, "agent.log"))
	}
	pidb, _ := os.ReadFile(filepath.Join(marker, "pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidb)))
	testproject.WaitFor(t, "the orphaned trainer to be stopped", func() bool { return pid > 0 && syscall.Kill(pid, 0) != nil })
}

// A model file over max_artifact_mb stays on the host and is named in the
// run log; the small one and the one over 16 MiB, which comes on a session
// of its own (tar stream), come back whole; the job directory is kept. The
// same by the tar stream, a first copy's way, and by rsync, which resumes
// a cut copy, chosen through the test build's seam
// POTATO_TRAINING_TEST_RSYNC.
func testArtifactOverTheLimit(t *testing.T) {
	for _, method := range []string{"tar stream", "rsync"} {
		t.Run(method, func(t *testing.T) { artifactOverTheLimit(t, method) })
	}
}

func artifactOverTheLimit(t *testing.T, method string) {
	e := sshSetup(t, "", "      max_artifact_mb: 20\n", "")
	if method == "rsync" {
		if _, err := exec.LookPath("rsync"); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatal("no rsync: .ci/run installs it with scripts/install-deps")
			}
			t.Skip("no rsync: scripts/install-deps installs it")
		}
		e.Env = append(e.Env, "POTATO_TRAINING_TEST_RSYNC=always")
	}
	tr := testproject.Trainer(t, testcli.SharedDir(t, 0o755), `mkdir -p artifacts/sub
head -c 22000000 /dev/zero > artifacts/big.bin
head -c 17000000 /dev/urandom > artifacts/sub/direct.bin
echo small > artifacts/small.txt
`+testproject.ResultLines)
	r := e.Run("--trainer", tr, "--schemas", "sentiment")
	log := e.File(r.ID, "run.log")
	if r.Code != 0 || !strings.Contains(log, "big.bin is over max_artifact_mb (20 MB): it stays on potato-test") ||
		!strings.Contains(log, "copying the model from potato-test by "+method) {
		t.Errorf("exit %d:\n%s", r.Code, log)
	}
	art := filepath.Join(e.Root().RunDir(r.ID), "artifacts")
	if b, err := os.ReadFile(filepath.Join(art, "small.txt")); err != nil || string(b) != "small\n" {
		t.Errorf("small.txt did not come back: %q %v", b, err)
	}
	got, err := os.ReadFile(filepath.Join(art, "sub", "direct.bin"))
	want, _ := os.ReadFile(filepath.Join(e.remoteDir, "jobs", r.ID, "artifacts", "sub", "direct.bin"))
	if err != nil || len(want) != 17000000 || !bytes.Equal(got, want) {
		t.Errorf("sub/direct.bin: %d bytes, %v; want the host's %d bytes", len(got), err, len(want))
	}
	if _, err := os.Stat(filepath.Join(art, "big.bin")); err == nil {
		t.Errorf("big.bin came back")
	}
	if info := e.Info(r.ID); !strings.HasPrefix(info.ArtifactURI, "ssh://") || info.Progress == nil ||
		info.Progress.Phase != "fetch" || info.Progress.Current != 17000006 || info.Progress.Total != 17000006 {
		t.Errorf("artifact_uri %q, progress %+v", info.ArtifactURI, info.Progress)
	}
	if _, err := os.Stat(filepath.Join(e.remoteDir, "jobs", r.ID, "artifacts", "big.bin")); err != nil {
		t.Errorf("big.bin is not on the host: %v", err)
	}
}

// A stalled copy (F7), a fault hard to cause for real on loopback: the
// remote agent's copy back runs under a wrapper that sends nothing for
// 30 s before it starts the sender, at each of the copy's three attempts.
// The test build's seam
// POTATO_TRAINING_TEST_FETCH_WRAPPER names the wrapper
// (fetchwrapper_potatotest.go). The stall timeout is 2 s here. The
// predictions are kept and published; the model stays on the host.
func testStalledCopy(t *testing.T) {
	e := sshSetup(t, "", "", "")
	wrapper := filepath.Join(e.fakes, "slow-sender")
	pidFile := filepath.Join(e.remoteDir, "sleep.pid")
	testcli.WriteExecutable(t, wrapper, []byte("#!/bin/sh\nsleep 30 & echo $! >> "+pidFile+"\nwait $!\nexec \"$@\"\n"))
	tr := testproject.Trainer(t, testcli.SharedDir(t, 0o755), `mkdir -p artifacts
echo model > artifacts/a.txt
`+testproject.ResultLines)
	cmd := e.Command("potato-dispatch", "run", e.Config, "--trainer", tr, "--schemas", "sentiment")
	cmd.Env = append(cmd.Env, "POTATO_TRAINING_TEST_FETCH_WRAPPER="+wrapper)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	id := strings.TrimSpace(string(out))
	info := e.Info(id)
	log := e.File(id, "run.log")
	if info.State != rundir.StateSuccess || !strings.Contains(log, "The copy from potato-test sent nothing for 2 s: the run's predictions are already kept; only the model files are missing from artifacts/") {
		t.Errorf("state %s:\n%s", info.State, log)
	}
	if _, err := os.Stat(filepath.Join(e.Root().RunDir(id), "predictions.jsonl")); err != nil {
		t.Errorf("predictions: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.Root().RunDir(id), "artifacts", "a.txt")); err == nil {
		t.Errorf("a.txt arrived after all")
	}
	if _, err := os.Stat(filepath.Join(e.remoteDir, "jobs", id, "artifacts", "a.txt")); err != nil {
		t.Errorf("the model is not kept on the host: %v", err)
	}
	if !strings.Contains(log, "trying again in 5 s, attempt 3 of 3") {
		t.Errorf("the run log does not say the copy was tried again:\n%s", log)
	}
	if b, err := os.ReadFile(pidFile); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// wheel writes a small pure-Python wheel, so pip installs it with no
// network.
func wheel(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "potatotestpkg-0.1-py3-none-any.whl")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	files := map[string]string{
		"potatotestpkg/__init__.py":            "VALUE = 42\n",
		"potatotestpkg-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: potatotestpkg\nVersion: 0.1\n",
		"potatotestpkg-0.1.dist-info/WHEEL":    "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	var record strings.Builder
	for _, name := range []string{"potatotestpkg/__init__.py", "potatotestpkg-0.1.dist-info/METADATA", "potatotestpkg-0.1.dist-info/WHEEL"} {
		w, _ := zw.Create(name)
		w.Write([]byte(files[name]))
		sum := sha256.Sum256([]byte(files[name]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[name]))
	}
	record.WriteString("potatotestpkg-0.1.dist-info/RECORD,,\n")
	w, _ := zw.Create("potatotestpkg-0.1.dist-info/RECORD")
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	os.Chmod(p, 0o644)
	return p
}

// packages: a venv made once under remote_dir with the host's own
// packages visible, the listed packages installed with its pip, and
// reused by the next run (SPEC S3).
func testPackagesVenv(t *testing.T) {
	whl := wheel(t, testcli.SharedDir(t, 0o755))
	e := sshSetup(t, "", "      python: /usr/bin/python3\n      packages: [\""+whl+"\"]\n", "")
	r := e.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	log := e.File(r.ID, "run.log")
	if r.Code != 0 || !strings.Contains(log, "packages: made venv-") {
		t.Fatalf("exit %d:\n%s", r.Code, log)
	}
	venvs, _ := filepath.Glob(filepath.Join(e.remoteDir, "venv-*", "bin", "python"))
	if len(venvs) != 1 {
		t.Fatalf("venvs: %v", venvs)
	}
	out, err := exec.Command("su", "potatotest", "-c", venvs[0]+" -c 'import potatotestpkg, sys; print(potatotestpkg.VALUE, sys.prefix != sys.base_prefix)'").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "42 True" {
		t.Errorf("the venv: %v %s", err, out)
	}
	cfg, _ := os.ReadFile(filepath.Join(filepath.Dir(venvs[0]), "..", "pyvenv.cfg"))
	if !strings.Contains(string(cfg), "include-system-site-packages = true") {
		t.Errorf("pyvenv.cfg:\n%s", cfg)
	}
	second := e.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	if log := e.File(second.ID, "run.log"); second.Code != 0 || !strings.Contains(log, "packages: using venv-") {
		t.Errorf("second run: exit %d:\n%s", second.Code, log)
	}
}

// With remote_dir left out, the code and jobs go to ~/.cache/potato-training
// of the remote user, and nothing of the run is left there afterwards but
// the code.
func testDefaultRemoteDir(t *testing.T) {
	e := sshSetup(t, "", "", "")
	cfg, _ := os.ReadFile(e.Config)
	os.WriteFile(e.Config, bytes.Replace(cfg, []byte("      remote_dir: "+e.remoteDir+"\n"), nil, 1), 0o644)
	home := "/home/potatotest/.cache/potato-training"
	t.Cleanup(func() { os.RemoveAll(home) })
	r := e.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s\n%s", r.Code, r.Stderr, e.File(r.ID, "run.log"))
	}
	if agents, _ := filepath.Glob(filepath.Join(home, "code", "*", "potato-agent")); len(agents) != 1 {
		t.Errorf("code in %s: %v", home, agents)
	}
	if jobs, _ := os.ReadDir(filepath.Join(home, "jobs")); len(jobs) != 0 {
		t.Errorf("jobs left: %v", jobs)
	}
	if socks, _ := filepath.Glob("/tmp/potato-" + r.ID + "-*.sock"); len(socks) != 0 {
		t.Errorf("the forwarded socket is left: %v", socks)
	}
}

// A relative remote_dir is taken from the remote home directory, as scp
// takes one, not from the job directory the agent runs in.
func testRelativeRemoteDir(t *testing.T) {
	e := sshSetup(t, "", "", "")
	rel := "potato-rel-" + filepath.Base(e.Dir)
	cfg, _ := os.ReadFile(e.Config)
	os.WriteFile(e.Config, bytes.Replace(cfg, []byte("      remote_dir: "+e.remoteDir+"\n"), []byte("      remote_dir: "+rel+"\n"), 1), 0o644)
	home := filepath.Join("/home/potatotest", rel)
	t.Cleanup(func() { os.RemoveAll(home) })
	r := e.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s\n%s", r.Code, r.Stderr, e.File(r.ID, "run.log"))
	}
	if agents, _ := filepath.Glob(filepath.Join(home, "code", "*", "potato-agent")); len(agents) != 1 {
		t.Errorf("code in %s: %v", home, agents)
	}
	if nested, _ := filepath.Glob(filepath.Join(home, "jobs", "*", rel)); len(nested) != 0 {
		t.Errorf("remote_dir resolved under a job directory: %v", nested)
	}
}

// TestSSH runs the ssh backend's tests one after the other, beside the
// other backends' groups.
func TestSSH(t *testing.T) {
	testcli.Group(t, []testcli.Case{
		{Name: "TestRunEndToEndAndCodeReuse", Run: testRunEndToEndAndCodeReuse},
		{Name: "TestLikertSSH", Run: testLikertSSH},
		{Name: "TestTokenNeverOnACommandLineOrInALog", Run: testTokenNeverOnACommandLineOrInALog},
		{Name: "TestKeyRefusedFailsAtOnce", Run: testKeyRefusedFailsAtOnce},
		{Name: "TestGPUChoice", Run: testGPUChoice},
		{Name: "TestGPUWithoutTorchKernels", Run: testGPUWithoutTorchKernels},
		{Name: "TestTorchTrainerOnACPUTorchHost", Run: testTorchTrainerOnACPUTorchHost},
		{Name: "TestCancelATrainerThatIgnoresTERM", Run: testCancelATrainerThatIgnoresTERM},
		{Name: "TestSSHSilentAgentFailsTheRun", Run: testSSHSilentAgentFailsTheRun},
		{Name: "TestSSHSessionKilled", Run: testSSHSessionKilled},
		{Name: "TestArtifactOverTheLimit", Run: testArtifactOverTheLimit},
		{Name: "TestStalledCopy", Run: testStalledCopy},
		{Name: "TestPackagesVenv", Run: testPackagesVenv},
		{Name: "TestDefaultRemoteDir", Run: testDefaultRemoteDir},
		{Name: "TestRelativeRemoteDir", Run: testRelativeRemoteDir},
	})
}
