package main

// These tests run whole runs through the system's ssh against the real
// sshd of scripts/test-sshd: the agent on the "login node" (user
// potatotest on loopback) submits with sbatch. Most use
// potato-slurm-shim, the stand-in for sbatch, squeue, scancel and
// scontrol, put first on the login node's PATH through the backend's env;
// its admin verb causes the faults (node failure, preemption, out of
// memory) that are hard to cause on a real scheduler. The tests named
// TestReal* submit to the real single-node SLURM of scripts/test-slurm.

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

type cluster struct {
	t        *testing.T
	bin      string // the login node's PATH first: the shim's links, or nothing
	stateDir string // the shim's state directory; "" on the real scheduler
	conf     string // SLURM_CONF of the real scheduler
	// onlyBin makes bin the login node's whole PATH.
	onlyBin bool
}

// shim sets up potato-slurm-shim as the login node's scheduler, with
// slots job slots and two GPUs.
// countCalls makes the cluster's command name count its calls, and
// returns what counts them so far: a test waits for the calls it needs
// instead of for a time they should take.
func (c *cluster) countCalls(name string) func() int {
	c.t.Helper()
	count := filepath.Join(c.bin, name+".calls")
	if err := os.WriteFile(count, nil, 0o666); err != nil {
		c.t.Fatal(err)
	}
	os.Chmod(count, 0o666)
	cmd := filepath.Join(c.bin, name)
	if err := os.Remove(cmd); err != nil {
		c.t.Fatal(err)
	}
	script := "#!/bin/sh\necho >>" + count + "\nexec " + filepath.Join(c.bin, "potato-slurm-shim") + " " + name + " \"$@\"\n"
	testcli.WriteExecutable(c.t, cmd, []byte(script))
	return func() int {
		b, _ := os.ReadFile(count)
		return len(b)
	}
}

func shim(t *testing.T, slots int) *cluster {
	t.Helper()
	testcli.SSHD(t)
	c := &cluster{t: t, bin: testcli.UserDir(t, "/tmp"), stateDir: testcli.UserDir(t, "/tmp")}
	dst := testcli.CopyBinary(t, "potato-slurm-shim", c.bin)
	for _, n := range []string{"sbatch", "squeue", "scancel", "scontrol"} {
		if err := os.Symlink(dst, filepath.Join(c.bin, n)); err != nil {
			t.Fatal(err)
		}
	}
	c.admin("init", "--slots", strconv.Itoa(slots), "--gpus", "0,1", "--kill-wait", "1", "--node", "node07")
	t.Cleanup(func() {
		// Nothing of a test's jobs outlives it.
		out, _ := c.cmd("squeue", "-h", "-o", "%i").Output()
		for _, id := range strings.Fields(string(out)) {
			c.cmd("scancel", id).Run()
		}
	})
	return c
}

// cmd runs a scheduler command as the remote user, as the agent does.
func (c *cluster) cmd(name string, args ...string) *exec.Cmd {
	path := name
	if c.bin != "" {
		path = filepath.Join(c.bin, name)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "POTATO_SLURM_SHIM_DIR="+c.stateDir)
	if c.conf != "" {
		cmd.Env = append(cmd.Env, "SLURM_CONF="+c.conf)
	}
	return testcli.AsRemoteUser(c.t, cmd)
}

func (c *cluster) admin(args ...string) string {
	c.t.Helper()
	out, err := c.cmd("potato-slurm-shim", args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("potato-slurm-shim %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// blocker fills a job slot until its returned function ends it.
func (c *cluster) blocker(args ...string) (string, func()) {
	c.t.Helper()
	a := append([]string{"--parsable", "--job-name=blocker", "--output=/dev/null"}, args...)
	out, err := c.cmd("sbatch", append(a, "--wrap", "sleep 300")...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("sbatch blocker: %v\n%s", err, out)
	}
	id := strings.TrimSpace(string(out))
	return id, func() { c.cmd("scancel", id).Run() }
}

// state is scontrol's JobState of a job.
func (c *cluster) state(id string) string {
	out, _ := c.cmd("scontrol", "show", "job", id).Output()
	m := regexp.MustCompile(`JobState=(\S+)`).FindSubmatch(out)
	if m == nil {
		return ""
	}
	return string(m[1])
}

type slurmEnv struct {
	*testproject.Runs
	t         *testing.T
	c         *cluster
	remoteDir string
}

// slurmSetup writes a project whose default backend "cluster" is a SLURM
// login node reached over the test sshd; backend holds more keys.
func slurmSetup(t *testing.T, c *cluster, backend string) *slurmEnv {
	e := &slurmEnv{t: t, c: c, remoteDir: testcli.UserDir(t, "/home/potatotest"),
		Runs: &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: t.TempDir()}}
	path := "/usr/local/bin:/usr/bin:/bin"
	if c.bin != "" {
		path = c.bin + ":" + path
	}
	if c.onlyBin {
		path = c.bin
	}
	envs := fmt.Sprintf(`PATH: "%s", POTATO_TRAINING_EXIT_CODE_WAIT_S: "3"`, path)
	if c.stateDir != "" {
		envs += fmt.Sprintf(`, POTATO_SLURM_SHIM_DIR: "%s"`, c.stateDir)
	}
	if c.conf != "" {
		envs += fmt.Sprintf(`, SLURM_CONF: "%s"`, c.conf)
	}
	e.Config = testproject.Write(t, e.Dir, 120, 100, testcli.SLURMBackend(t, e.remoteDir, 30, envs, backend))
	return e
}

func (e *slurmEnv) wait(id string) rundir.Info {
	e.t.Helper()
	return e.Wait(id, 90*time.Second)
}

// jobID is the SLURM job of a run, from its run log.
func (e *slurmEnv) jobID(id string) string {
	m := regexp.MustCompile(`Submitted SLURM job (\d+)`).FindStringSubmatch(e.File(id, "run.log"))
	if m == nil {
		return ""
	}
	return m[1]
}

func (e *slurmEnv) waitJob(id string) string {
	e.t.Helper()
	testproject.WaitFor(e.t, "the submission", func() bool { return e.jobID(id) != "" || e.Info(id).Finished })
	j := e.jobID(id)
	if j == "" {
		e.t.Fatalf("the run ended without a job\n%s\n%s", e.File(id, "run.log"), e.File(id, "agent.log"))
	}
	return j
}

// scancelFromOutside cancels a run's job as someone on the cluster would,
// and checks that the run ends saying so.
func (e *slurmEnv) scancelFromOutside(id, job string) {
	e.t.Helper()
	if out, err := e.c.cmd("scancel", job).CombinedOutput(); err != nil {
		e.t.Fatalf("scancel: %v %s", err, out)
	}
	info := e.wait(id)
	want := "SLURM job " + job + " ended before the worker finished: it was cancelled from outside (scancel)"
	if info.State != rundir.StateError || info.Error != want {
		e.t.Errorf("state %s error %q, want %q\n%s", info.State, info.Error, want, e.dump(id))
	}
}

func (e *slurmEnv) logHas(id, text string) bool { return strings.Contains(e.File(id, "run.log"), text) }

func (e *slurmEnv) dump(id string) string {
	return "run.log:\n" + e.File(id, "run.log") + "\nagent.log:\n" + e.File(id, "agent.log")
}

// sleeper is a training process that says it started, then works until
// stopped; with trapTERM it exits 4 on SIGTERM (as the built-in trainer
// does), else it ignores SIGTERM.
func sleeper(t *testing.T, trapTERM bool) string {
	trap := `trap '' TERM`
	if trapTERM {
		trap = `trap 'echo "{\"v\":1,\"event\":\"log\",\"level\":\"info\",\"msg\":\"got TERM\"}"; exit 4' TERM`
	}
	return testproject.Trainer(t, testcli.UserDir(t, "/tmp"), trap+`
echo '{"v":1,"event":"status","state":"fitting","step":"working"}'
i=0
while [ $i -lt 600 ]; do sleep 0.2; i=$((i+1)); done
`+testproject.ResultLines)
}

// gatedBuiltin is the built-in trainer once the test opens its gate, so
// that a squeue poll sees its job running whatever the machine's speed:
// the agent's worker on the host, run on the same spec with the trainer's
// name put back. open lets it go on.
func gatedBuiltin(t *testing.T, e *slurmEnv) (tr string, open func()) {
	dir := testcli.SharedDir(t, 0o755)
	gate := filepath.Join(dir, "gate")
	tr = testproject.Trainer(t, testcli.UserDir(t, "/tmp"), `echo '{"v":1,"event":"status","state":"fitting","step":"waiting for its gate"}'
while [ ! -e `+gate+` ]; do sleep 0.1; done
sed 's|"trainer": *"[^"]*"|"trainer": "tfidf-logreg"|' "$2" >spec-builtin.json
exec "$(ls `+e.remoteDir+`/code/*/potato-agent | head -n 1)" worker --spec spec-builtin.json`)
	return tr, func() {
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func testEndToEndPendingThenRunning(t *testing.T) {
	c := shim(t, 1)
	e := slurmSetup(t, c, "      gres: gpu:1\n      time: \"10:00\"\n      partition: debug\n      job_python: /usr/bin/python3\n")
	_, unblock := c.blocker()
	defer unblock()
	tr, open := gatedBuiltin(t, e)
	id := e.Detach("--trainer", tr, "--schemas", "sentiment")
	testproject.WaitFor(t, "PENDING (Priority)", func() bool { return e.logHas(id, "SLURM job ") && e.logHas(id, ": PENDING (Priority)") })
	// The log line and the status event that sets the step line are two
	// events: the step line may follow the log a moment later.
	pending := regexp.MustCompile(`^SLURM job \d+: PENDING \(Priority\)$`)
	testproject.WaitFor(t, "the step line PENDING (Priority)", func() bool { return pending.MatchString(e.Info(id).Step) })
	unblock()
	testproject.WaitFor(t, "RUNNING", func() bool { return e.logHas(id, ": RUNNING on node07") })
	open()
	info := e.wait(id)
	log := e.File(id, "run.log")
	if info.State != rundir.StateSuccess || info.Heldout == nil || info.RanOn != "cluster (slurm via potato-test)" {
		t.Fatalf("state %s heldout %v ran_on %q error %q\n%s", info.State, info.Heldout, info.RanOn, info.Error, e.dump(id))
	}
	job := e.jobID(id)
	for _, want := range []string{
		"Submitted SLURM job " + job + " (--partition=debug --gres=gpu:1 --time=10:00)",
		"SLURM job " + job + ": PENDING (Priority)",
		"SLURM job " + job + ": RUNNING on node07",
		"GPUs: gres gpu:1, CUDA_VISIBLE_DEVICES set by the scheduler",
		"the job runs /usr/bin/python3 on the compute node (job_python)",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("run log lacks %q\n%s", want, log)
		}
	}
	// Progress came through events.jsonl on the shared file system.
	if ev := e.File(id, "events.jsonl"); !strings.Contains(ev, `"event":"progress"`) || !strings.Contains(ev, `"event":"result"`) {
		t.Errorf("events.jsonl lacks the trainer's progress and result:\n%.2000s", ev)
	}
	if st := c.state(job); st != "COMPLETED" {
		t.Errorf("job state %q, want COMPLETED", st)
	}
	// The job directory goes after the copy back, as the connection closes.
	testproject.WaitFor(t, "the remote job directory to go", func() bool {
		_, err := os.Stat(filepath.Join(e.remoteDir, "jobs", id))
		return os.IsNotExist(err)
	})
	if info.Writeback["n_written"] == 0 {
		t.Errorf("no prelabels written: %+v", info.Writeback)
	}
}

// The queue's RUNNING, seen after the training process has reported its
// own step, goes to the run log and leaves the step line to the process
// (seen as a flake of TestRealCancel, where the real scheduler starts a
// job between two polls of squeue).
func testStepLineStaysTheTrainers(t *testing.T) {
	c := shim(t, 1)
	squeues := c.countCalls("squeue")
	e := slurmSetup(t, c, "")
	_, unblock := c.blocker()
	defer unblock()
	id := e.Detach("--trainer", sleeper(t, true), "--schemas", "sentiment")
	testproject.WaitFor(t, "PENDING", func() bool { return e.logHas(id, ": PENDING (Priority)") })
	unblock()
	testproject.WaitFor(t, "the queue to say RUNNING", func() bool { return e.logHas(id, ": RUNNING on node07") })
	testproject.WaitFor(t, "the trainer's step line", func() bool { return e.Info(id).Step == "working" })
	// Two more polls of the queue change nothing.
	seen := squeues()
	testproject.WaitFor(t, "two more polls of the queue", func() bool { return squeues() >= seen+2 })
	if step := e.Info(id).Step; step != "working" {
		t.Errorf("step line %q, want the trainer's %q\n%s", step, "working", e.dump(id))
	}
}

func testCancelWhilePending(t *testing.T) {
	c := shim(t, 1)
	e := slurmSetup(t, c, "")
	_, unblock := c.blocker()
	defer unblock()
	id := e.Detach("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	job := e.waitJob(id)
	testproject.WaitFor(t, "PENDING", func() bool { return e.logHas(id, ": PENDING (Priority)") })
	if r := e.Command("potato-dispatch", "cancel", e.Config, id); r.Run() != nil {
		t.Fatal("potato-dispatch cancel failed")
	}
	info := e.wait(id)
	if info.State != rundir.StateCancelled {
		t.Errorf("state %s error %q\n%s", info.State, info.Error, e.dump(id))
	}
	testproject.WaitFor(t, "the job cancelled", func() bool { return c.state(job) == "CANCELLED" })
	if !e.logHas(id, "cancelling SLURM job "+job+": scancel") {
		t.Errorf("the run log does not say how the job was cancelled\n%s", e.dump(id))
	}
}

// A running job gets scancel --full --signal=TERM; a training process
// that ignores it is ended by the plain scancel after grace_seconds.
func testCancelWhileRunningIgnoringTERM(t *testing.T) {
	c, e, id, job := cancelWhileRunning(t, false)
	testproject.WaitFor(t, "the job to leave the queue", func() bool {
		s := c.state(job)
		return s != "RUNNING" && s != "PENDING" && s != "COMPLETING"
	})
	if !e.logHas(id, "scancel --full --signal=TERM") {
		t.Errorf("no TERM through scancel --full\n%s", e.dump(id))
	}
}

// scancel --full --signal=TERM to a training process that exits on TERM:
// SLURM calls the job COMPLETED; the run is still cancelled, not a
// success, because the agent remembers it asked.
func testCancelWhileRunningTrappingTERM(t *testing.T) {
	c, _, _, job := cancelWhileRunning(t, true)
	testproject.WaitFor(t, "the job to leave the queue", func() bool { s := c.state(job); return s != "RUNNING" && s != "" })
}

// cancelWhileRunning cancels a run whose training process, a sleeper
// that traps TERM or not, is working, and checks that the run ends
// cancelled.
func cancelWhileRunning(t *testing.T, trap bool) (c *cluster, e *slurmEnv, id, job string) {
	c = shim(t, 2)
	e = slurmSetup(t, c, "")
	id = e.Detach("--trainer", sleeper(t, trap), "--schemas", "sentiment")
	job = e.waitJob(id)
	testproject.WaitFor(t, "the trainer", func() bool { return e.Info(id).Step == "working" })
	if err := e.Command("potato-dispatch", "cancel", e.Config, id).Run(); err != nil {
		t.Fatal(err)
	}
	info := e.wait(id)
	if info.State != rundir.StateCancelled {
		t.Errorf("state %s error %q\n%s", info.State, info.Error, e.dump(id))
	}
	return c, e, id, job
}

// The scheduler ends the job: each fault's run error is F9's sentence.
func testSchedulerEndsTheJob(t *testing.T) {
	cases := []struct {
		name, backend string
		fault         []string // the shim's admin verb, after the job id
		want          string
	}{
		{"time limit", "      time: \"0:04\"\n", nil, "it reached its time limit"},
		{"node failure", "", []string{"node_fail"}, "its node failed"},
		{"preemption", "", []string{"preempted"}, "it was preempted"},
		{"out of memory", "", []string{"out_of_memory"}, "it ran out of memory"},
		{"external scancel", "", []string{"scancel"}, "it was cancelled from outside (scancel)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := shim(t, 2)
			e := slurmSetup(t, c, tc.backend)
			id := e.Detach("--trainer", sleeper(t, true), "--schemas", "sentiment")
			job := e.waitJob(id)
			testproject.WaitFor(t, "the trainer", func() bool { return e.Info(id).Step == "working" || e.Info(id).Finished })
			switch {
			case tc.fault == nil:
			case tc.fault[0] == "scancel":
				if out, err := c.cmd("scancel", job).CombinedOutput(); err != nil {
					t.Fatalf("scancel: %v %s", err, out)
				}
			default:
				c.admin(append([]string{"fail", job}, tc.fault...)...)
			}
			info := e.wait(id)
			want := "SLURM job " + job + " ended before the worker finished: " + tc.want
			if info.State != rundir.StateError || !strings.HasPrefix(info.Error, want) {
				t.Errorf("state %s error %q, want %q\n%s", info.State, info.Error, want, e.dump(id))
			}
		})
	}
}

// requeuableTrainer tells a job's attempts apart: the first says step
// "working" and runs until it is stopped, a requeued one finishes.
func requeuableTrainer(t *testing.T) string {
	marker := testcli.UserDir(t, "/tmp")
	os.Chmod(marker, 0o777)
	return testproject.Trainer(t, testcli.UserDir(t, "/tmp"), `if [ ! -e `+marker+`/first ]; then
	: > `+marker+`/first
	echo '{"v":1,"event":"status","state":"fitting","step":"working"}'
	sleep 300
fi
`+testproject.ResultLines)
}

// A job requeued after a node failure goes back to PENDING; the run log
// says so and the run keeps waiting, then succeeds on the second attempt.
func testRequeuedJobRunsAgain(t *testing.T) {
	c := shim(t, 2)
	e := slurmSetup(t, c, "")
	tr := requeuableTrainer(t)
	id := e.Detach("--trainer", tr, "--schemas", "sentiment")
	job := e.waitJob(id)
	testproject.WaitFor(t, "the first attempt", func() bool { return e.Info(id).Step == "working" })
	c.admin("fail", job, "node_fail", "--requeue")
	info := e.wait(id)
	if info.State != rundir.StateSuccess {
		t.Fatalf("state %s error %q\n%s", info.State, info.Error, e.dump(id))
	}
	log := e.File(id, "run.log")
	if !regexp.MustCompile(`SLURM job ` + job + `: PENDING( \(\w+\))?: requeued by the scheduler after a node failure, Restarts=1`).MatchString(log) {
		t.Errorf("the run log does not say the job was requeued\n%s", e.dump(id))
	}
}

// A job requeued after a preemption, then cancelled from outside, ended
// by the scancel: the first attempt's "DUE TO PREEMPTION" still in
// slurm.out is not its end. Whether it waits to run again (slurm.out as
// the first attempt left it) or runs again (the shim appends to
// slurm.out, as slurmstepd does with --open-mode=append).
func testScancelAfterRequeue(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay string // the shim's requeue delay
		step  string // the step the scancel waits for
	}{
		{"while it waits", "300", ""},
		{"while it runs again", "3", "second"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := shim(t, 2)
			c.admin("init", "--slots", "2", "--gpus", "0,1", "--kill-wait", "1", "--node", "node07", "--requeue-delay", tc.delay)
			e := slurmSetup(t, c, "")
			marker := testcli.UserDir(t, "/tmp")
			os.Chmod(marker, 0o777)
			tr := testproject.Trainer(t, testcli.UserDir(t, "/tmp"), `step=second
[ -e `+marker+`/first ] || step=first
: > `+marker+`/first
echo '{"v":1,"event":"status","state":"fitting","step":"'$step'"}'
sleep 300`)
			id := e.Detach("--trainer", tr, "--schemas", "sentiment")
			job := e.waitJob(id)
			testproject.WaitFor(t, "the first attempt", func() bool { return e.Info(id).Step == "first" })
			c.admin("fail", job, "preempted", "--requeue")
			testproject.WaitFor(t, "the requeue", func() bool { return e.logHas(id, "requeued by the scheduler after a preemption") })
			if tc.step != "" {
				testproject.WaitFor(t, "the second attempt", func() bool { return e.Info(id).Step == tc.step })
			}
			e.scancelFromOutside(id, job)
		})
	}
}

// The job leaves the queue but its exit_code never appears (the batch
// shell was killed): the run fails saying so; success is never guessed.
func testJobVanishesBeforeExitCode(t *testing.T) {
	c := shim(t, 2)
	e := slurmSetup(t, c, "")
	tr := testproject.Trainer(t, testcli.UserDir(t, "/tmp"), testproject.ResultLines+`
kill -KILL $PPID`)
	id := e.Detach("--trainer", tr, "--schemas", "sentiment")
	info := e.wait(id)
	if info.State != rundir.StateError || !strings.Contains(info.Error, "but wrote no exit_code") {
		t.Errorf("state %s error %q\n%s", info.State, info.Error, e.dump(id))
	}
}

// The ssh session to the login node is killed: the agent cancels its job
// so the GPU is released.
func testSSHSessionKilledCancelsTheJob(t *testing.T) {
	c := shim(t, 2)
	e := slurmSetup(t, c, "")
	id := e.Detach("--trainer", sleeper(t, true), "--schemas", "sentiment")
	job := e.waitJob(id)
	testproject.WaitFor(t, "the trainer", func() bool { return e.Info(id).Step == "working" })
	out, _ := exec.Command("pgrep", "-u", "root", "-f", "ssh .*--socket /tmp/potato-"+id).Output()
	if len(strings.Fields(string(out))) == 0 {
		t.Fatal("no ssh session process found")
	}
	for _, p := range strings.Fields(string(out)) {
		pid, _ := strconv.Atoi(p)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	info := e.wait(id)
	if info.State != rundir.StateError {
		t.Errorf("state %s error %q", info.State, info.Error)
	}
	// Cancelled by the agent: the training process exits 4 on TERM.
	testproject.WaitFor(t, "the job to be cancelled", func() bool {
		s := c.state(job)
		return s != "" && s != "RUNNING" && s != "PENDING" && s != "COMPLETING"
	})
	if s := c.state(job); s != "FAILED" && s != "CANCELLED" {
		t.Errorf("job state %s, want it ended by the cancel", s)
	}
	if b, _ := os.ReadFile(filepath.Join(e.remoteDir, "jobs", id, "events.jsonl")); len(b) > 0 && !strings.Contains(string(b), "got TERM") {
		t.Errorf("the training process did not get TERM:\n%s", b)
	}
}

// F8: a login node without sbatch on PATH; the run and the check both say
// so, with the fix.
func testNoSbatchOnPath(t *testing.T) {
	// A PATH with every program of /usr/bin but SLURM's (/bin is /usr/bin
	// on Debian, and this machine may have the real scheduler).
	c := &cluster{t: t, bin: testcli.UserDir(t, "/tmp")}
	ents, err := os.ReadDir("/usr/bin")
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range ents {
		switch de.Name() {
		case "sbatch", "squeue", "scancel", "scontrol":
			continue
		}
		os.Symlink(filepath.Join("/usr/bin", de.Name()), filepath.Join(c.bin, de.Name()))
	}
	c.onlyBin = true
	e := slurmSetup(t, c, "")
	r := e.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	want := "potato-test has no sbatch on PATH, so it cannot submit jobs"
	if r.Code != 1 || !strings.Contains(e.Info(r.ID).Error, want) {
		t.Errorf("exit %d error %q\n%s", r.Code, e.Info(r.ID).Error, r.Stderr)
	}
	var out bytes.Buffer
	cmd := e.Command("potato-check", "cluster", e.Config)
	cmd.Stdout, cmd.Stderr = &out, io.Discard
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("potato-check: %v, want exit 1", err)
	}
	for _, w := range []string{want, "hint: set PATH under the backend's env"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("check report lacks %q:\n%s", w, out.String())
		}
	}
}

func testCheckCluster(t *testing.T) {
	c := shim(t, 1)
	e := slurmSetup(t, c, "      job_python: /opt/conda/bin/python3\n      gres: gpu:1\n")
	var out bytes.Buffer
	cmd := e.Command("potato-check", "cluster", e.Config)
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("potato-check: %v\n%s", err, out.String())
	}
	for _, w := range []string{"cluster (slurm via potato-test)", ": a run can start", "sbatch: " + c.bin + "/sbatch",
		"scontrol: " + c.bin + "/scontrol", "shell: /bin/bash", "job_python: /opt/conda/bin/python3", "a SLURM job with gres gpu:1"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("check report lacks %q:\n%s", w, out.String())
		}
	}
}

// realSLURM is the single-node SLURM of scripts/test-slurm.
func realSLURM(t *testing.T) *cluster {
	t.Helper()
	dir := testcli.SLURM(t)
	// The cluster may be shared: a test cancels only the jobs it made
	// (blockers by their own function, runs by the cleanup of detach).
	return &cluster{t: t, conf: filepath.Join(dir, "slurm.conf")}
}

// asRoot runs a scheduler command as root (scontrol update).
func (c *cluster) asRoot(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.conf)
	return cmd.CombinedOutput()
}

func (c *cluster) node() string {
	out, err := c.asRoot("sinfo", "-h", "-N", "-o", "%N")
	if err != nil {
		c.t.Fatalf("sinfo: %v %s", err, out)
	}
	return strings.Fields(string(out))[0]
}

// The whole sequence on the real scheduler: submission with its options,
// PENDING while both GPUs are taken, RUNNING, events relayed, success.
func testRealSubmitQueueRelay(t *testing.T) {
	c := realSLURM(t)
	e := slurmSetup(t, c, "      gres: gpu:1\n      time: \"10:00\"\n")
	_, unblock := c.blocker("--gres=gpu:2")
	defer unblock()
	tr, open := gatedBuiltin(t, e)
	id := e.Detach("--trainer", tr, "--schemas", "sentiment")
	job := e.waitJob(id)
	pendingWhy := regexp.MustCompile(`SLURM job ` + job + `: PENDING \((Resources|Priority)\)`)
	testproject.WaitFor(t, "PENDING with its reason", func() bool { return pendingWhy.MatchString(e.File(id, "run.log")) })
	unblock()
	testproject.WaitFor(t, "RUNNING", func() bool { return e.logHas(id, "SLURM job "+job+": RUNNING on ") })
	open()
	info := e.wait(id)
	if info.State != rundir.StateSuccess || info.Heldout == nil {
		t.Fatalf("state %s error %q\n%s", info.State, info.Error, e.dump(id))
	}
	log := e.File(id, "run.log")
	node := c.node()
	for _, want := range []string{"Submitted SLURM job " + job + " (--gres=gpu:1 --time=10:00)",
		"SLURM job " + job + ": RUNNING on " + node, "SLURM job " + job + ": COMPLETED (ExitCode=0:0"} {
		if !strings.Contains(log, want) {
			t.Errorf("run log lacks %q\n%s", want, log)
		}
	}
	if ev := e.File(id, "events.jsonl"); !strings.Contains(ev, `"event":"progress"`) {
		t.Errorf("no progress relayed:\n%.2000s", ev)
	}
	t.Logf("run log of a real SLURM run:\n%s", log)
}

func testRealCancel(t *testing.T) {
	c := realSLURM(t)
	e := slurmSetup(t, c, "")
	id := e.Detach("--trainer", sleeper(t, true), "--schemas", "sentiment")
	job := e.waitJob(id)
	testproject.WaitFor(t, "the trainer", func() bool { return e.Info(id).Step == "working" })
	if err := e.Command("potato-dispatch", "cancel", e.Config, id).Run(); err != nil {
		t.Fatal(err)
	}
	info := e.wait(id)
	if info.State != rundir.StateCancelled {
		t.Errorf("state %s error %q\n%s", info.State, info.Error, e.dump(id))
	}
	testproject.WaitFor(t, "the job to end", func() bool {
		out, _ := c.cmd("squeue", "-h", "-j", job, "-o", "%T").Output()
		return strings.TrimSpace(string(out)) == ""
	})
}

// A one-minute time limit, which the real scheduler enforces within
// about 74 to 86 s.
func testRealTimeLimit(t *testing.T) {
	c := realSLURM(t)
	e := slurmSetup(t, c, "      time: \"1\"\n")
	id := e.Detach("--trainer", sleeper(t, true), "--schemas", "sentiment")
	job := e.waitJob(id)
	info := e.Wait(id, 240*time.Second)
	want := "SLURM job " + job + " ended before the worker finished: it reached its time limit"
	if info.State != rundir.StateError || info.Error != want {
		t.Errorf("state %s error %q, want %q\n%s", info.State, info.Error, want, e.dump(id))
	}
	t.Logf("run log of the time-limit run:\n%s", e.File(id, "run.log"))
}

func testRealExternalScancel(t *testing.T) {
	c := realSLURM(t)
	e := slurmSetup(t, c, "")
	id := e.Detach("--trainer", sleeper(t, true), "--schemas", "sentiment")
	job := e.waitJob(id)
	testproject.WaitFor(t, "the trainer", func() bool { return e.Info(id).Step == "working" })
	e.scancelFromOutside(id, job)
}

// The node is set down while the job runs: the real scheduler requeues
// the job (Restarts=1); the run log says so, the run keeps waiting, and
// once the node is back the second attempt finishes.
func testRealNodeDownRequeues(t *testing.T) {
	c := realSLURM(t)
	e := slurmSetup(t, c, "")
	node := c.node()
	t.Cleanup(func() { c.asRoot("scontrol", "update", "nodename="+node, "state=resume") })
	tr := requeuableTrainer(t)
	id := e.Detach("--trainer", tr, "--schemas", "sentiment")
	job := e.waitJob(id)
	testproject.WaitFor(t, "the first attempt", func() bool { return e.Info(id).Step == "working" })
	if out, err := c.asRoot("scontrol", "update", "nodename="+node, "state=down", "reason=potato-test"); err != nil {
		t.Fatalf("scontrol update: %v %s", err, out)
	}
	testproject.WaitFor(t, "the requeue in the run log", func() bool {
		return e.logHas(id, "requeued by the scheduler") || e.Info(id).Finished
	})
	if out, err := c.asRoot("scontrol", "update", "nodename="+node, "state=resume"); err != nil {
		t.Fatalf("scontrol update: %v %s", err, out)
	}
	info := e.Wait(id, 300*time.Second)
	log := e.File(id, "run.log")
	if info.State != rundir.StateSuccess {
		t.Errorf("state %s error %q\n%s", info.State, info.Error, e.dump(id))
	}
	if !regexp.MustCompile(`SLURM job ` + job + `: PENDING( \(\w+\))?: requeued by the scheduler after a node failure, Restarts=1`).MatchString(log) {
		t.Errorf("the run log does not say the job was requeued after the node failure\n%s", log)
	}
}

// TestSLURM runs the SLURM backend's tests one after the other (they share
// one scheduler, whose node some of them set down), beside the other
// backends' groups: the package's end-to-end tests would otherwise take
// their sum.
func TestSLURM(t *testing.T) {
	testcli.Group(t, []testcli.Case{
		{Name: "TestEndToEndPendingThenRunning", Run: testEndToEndPendingThenRunning},
		{Name: "TestStepLineStaysTheTrainers", Run: testStepLineStaysTheTrainers},
		{Name: "TestCancelWhilePending", Run: testCancelWhilePending},
		{Name: "TestCancelWhileRunningIgnoringTERM", Run: testCancelWhileRunningIgnoringTERM},
		{Name: "TestCancelWhileRunningTrappingTERM", Run: testCancelWhileRunningTrappingTERM},
		{Name: "TestSchedulerEndsTheJob", Run: testSchedulerEndsTheJob},
		{Name: "TestRequeuedJobRunsAgain", Run: testRequeuedJobRunsAgain},
		{Name: "TestScancelAfterRequeue", Run: testScancelAfterRequeue},
		{Name: "TestJobVanishesBeforeExitCode", Run: testJobVanishesBeforeExitCode},
		{Name: "TestSSHSessionKilledCancelsTheJob", Run: testSSHSessionKilledCancelsTheJob},
		{Name: "TestNoSbatchOnPath", Run: testNoSbatchOnPath},
		{Name: "TestCheckCluster", Run: testCheckCluster},
		{Name: "TestRealSubmitQueueRelay", Run: testRealSubmitQueueRelay},
		{Name: "TestRealLikert", Run: testLikertSLURM},
		{Name: "TestRealCancel", Run: testRealCancel},
		{Name: "TestRealTimeLimit", Run: testRealTimeLimit},
		{Name: "TestRealExternalScancel", Run: testRealExternalScancel},
		{Name: "TestRealNodeDownRequeues", Run: testRealNodeDownRequeues},
		{Name: "TestRealSLURMSecretNeverOnACommandLine", Run: testRealSLURMSecretNeverOnACommandLine},
	})
}
