package main

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	_ "modernc.org/sqlite"

	"potato-training/internal/fakebin"
	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

func trainerProgram(t *testing.T, dir, body string) string { return testproject.Trainer(t, dir, body) }

const resultLines = testproject.ResultLines

func dispatchCmd(t *testing.T, args ...string) *exec.Cmd {
	bin := testcli.Binaries(t)
	cmd := exec.Command(filepath.Join(bin, "potato-dispatch"), args...)
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	return cmd
}

type result struct {
	code   int
	stdout string
	stderr string
}

func run(t *testing.T, args ...string) result {
	t.Helper()
	code, out, errb := testproject.Exec(t, dispatchCmd(t, args...))
	return result{code, out, errb}
}

func runLog(t *testing.T, dir, id string) string {
	b, _ := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(id), "run.log"))
	return string(b)
}

func TestEndToEndBuiltinTrainer(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 300, 240, "")
	r := run(t, "run", cfg, "--trainer", "tfidf-logreg", "--schemas", "sentiment")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	if !rundir.ValidID(id) || strings.Contains(id, "\n") {
		t.Fatalf("stdout should be the run id alone, got %q", r.stdout)
	}
	info := testproject.Read(t, dir, id)
	if info.State != rundir.StateSuccess || info.Heldout == nil || info.Heldout.N == 0 {
		t.Fatalf("record: %+v", info.Record)
	}
	if info.Heldout.Accuracy < 0.8 {
		t.Errorf("held-out accuracy %.3f on a separable task", info.Heldout.Accuracy)
	}
	if !strings.Contains(r.stderr, "held-out accuracy") || !strings.Contains(r.stderr, "prelabels written to") ||
		!strings.Contains(r.stderr, "; Potato shows them after its next start") {
		t.Errorf("summary on stderr: %q", r.stderr)
	}
	code, _ := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(id), "exit_code"))
	if string(code) != "0\n" {
		t.Errorf("exit_code %q", code)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "project.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n, nTrain int
	db.QueryRow(`SELECT count(*) FROM training_predictions WHERE project = 'Test Project' AND run_id = ?`, id).Scan(&n)
	db.QueryRow(`SELECT count(*) FROM training_predictions p JOIN training_run_items i
		ON p.project = i.project AND p.instance_id = i.instance_id AND i.run_id = ?
		WHERE i.split = 'train'`, id).Scan(&nTrain)
	if n == 0 || nTrain != 0 {
		t.Errorf("prelabels: %d rows, %d of them in the train split", n, nTrain)
	}
	if info.Writeback["n_written"] != n {
		t.Errorf("run.json writeback %v, store has %d", info.Writeback, n)
	}
	var status, backend, metrics string
	db.QueryRow(`SELECT status, backend, metrics FROM training_runs WHERE run_id = ?`, id).Scan(&status, &backend, &metrics)
	if status != "success" || backend != "local" || !strings.Contains(metrics, `"test_accuracy"`) || !strings.Contains(metrics, `"val_accuracy"`) {
		t.Errorf("training_runs row: %q %q %q", status, backend, metrics)
	}
	checkRunRow(t, db, id, "success")

	// status --json carries the held-out figures of each label and the
	// confusion matrix; they add up to the test items scored.
	r = run(t, "status", cfg, id, "--json")
	var st struct {
		Metrics struct {
			Heldout map[string]struct {
				N      int `json:"n"`
				Labels []struct {
					Label           string
					Support, TP, FN int
				} `json:"labels"`
				Confusion *struct {
					Labels  []string `json:"labels"`
					Counts  [][]int  `json:"counts"`
					NoLabel []int    `json:"no_label"`
				} `json:"confusion"`
			} `json:"heldout"`
		} `json:"metrics"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	sc := st.Metrics.Heldout["sentiment"]
	if len(sc.Labels) != 2 || sc.Labels[0].Label != "positive" || sc.Labels[1].Label != "negative" || sc.Confusion == nil {
		t.Fatalf("status --json: sentiment's held-out score %+v", sc)
	}
	support, cells := 0, 0
	for i, l := range sc.Labels {
		support += l.Support
		if sc.Confusion.Counts[i][i] != l.TP || l.Support != l.TP+l.FN {
			t.Errorf("label %s: %+v, confusion row %v", l.Label, l, sc.Confusion.Counts[i])
		}
		for _, n := range sc.Confusion.Counts[i] {
			cells += n
		}
		cells += sc.Confusion.NoLabel[i]
	}
	if support != sc.N || cells != sc.N {
		t.Errorf("supports add up to %d and the confusion matrix to %d, want n %d", support, cells, sc.N)
	}
}

func TestQueueRunsOneAtATimeInOrder(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	tr := trainerProgram(t, dir, `echo "start $(basename "$PWD") $(date +%s%N)" >> `+dir+`/order
sleep 0.5
echo "end $(basename "$PWD") $(date +%s%N)" >> `+dir+`/order
`+resultLines)
	var ids []string
	for i := 0; i < 3; i++ {
		r := run(t, "run", cfg, "--trainer", tr, "--schemas", "sentiment", "--detach")
		if r.code != 0 {
			t.Fatalf("detach exit %d: %s", r.code, r.stderr)
		}
		ids = append(ids, strings.TrimSpace(r.stdout))
	}
	for _, id := range ids {
		testproject.WaitFor(t, "run "+id, func() bool { return testproject.Read(t, dir, id).Finished })
	}
	b, _ := os.ReadFile(filepath.Join(dir, "order"))
	lines := strings.Fields(string(b))
	var got []string
	for i := 0; i+2 < len(lines)+1 && i < len(lines); i += 3 {
		got = append(got, lines[i]+" "+lines[i+1])
	}
	want := []string{"start " + ids[0], "end " + ids[0], "start " + ids[1], "end " + ids[1], "start " + ids[2], "end " + ids[2]}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("runs overlapped or went out of order:\n got %q\nwant %q", got, want)
	}
	for _, id := range ids {
		if s := testproject.Read(t, dir, id).State; s != rundir.StateSuccess {
			t.Errorf("run %s: %s", id, s)
		}
	}
	if !strings.Contains(runLog(t, dir, ids[2]), "waiting in the queue behind run "+ids[0]) {
		t.Errorf("third run's log does not say it waited:\n%s", runLog(t, dir, ids[2]))
	}
}

func detachRun(t *testing.T, cfg, tr string) string {
	t.Helper()
	r := run(t, "run", cfg, "--trainer", tr, "--schemas", "sentiment", "--detach")
	if r.code != 0 {
		t.Fatalf("detach exit %d: %s", r.code, r.stderr)
	}
	return strings.TrimSpace(r.stdout)
}

// The fault: a trainer that ignores SIGTERM. Expected: it is killed after
// grace_seconds and the run ends cancelled (exit_code 3).
func TestCancelKillsATrainerThatIgnoresTERM(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	tr := trainerProgram(t, dir, `trap '' TERM
echo '{"v":1,"event":"status","state":"fitting","step":"ignoring TERM"}'
while :; do sleep 0.1; done`)
	id := detachRun(t, cfg, tr)
	testproject.WaitFor(t, "running", func() bool { return testproject.Read(t, dir, id).Step == "ignoring TERM" })
	if r := run(t, "cancel", cfg, id); r.code != 0 {
		t.Fatalf("cancel exit %d: %s", r.code, r.stderr)
	}
	testproject.WaitFor(t, "the end", func() bool { return testproject.Read(t, dir, id).Finished })
	info := testproject.Read(t, dir, id)
	log := runLog(t, dir, id)
	if info.State != rundir.StateCancelled || *info.ExitCode != 3 {
		t.Errorf("state %s exit %v", info.State, info.ExitCode)
	}
	if !strings.Contains(log, "cancel requested: SIGTERM, then SIGKILL after 1s") || !strings.Contains(log, "training process ended: killed by SIGKILL") {
		t.Errorf("run log:\n%s", log)
	}
	if r := run(t, "cancel", cfg, id); r.code != 1 || !strings.Contains(r.stderr, "finished already") {
		t.Errorf("cancelling a finished run: %d %q", r.code, r.stderr)
	}
}

func TestCancelWhileQueued(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	tr := trainerProgram(t, dir, "sleep 30")
	first := detachRun(t, cfg, tr)
	second := detachRun(t, cfg, tr)
	testproject.WaitFor(t, "queued behind", func() bool { return strings.Contains(testproject.Read(t, dir, second).Step, first) })
	run(t, "cancel", cfg, second)
	testproject.WaitFor(t, "second ends", func() bool { return testproject.Read(t, dir, second).Finished })
	if info := testproject.Read(t, dir, second); info.State != rundir.StateCancelled || info.StartedAt != nil {
		t.Errorf("queued run: state %s started %v", info.State, info.StartedAt)
	}
	run(t, "cancel", cfg, first)
	testproject.WaitFor(t, "first ends", func() bool { return testproject.Read(t, dir, first).Finished })
}

func TestWallLimit(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "  max_wall_seconds: 1\n")
	id := detachRun(t, cfg, trainerProgram(t, dir, "sleep 30"))
	testproject.WaitFor(t, "the end", func() bool { return testproject.Read(t, dir, id).Finished })
	info := testproject.Read(t, dir, id)
	if info.State != rundir.StateError || info.Error != "the run did not finish within max_wall_seconds (1 s)" {
		t.Errorf("state %s error %q", info.State, info.Error)
	}
}

func TestExitZeroWithoutResultFails(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	r := run(t, "run", cfg, "--trainer", trainerProgram(t, dir, "exit 0"), "--schemas", "sentiment")
	id := strings.TrimSpace(r.stdout)
	info := testproject.Read(t, dir, id)
	if r.code != 1 || info.State != rundir.StateError || info.Error != "the training process ended (exit status 0) without a result" {
		t.Errorf("exit %d state %s error %q", r.code, info.State, info.Error)
	}
}

// The fault: the trainer is killed by SIGKILL with no cancel asked, as
// the kernel's OOM killer does.
func TestKilledTrainerSaysOutOfMemory(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	r := run(t, "run", cfg, "--trainer", trainerProgram(t, dir, "kill -9 $$"), "--schemas", "sentiment")
	info := testproject.Read(t, dir, strings.TrimSpace(r.stdout))
	if r.code != 1 || !strings.Contains(info.Error, "killed (SIGKILL), which usually means the machine ran out of memory") {
		t.Errorf("exit %d error %q", r.code, info.Error)
	}
}

func TestMalformedEventLinesAreLog(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	tr := trainerProgram(t, dir, `echo '{"v":1,"event":"progress","phase":"fit","current":1,"total":2}'
echo 'this is not an event'
echo '{"v":1,"event":'
echo '{"v":2,"event":"progress"}'
echo '{"v":1,"event":"teleport"}'
`+resultLines)
	r := run(t, "run", cfg, "--trainer", tr, "--schemas", "sentiment")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	log := runLog(t, dir, id)
	for _, want := range []string{"trainer: this is not an event", `trainer: {"v":1,"event":`, `trainer: {"v":2,"event":"progress"}`, `trainer: {"v":1,"event":"teleport"}`} {
		if !strings.Contains(log, want) {
			t.Errorf("run log lacks %q:\n%s", want, log)
		}
	}
	ev, _ := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(id), "events.jsonl"))
	if n := strings.Count(string(ev), "\n"); n != 2 {
		t.Errorf("events.jsonl should hold the progress and result events, has %d lines:\n%s", n, ev)
	}
}

// The fault: kill -9 of a dispatch. Expected: status reports its run
// failed, and the queue is free for the next run.
func TestStatusAfterDispatchIsKilled(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	// The orphaned trainer waits in its own group for stop.
	stop := filepath.Join(dir, "stop")
	t.Cleanup(func() { os.WriteFile(stop, nil, 0o644) })
	id := killDispatch(t, dir, cfg, stop)
	r := run(t, "status", cfg, id, "--json")
	var rec rundir.Record
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if rec.State != rundir.StateError || rec.Error != "the dispatch process for this run is gone" {
		t.Errorf("status of a run whose dispatch died: %s %q", rec.State, rec.Error)
	}
	r = run(t, "status", cfg)
	if !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "error") {
		t.Errorf("status table:\n%s", r.stdout)
	}
	next := run(t, "run", cfg, "--trainer", trainerProgram(t, dir, resultLines), "--schemas", "sentiment")
	if next.code != 0 {
		t.Errorf("the next run did not get the queue: %d %s", next.code, next.stderr)
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, `  backends:
    gpu: {type: ssh, host: gpu.example.org}
    cluster: {type: slurm, host: login.example.org, remote_dir: /shared/potato}
    lab: {type: agent}
`)
	_ = dir
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--trainer", "decision-calibrate", "--schemas", "sentiment", "--backend", "gpu"}, "trainer decision-calibrate runs only on the annotation server (local), not on gpu (ssh to gpu.example.org): it reads the annotation server's own files"},
		{[]string{"--trainer", "decision-calibrate", "--schemas", "sentiment", "--backend", "cluster"}, "trainer decision-calibrate runs only on the annotation server (local), not on cluster (slurm"},
		{[]string{"--trainer", "decision-calibrate", "--schemas", "sentiment", "--backend", "lab"}, "trainer decision-calibrate runs only on the annotation server (local), not on lab (agent"},
		{[]string{"--trainer", "decision-calibrate", "--schemas", "sentiment", "--backend", "lab"}, "it reads the annotation server's own files (Potato's store, project.sqlite, and the annotations)"},
		{[]string{"--trainer", "tfidf-logreg", "--schemas", "sentiment", "--backend", "nowhere"}, `no backend "nowhere"`},
		{[]string{"--trainer", "tfidf-logreg", "--schemas", "topic"}, `schema "topic" is not in annotation_schemes`},
		{[]string{"--trainer", "nosuch", "--schemas", "sentiment"}, `unknown trainer "nosuch"`},
		{[]string{"--trainer", "tfidf-logreg", "--schemas", "sentiment", "--param", "epochs"}, `--param "epochs": use KEY=VALUE`},
	}
	for _, c := range cases {
		r := run(t, append([]string{"run", cfg}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, r.code, r.stdout, r.stderr, c.want)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "annotation_output", "training", "runs")); len(entries) != 0 {
		t.Errorf("a refused run left %d run directories", len(entries))
	}
}

func TestTooFewLabelsIsValidationFailed(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 6, "")
	r := run(t, "run", cfg, "--trainer", "tfidf-logreg", "--schemas", "sentiment")
	info := testproject.Read(t, dir, strings.TrimSpace(r.stdout))
	if r.code != 1 || info.ErrorCode != "validation_failed" || !strings.Contains(info.Error, "needs at least 10 items") {
		t.Errorf("exit %d code %q error %q", r.code, info.ErrorCode, info.Error)
	}
}

// max_ram_mb becomes RLIMIT_AS and num_threads the thread variables; the
// fake trainer prints what it was given.
func TestLimitsReachTheTrainer(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "  max_ram_mb: 300\n  num_threads: 3\n")
	tr := trainerProgram(t, dir, `echo "limit $(ulimit -v) threads $OMP_NUM_THREADS $MKL_NUM_THREADS $OPENBLAS_NUM_THREADS device $POTATO_TRAINING_DEVICE"
`+resultLines)
	r := run(t, "run", cfg, "--trainer", tr, "--schemas", "sentiment")
	log := runLog(t, dir, strings.TrimSpace(r.stdout))
	if r.code != 0 || !strings.Contains(log, "trainer: limit "+strconv.Itoa(300*1024)+" threads 3 3 3 device cpu") {
		t.Errorf("exit %d, log:\n%s", r.code, log)
	}
}

// oneFakeGPU is the line of one H200 as nvidia-smi lists it.
const oneFakeGPU = "0, GPU-0000, NVIDIA H200, 143771, 140000, 3, 9.0\n"

// runOnFakeGPUs runs trainer on schema sentiment of cfg, on a machine
// whose nvidia-smi (a fake: this machine has no GPU) lists gpus, and
// returns the run's id.
func runOnFakeGPUs(t *testing.T, cfg, trainer, gpus string) string {
	t.Helper()
	fake := fakebin.NvidiaSMI(t, t.TempDir(), gpus)
	cmd := dispatchCmd(t, "run", cfg, "--trainer", trainer, "--schemas", "sentiment")
	cmd.Env = append(cmd.Env, "PATH="+fake+":"+testcli.Binaries(t)+":"+os.Getenv("PATH"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// The machine has no GPU: a fake nvidia-smi lists one, and cuda:1 falls
// back to it with a warning (SPEC L1).
func TestAbsentDeviceFallsBack(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "  device: cuda:1\n")
	tr := trainerProgram(t, dir, `echo "visible $CUDA_VISIBLE_DEVICES device $POTATO_TRAINING_DEVICE"
`+resultLines)
	log := runLog(t, dir, runOnFakeGPUs(t, cfg, tr, oneFakeGPU))
	for _, want := range []string{"warning: device cuda:1 is not on this machine; using cuda:0 (NVIDIA H200)", "trainer: visible 0 device cuda:0"} {
		if !strings.Contains(log, want) {
			t.Errorf("run log lacks %q:\n%s", want, log)
		}
	}
}

// With two GPUs and device cuda:1, the training process sees only GPU 1,
// as cuda:0, and the spec it reads says so too (trainer.LaunchEnv), as on
// every other backend; run.json keeps the machine's numbering. The GPUs
// are a fake nvidia-smi's: this machine has none.
func TestLocalSpecNamesTheVisibleDevice(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "  device: cuda:1\n")
	tr := trainerProgram(t, dir, `echo "visible $CUDA_VISIBLE_DEVICES device $POTATO_TRAINING_DEVICE spec $(tr -d ' \n' < "$2" | grep -o '"device":"[^"]*"')"
`+resultLines)
	id := runOnFakeGPUs(t, cfg, tr, oneFakeGPU+"1, GPU-1111, NVIDIA H200, 143771, 140000, 0, 9.0\n")
	log := runLog(t, dir, id)
	if want := `trainer: visible 1 device cuda:0 spec "device":"cuda:0"`; !strings.Contains(log, want) {
		t.Errorf("run log lacks %q:\n%s", want, log)
	}
	if info := testproject.Read(t, dir, id); info.Device != "cuda:1" {
		t.Errorf("run.json device %q, want cuda:1", info.Device)
	}
}

// The built-in trainer uses no GPU: with one listed by nvidia-smi, its
// local run is recorded, and its spec written, as running on the CPU, and
// the run log says why.
func TestBuiltinTrainerRunsOnCPU(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	id := runOnFakeGPUs(t, cfg, "tfidf-logreg", oneFakeGPU)
	log := runLog(t, dir, id)
	if !regexp.MustCompile(`device: CPU \(\d+ cores?\) \(tfidf-logreg uses no GPU\)`).MatchString(log) || strings.Contains(log, "H200") {
		t.Errorf("run log:\n%s", log)
	}
	if info := testproject.Read(t, dir, id); info.Device != "cpu" {
		t.Errorf("device %q, want cpu", info.Device)
	}
	spec, _ := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(id), "spec.json"))
	if !strings.Contains(string(spec), `"device":"cpu"`) && !strings.Contains(string(spec), `"device": "cpu"`) {
		t.Errorf("spec.json: %s", spec)
	}
}

// A local run of a Python trainer runs the interpreter that
// model_training.python names, a path taken from the config's directory,
// and its run log names it; python3 on PATH is not used. The interpreter
// here is a stand-in that ends the run as the trainer would.
func TestLocalRunNamesItsInterpreter(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "  python: ./venv/bin/python3\n")
	py := filepath.Join(dir, "venv", "bin", "python3")
	if err := os.MkdirAll(filepath.Dir(py), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho \"ran $0 $1\" >&2\n" + resultLines + "\n"
	testcli.WriteExecutable(t, py, []byte(script))
	r := run(t, "run", cfg, "--trainer", "hf-text-classification", "--schemas", "sentiment")
	id := strings.TrimSpace(r.stdout)
	log := runLog(t, dir, id)
	if r.code != 0 || !strings.Contains(log, "python: "+py+" (model_training.python)") {
		t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, log)
	}
	stderr, _ := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(id), "stderr.log"))
	if !strings.Contains(string(stderr), "ran "+py+" ") {
		t.Errorf("the interpreter named did not run: stderr.log %q", stderr)
	}

	// One that is not there fails the run, naming it and the key.
	dir, cfg = testproject.Project(t, 40, 30, "  python: /no/such/python3\n")
	r = run(t, "run", cfg, "--trainer", "hf-text-classification", "--schemas", "sentiment")
	info := testproject.Read(t, dir, strings.TrimSpace(r.stdout))
	want := "the interpreter of trainer hf-text-classification: /no/such/python3 was not found on this machine (from model_training.python)"
	if r.code != 1 || info.Error != want {
		t.Errorf("exit %d, error %q, want %q", r.code, info.Error, want)
	}
}

// Ctrl-C (SIGINT) to a dispatch waiting in the foreground cancels its run
// gracefully: the run ends cancelled and the dispatch exits 3.
func TestInterruptCancelsTheRun(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	tr := trainerProgram(t, dir, `echo '{"v":1,"event":"status","state":"fitting","step":"sleeping"}'
sleep 30`)
	cmd := dispatchCmd(t, "run", cfg, "--trainer", tr, "--schemas", "sentiment")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	id := strings.TrimSpace(line)
	testproject.WaitFor(t, "running", func() bool { return testproject.Read(t, dir, id).Step == "sleeping" })
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("dispatch after SIGINT: %v", err)
	}
	if info := testproject.Read(t, dir, id); info.State != rundir.StateCancelled {
		t.Errorf("state %s", info.State)
	}
}

// The fault: the trainer leaves a daemon (another session) holding its
// standard output. Expected: the wall limit still ends the run, the
// daemon's open pipe does not hold it.
func TestDaemonHoldingStdoutDoesNotHoldTheRun(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "  max_wall_seconds: 1\n")
	id := detachRun(t, cfg, trainerProgram(t, dir, `setsid sleep 300 &
echo $! > `+dir+`/daemon
sleep 30`))
	testproject.WaitFor(t, "the end", func() bool { return testproject.Read(t, dir, id).Finished })
	if info := testproject.Read(t, dir, id); info.Error != "the run did not finish within max_wall_seconds (1 s)" {
		t.Errorf("error %q", info.Error)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "daemon")); err == nil {
		if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// The fault: a member of the trainer's group ignores SIGTERM while the
// trainer itself exits on it. Expected: once the run is over, the group's
// survivors are killed.
func TestCancelKillsTheWholeGroup(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	tr := trainerProgram(t, dir, `sh -c 'trap "" TERM; echo $$ > `+dir+`/worker; while :; do sleep 0.2; done' &
echo '{"v":1,"event":"status","state":"fitting","step":"with a worker"}'
wait`)
	id := detachRun(t, cfg, tr)
	testproject.WaitFor(t, "running", func() bool { return testproject.Read(t, dir, id).Step == "with a worker" })
	run(t, "cancel", cfg, id)
	testproject.WaitFor(t, "the end", func() bool { return testproject.Read(t, dir, id).Finished })
	b, _ := os.ReadFile(filepath.Join(dir, "worker"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid == 0 {
		t.Fatal("the worker did not start")
	}
	testproject.WaitFor(t, "the worker to be killed", func() bool { return syscall.Kill(pid, 0) != nil })
}

// Potato 2.11 and later show stored prelabels without
// pre_annotation.enabled, whenever model_training.writeback.schemas is set
// (TestReleasedPotato runs the released Potato on a project without the
// block): a run of a project without it says, in its summary and its run
// log, that Potato shows them after its next start, and nothing says they
// are hidden.
func TestPrelabelsShownWithoutPreAnnotation(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 120, 100, "")
	text, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	without := strings.Replace(string(text), "pre_annotation: {enabled: true}\n", "", 1)
	if without == string(text) {
		t.Fatal("the test project has no pre_annotation line to take out")
	}
	if err := os.WriteFile(cfg, []byte(without), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, "run", cfg, "--trainer", "tfidf-logreg", "--schemas", "sentiment")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	const want = "Potato shows them after its next start"
	log := runLog(t, dir, strings.TrimSpace(r.stdout))
	for what, text := range map[string]string{"summary on stderr": r.stderr, "run log": log} {
		if strings.Count(text, want) != 1 || strings.Contains(text, "does not show") || strings.Contains(text, "pre_annotation") || strings.Contains(text, "note: ") {
			t.Errorf("%s: want %q once and nothing of pre_annotation:\n%s", what, want, text)
		}
	}
}
