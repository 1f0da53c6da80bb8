//go:build faults

package faults

// The faults a SLURM cluster causes, on the real single-node SLURM of
// scripts/test-slurm: the run's backend is a login node reached over the
// test sshd (user potatotest), whose agent submits with sbatch. The
// cluster is shared with other tests: a test cancels only its own jobs.

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

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

// slurmProject is a project whose default backend "cluster" submits to
// the real SLURM through the test sshd's login node.
type slurmProject struct {
	*project
	conf      string // SLURM_CONF
	node      string // the cluster's one node
	remoteDir string
}

// newSLURMProject writes a project of 120 items, 100 labelled, whose
// backend has the SLURM keys in keys (YAML lines at the backend's
// indent) and the variables in env (YAML flow entries, "" for none).
func newSLURMProject(t *testing.T, keys, env string) *slurmProject {
	t.Helper()
	dir := testcli.SLURM(t)
	s := &slurmProject{conf: filepath.Join(dir, "slurm.conf")}
	node, err := os.ReadFile(filepath.Join(dir, "node"))
	if err != nil {
		t.Fatal(err)
	}
	s.node = strings.TrimSpace(string(node))
	// remote_dir must not be under /tmp (SPEC V1): potatotest's home.
	s.remoteDir = testcli.UserDir(t, "/home/potatotest")
	vars := fmt.Sprintf(`PATH: "/usr/local/bin:/usr/bin:/bin", SLURM_CONF: "%s", POTATO_TRAINING_EXIT_CODE_WAIT_S: "3"`, s.conf)
	if env != "" {
		vars += ", " + env
	}
	s.project = newProject(t, "", 120, 100, testcli.SLURMBackend(t, s.remoteDir, 30, vars, keys))
	return s
}

// slurm runs a scheduler command as root (scontrol update needs it).
func (s *slurmProject) slurm(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+s.conf)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// slurmAsUser runs a scheduler command as potatotest, as the agent does.
func (s *slurmProject) slurmAsUser(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "SLURM_CONF="+s.conf)
	out, err := testcli.AsRemoteUser(s.t, cmd).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

var slurmSubmitted = regexp.MustCompile(`Submitted SLURM job (\d+)`)

// job waits for the run's submission and returns its SLURM job id; the
// job is cancelled when the test ends, should the run leave it behind.
func (s *slurmProject) job(t *testing.T, id string) string {
	t.Helper()
	var job string
	testproject.WaitFor(t, "the submission", func() bool {
		if m := slurmSubmitted.FindStringSubmatch(s.File(id, rundir.LogFile)); m != nil {
			job = m[1]
		}
		return job != "" || s.Info(id).Finished
	})
	if job == "" {
		t.Fatalf("the run ended without a job\n%s", s.dump(id))
	}
	t.Cleanup(func() { s.slurmAsUser("scancel", job) })
	return job
}

// jobField is one field of scontrol show job, "" once the job is gone.
func (s *slurmProject) jobField(job, key string) string {
	out, _ := s.slurm("scontrol", "show", "job", job)
	m := regexp.MustCompile(`\b` + key + `=(\S+)`).FindStringSubmatch(out)
	if m == nil {
		return ""
	}
	return m[1]
}

// endless is a fit that lasts until the scheduler ends its job or the
// test releases it; released, the built-in trainer of the code that the
// run deployed on the login node ends it.
func (s *slurmProject) endless() *testproject.Endless {
	return s.project.endless(s.remoteDir + "/code/*/potato-agent")
}

// kept checks that a run that succeeded lost none of its predictions:
// every line the trainer wrote is in predictions.jsonl and every
// prelabel the write-back counted is a row of Potato's store.
func (s *slurmProject) kept(t *testing.T, id string) string {
	t.Helper()
	stored, kept := s.predictions(id)
	wb := s.Info(id).Writeback
	if kept == 0 || kept != wb["n_read"] || stored != wb["n_written"] {
		t.Errorf("predictions: %d in predictions.jsonl, %d in the store; the write-back read %d and wrote %d",
			kept, stored, wb["n_read"], wb["n_written"])
	}
	return fmt.Sprintf("%d predictions kept, %d prelabels stored", kept, stored)
}

// none checks that a run the scheduler ended mid-fit produced no
// predictions (its trainer writes them once released) and that
// none was half-written into the store.
func (s *slurmProject) none(t *testing.T, id string) string {
	t.Helper()
	stored, kept := s.predictions(id)
	if stored != 0 {
		t.Errorf("%d predictions in the store of a run that never finished its fit", stored)
	}
	return fmt.Sprintf("%d predictions produced, %d stored", kept, stored)
}

// slurmRequeued is the run log's line for a job the scheduler put back in the
// queue.
func slurmRequeued(job, why string) *regexp.Regexp {
	return regexp.MustCompile(`SLURM job ` + job + `: PENDING( \(\w+\))?: requeued by the scheduler ` + why + `, Restarts=1`)
}

// The fault: the job's node is set down (scontrol update state=down)
// while the trainer fits. SLURM requeues the job (Restarts=1,
// slurm.out: "DUE TO NODE FAILURE"). Expected: the run log says "requeued
// by the scheduler after a node failure, Restarts=1", the run waits in the
// queue, and once the node is resumed the second attempt succeeds; its
// predictions all survive, run.json, the store and the page say success,
// and the next run succeeds.
func testSLURMNodeDown(t *testing.T) {
	s := newSLURMProject(t, "", "")
	fit := s.endless()
	id := s.Detach(fit.Args()...)
	job := s.job(t, id)
	s.fitting(t, id)
	s.nodeDown(t)
	requeued := slurmRequeued(job, "after a node failure")
	testproject.WaitFor(t, "the requeue in the run log", func() bool {
		return requeued.MatchString(s.File(id, rundir.LogFile)) || s.Info(id).Finished
	})
	// The second attempt fits only until released, and is released now.
	fit.Release(t)
	s.resume(t)
	f := s.settled(id, rundir.StateSuccess, "", 5*time.Minute)
	line := requeued.FindString(s.File(id, rundir.LogFile))
	if line == "" {
		t.Errorf("the run log does not say the job was requeued after the node failure\n%s", s.dump(id))
	}
	record(t, "SLURM node down mid-fit", "requeued (run log says node failure); success once resumed; next run succeeds",
		fmt.Sprintf("%s; %q; %s; %s", f, line, s.kept(t, id), s.nextRunSucceeds()))
}

// The fault: as above, but the run's job may not be requeued
// (SBATCH_NO_REQUEUE=1 in the backend's env, which sbatch reads as
// --no-requeue), so the node's failure ends it: JobState=NODE_FAIL.
// Expected: M7, error "SLURM job N ended before the worker finished: its
// node failed" in run.json, the store and the page; no prediction was
// produced; once the node is resumed the next run succeeds.
func testSLURMNodeDownNoRequeue(t *testing.T) {
	s := newSLURMProject(t, "", `SBATCH_NO_REQUEUE: "1"`)
	id := s.Detach(s.endless().Args()...)
	job := s.job(t, id)
	s.fitting(t, id)
	s.nodeDown(t)
	f := s.settled(id, rundir.StateError, "backend", 2*time.Minute)
	s.resume(t)
	want := "SLURM job " + job + " ended before the worker finished: its node failed"
	if got := s.Info(id).Error; got != want {
		t.Errorf("error %q, want %q\n%s", got, want, s.dump(id))
	}
	if st := s.jobField(job, "JobState"); st != "NODE_FAIL" {
		t.Errorf("scontrol says JobState=%s, want NODE_FAIL", st)
	}
	record(t, "SLURM node down mid-fit (--no-requeue)", "error/backend: "+want,
		fmt.Sprintf("%s: %s; %s; %s", f, s.Info(id).Error, s.none(t, id), s.nextRunSucceeds()))
}

// nodeDown sets the cluster's node down, as an admin or a failed health
// check does; the node is resumed when the test ends, whatever happens.
func (s *slurmProject) nodeDown(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { s.slurm("scontrol", "update", "nodename="+s.node, "state=resume") })
	if out, err := s.slurm("scontrol", "update", "nodename="+s.node, "state=down", "reason=potato-faults"); err != nil {
		t.Fatalf("scontrol update state=down: %v %s", err, out)
	}
}

func (s *slurmProject) resume(t *testing.T) {
	t.Helper()
	if out, err := s.slurm("scontrol", "update", "nodename="+s.node, "state=resume"); err != nil {
		t.Fatalf("scontrol update state=resume: %v %s", err, out)
	}
}

// The fault: the job reaches its time limit (time: "1", one minute,
// which the scheduler enforces 74 to 90 s after the start) while the
// trainer fits. Expected: error with exactly F9's "SLURM job N
// ended before the worker finished: it reached its time limit" in
// run.json, the same state in the store and the page, no prediction
// (none was produced), and the next run succeeds.
func testSLURMTimeLimit(t *testing.T) {
	s := newSLURMProject(t, "      time: \"1\"\n", "")
	id := s.Detach(s.endless().Args()...)
	job := s.job(t, id)
	s.fitting(t, id)
	f := s.settled(id, rundir.StateError, "backend", 4*time.Minute)
	want := "SLURM job " + job + " ended before the worker finished: it reached its time limit"
	if got := s.Info(id).Error; got != want {
		t.Errorf("error %q, want %q\n%s", got, want, s.dump(id))
	}
	if st := s.jobField(job, "JobState"); st != "TIMEOUT" {
		t.Errorf("scontrol says JobState=%s, want TIMEOUT", st)
	}
	record(t, "SLURM time limit (1 min) mid-fit", "error/backend: "+want,
		fmt.Sprintf("%s: %s; %s; %s", f, s.Info(id).Error, s.none(t, id), s.nextRunSucceeds()))
}

// preempt submits, as potatotest, a job to the urgent partition (higher
// PriorityTier, PreemptType=preempt/partition_prio) that needs one of the
// GPUs the run's job holds, so the scheduler preempts that job alone; it
// returns the urgent job's id, cancelled when the test ends.
func (s *slurmProject) preempt(t *testing.T) string {
	t.Helper()
	out, err := s.slurmAsUser("sbatch", "--parsable", "--partition=urgent", "--gres=gpu:1", "--job-name=potato-faults-urgent",
		"--output=/dev/null", "--wrap", "sleep 10")
	if err != nil {
		t.Fatalf("sbatch to urgent: %v %s", err, out)
	}
	urgent := strings.TrimSpace(out)
	t.Cleanup(func() { s.slurmAsUser("scancel", urgent) })
	return urgent
}

// The fault: a job of the urgent partition preempts the run's job
// (PreemptMode=REQUEUE in scripts/test-slurm) while the trainer
// fits. SLURM requeues the job (slurm.out: "DUE TO PREEMPTION").
// Expected: as for a node failure, the job was not ended but requeued, so
// the run log says "requeued by the scheduler after a preemption,
// Restarts=1", the run waits and its second attempt succeeds with every
// prediction kept; run.json, the store and the page say success, and the
// next run succeeds.
func testSLURMPreemptedRequeued(t *testing.T) {
	s := newSLURMProject(t, "      gres: gpu:2\n", "")
	fit := s.endless()
	id := s.Detach(fit.Args()...)
	job := s.job(t, id)
	s.fitting(t, id)
	urgent := s.preempt(t)
	requeued := slurmRequeued(job, "after a preemption")
	testproject.WaitFor(t, "the requeue in the run log", func() bool {
		return requeued.MatchString(s.File(id, rundir.LogFile)) || s.Info(id).Finished
	})
	fit.Release(t)
	f := s.settled(id, rundir.StateSuccess, "", 5*time.Minute)
	line := requeued.FindString(s.File(id, rundir.LogFile))
	if line == "" {
		t.Errorf("the run log does not say the job was requeued after a preemption\n%s", s.dump(id))
	}
	record(t, "SLURM preemption (requeue) mid-fit", "requeued (run log says preemption); second attempt succeeds; next run succeeds",
		fmt.Sprintf("urgent job %s; %s; %q; %s; %s", urgent, f, line, s.kept(t, id), s.nextRunSucceeds()))
}

// The fault: the run's job is preempted and requeued, and while it waits
// to run again someone cancels it from outside (scancel), as an admin
// clearing the queue does. Its slurm.out still holds the first attempt's
// "DUE TO PREEMPTION" line: SLURM truncates it only when the job starts
// again. Expected: the job's end is the scancel, so M7's "SLURM job N
// ended before the worker finished: it was cancelled from outside
// (scancel)" in run.json, the store and the page; no prediction was
// produced; the next run succeeds.
func testSLURMScancelWhileRequeued(t *testing.T) {
	s := newSLURMProject(t, "      gres: gpu:2\n", "")
	id := s.Detach(s.endless().Args()...)
	job := s.job(t, id)
	s.fitting(t, id)
	s.preempt(t)
	requeued := slurmRequeued(job, "after a preemption")
	testproject.WaitFor(t, "the requeue in the run log", func() bool {
		return requeued.MatchString(s.File(id, rundir.LogFile)) || s.Info(id).Finished
	})
	if out, err := s.slurmAsUser("scancel", job); err != nil {
		t.Fatalf("scancel: %v %s", err, out)
	}
	f := s.settled(id, rundir.StateError, "backend", 2*time.Minute)
	want := "SLURM job " + job + " ended before the worker finished: it was cancelled from outside (scancel)"
	if got := s.Info(id).Error; got != want {
		t.Errorf("error %q, want %q\n%s", got, want, s.dump(id))
	}
	record(t, "SLURM scancel of a job waiting after its preemption", "error/backend: "+want,
		fmt.Sprintf("%s: %s; %s; %s", f, s.Info(id).Error, s.none(t, id), s.nextRunSucceeds()))
}

// The fault: as above, but the run's job may not be requeued
// (SBATCH_NO_REQUEUE=1 in the backend's env, which sbatch reads as
// --no-requeue), so preemption ends it: JobState=PREEMPTED. Expected: M7,
// error "SLURM job N ended before the worker finished: it was preempted"
// in run.json, the store and the page; no prediction was produced; the
// next run succeeds.
func testSLURMPreemptedNoRequeue(t *testing.T) {
	s := newSLURMProject(t, "      gres: gpu:2\n", `SBATCH_NO_REQUEUE: "1"`)
	id := s.Detach(s.endless().Args()...)
	job := s.job(t, id)
	s.fitting(t, id)
	urgent := s.preempt(t)
	f := s.settled(id, rundir.StateError, "backend", 2*time.Minute)
	want := "SLURM job " + job + " ended before the worker finished: it was preempted"
	if got := s.Info(id).Error; got != want {
		t.Errorf("error %q, want %q\n%s", got, want, s.dump(id))
	}
	if st := s.jobField(job, "JobState"); st != "PREEMPTED" {
		t.Errorf("scontrol says JobState=%s, want PREEMPTED", st)
	}
	record(t, "SLURM preemption (--no-requeue) mid-fit", "error/backend: "+want,
		fmt.Sprintf("urgent job %s; %s: %s; %s; %s", urgent, f, s.Info(id).Error, s.none(t, id), s.nextRunSucceeds()))
}

// The fault: the training process runs out of memory in its job and the
// kernel's OOM killer sends it SIGKILL. The test SLURM does not enforce
// memory (TaskPlugin=task/none, ConstrainRAMSpace=no: --mem is only
// bookkeeping here), so the test makes the limit itself: a cgroup v1
// memory group of 64 MiB that it moves the training process into (as
// slurmd's task/cgroup would), before the process allocates without
// bound. Expected: job.sh records exit 137, the agent reports the
// SIGKILL, and the run ends error/out_of_memory with "the training
// process was killed (SIGKILL), which usually means the machine ran out of
// memory" in run.json, the store and the page; no prediction was
// produced; the next run succeeds.
func testSLURMOutOfMemory(t *testing.T) {
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil {
		t.Skipf("no cgroup v1 memory controller at %s: %v", root, err)
	}
	cg, err := os.MkdirTemp(root, "potato-faults-oom-")
	if err != nil {
		t.Skipf("cannot make a memory cgroup: %v", err)
	}
	t.Cleanup(func() {
		// The group goes once its processes are gone.
		for i := 0; i < 100 && os.Remove(cg) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	})
	if err := os.WriteFile(filepath.Join(cg, "memory.limit_in_bytes"), []byte(strconv.Itoa(64<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newSLURMProject(t, "", "")
	mark := testcli.UserDir(t, "/tmp")
	tr := testproject.Trainer(t, testcli.UserDir(t, "/tmp"), `echo '{"v":1,"event":"status","state":"fitting","step":"waiting for its memory limit"}'
echo $$ >`+mark+`/pid
while [ ! -e `+mark+`/go ]; do sleep 0.1; done
echo '{"v":1,"event":"status","state":"fitting","step":"allocating"}'
# tail keeps every byte of a file without a newline.
exec tail /dev/zero`)
	id := s.Detach("--trainer", tr, "--schemas", "sentiment")
	job := s.job(t, id)
	var pid []byte
	testproject.WaitFor(t, "the training process", func() bool {
		pid, _ = os.ReadFile(filepath.Join(mark, "pid"))
		if s.Info(id).Finished {
			t.Fatalf("the run ended before the fault\n%s", s.dump(id))
		}
		return len(pid) > 0 && pid[len(pid)-1] == '\n'
	})
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), pid, 0o644); err != nil {
		t.Fatalf("moving the training process into %s: %v", cg, err)
	}
	if err := os.WriteFile(filepath.Join(mark, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	want := "the training process was killed (SIGKILL), which usually means the machine ran out of memory"
	f := s.settled(id, rundir.StateError, "out_of_memory", 2*time.Minute)
	if got := s.Info(id).Error; got != want {
		t.Errorf("error %q, want %q\n%s", got, want, s.dump(id))
	}
	oom, _ := os.ReadFile(filepath.Join(cg, "memory.oom_control"))
	kills := regexp.MustCompile(`oom_kill (\d+)`).FindSubmatch(oom)
	if kills == nil || string(kills[1]) == "0" {
		t.Errorf("the cgroup's OOM killer did not act: %s", oom)
	}
	state := s.jobField(job, "JobState") + " ExitCode=" + s.jobField(job, "ExitCode")
	record(t, "SLURM job out of memory (kernel OOM kill)", "error/out_of_memory: "+want,
		fmt.Sprintf("job %s; %s: %s; %s; %s", state, f, s.Info(id).Error, s.none(t, id), s.nextRunSucceeds()))
}

// sshProcs are the ssh processes that the dispatch of pid started (its
// descendants whose program is ssh): the ControlMaster, which holds the
// connection to the login node, and the sessions through it, among them
// the one whose remote command is the run's agent.
func sshProcs(pid int) (procs []proc, master, session bool) {
	for child, cmd := range remoteTree(pid) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", child))
		if child == pid || strings.TrimSpace(string(comm)) != "ssh" {
			continue
		}
		procs = append(procs, proc{child, cmd})
		master = master || strings.Contains(cmd, "ssh -M ")
		session = session || strings.Contains(cmd, "potato-agent --socket ")
	}
	return procs, master, session
}

// inQueue is the job's state as the real squeue gives it, "" once the job
// has left the queue.
func (s *slurmProject) inQueue(job string) string {
	out, err := s.slurm("squeue", "-h", "-j", job, "-o", "%T")
	if err != nil {
		// An id the controller has forgotten: out of the queue.
		if strings.Contains(out, "Invalid job id") {
			return ""
		}
		return "squeue failed: " + out
	}
	return out
}

// The fault: the link to the login node drops while the run's job is
// RUNNING: every ssh process of the dispatch (the ControlMaster and its
// sessions, found as the dispatch's descendants) is killed with SIGKILL,
// so the login node's sshd loses the connection, closes the agent's
// standard input and the pipes of its standard output and error. The
// agent's first line after that goes to a pipe nobody reads: it must
// survive it (a write to a closed pipe raised SIGPIPE, which killed it
// before its scancel). Expected: the agent cancels its job, which leaves
// the real squeue within 30 s of the drop (at SIGKILL, after the default
// grace of 20 s, at the latest); the run does not end as a success, and
// its run log says why (the ssh session ended before the agent reported a
// result), in run.json, the store and the page alike; no process of the
// run is left on the login node; the next run succeeds.
func testSLURMLinkDropWhileRunning(t *testing.T) {
	s := newSLURMProject(t, "", "")
	id := s.Detach(s.endless().Args()...)
	job := s.job(t, id)
	running := regexp.MustCompile(`SLURM job ` + job + `: RUNNING`)
	testproject.WaitFor(t, "RUNNING in the run log", func() bool {
		return running.MatchString(s.File(id, rundir.LogFile)) || s.Info(id).Finished
	})
	at := s.fitting(t, id)
	if st := s.inQueue(job); st != "RUNNING" {
		t.Fatalf("squeue says %q, want RUNNING\n%s", st, s.dump(id))
	}
	procs, master, session := sshProcs(at.PID)
	if !master || !session {
		t.Fatalf("the dispatch %d has no ssh master or no agent session among its ssh processes: %v", at.PID, procs)
	}
	for _, pr := range procs {
		syscall.Kill(pr.pid, syscall.SIGKILL)
	}
	dropped := time.Now()
	for _, pr := range procs {
		testproject.WaitFor(t, "the ssh processes to die", pr.gone)
	}
	var left time.Duration
	for {
		state := s.inQueue(job)
		left = time.Since(dropped)
		if state == "" {
			break
		}
		if left > 30*time.Second {
			t.Fatalf("SLURM job %s is still in the queue (%s) %.1f s after the link dropped\n%s", job, state, left.Seconds(), s.dump(id))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The endless trainer ends only on SIGTERM (exit 4): a job that ended
	// with 4, or with 143 (128 + SIGTERM: job.sh's wait for the trainer
	// interrupted by the same signal, which scancel --full also sends to
	// the batch shell), was stopped by the agent's scancel --signal=TERM;
	// one CANCELLED, by its plain scancel after the grace.
	ended := s.jobField(job, "JobState") + " ExitCode=" + s.jobField(job, "ExitCode")
	if ended != "FAILED ExitCode=4:0" && ended != "FAILED ExitCode=143:0" && !strings.HasPrefix(ended, "CANCELLED ") {
		t.Errorf("SLURM job %s ended %s, not by the agent's scancel", job, ended)
	}
	info := s.Wait(id, 2*time.Minute)
	const why = "the ssh session to potato-test ended before the agent reported a result"
	if info.State == rundir.StateSuccess || !strings.HasPrefix(info.Error, why) {
		t.Errorf("the run ended %s %q, want an error that starts %q\n%s", info.State, info.Error, why, s.dump(id))
	}
	if log := s.File(id, rundir.LogFile); !strings.Contains(log, why) {
		t.Errorf("the run log does not say why the run ended:\n%s", log)
	}
	f := s.settled(id, rundir.StateError, info.ErrorCode, 10*time.Second)
	if rest := remoteLeftAfter(nil, id, 30*time.Second); len(rest) > 0 {
		t.Errorf("processes of the run left on the login node 30 s after the job left the queue:\n%s", strings.Join(rest, "\n"))
	}
	record(t, "ssh to the login node dropped while the SLURM job is RUNNING",
		"the agent cancels its job: out of squeue within 30 s; the run fails saying the session ended; nothing left; next run succeeds",
		fmt.Sprintf("%d ssh processes killed; out of squeue %.1f s after the drop (%s); %s: %q; %s; %s",
			len(procs), left.Seconds(), ended, f, info.Error, s.none(t, id), s.nextRunSucceeds()))
}

// TestSLURMFaults runs the SLURM faults one after the other (they share
// one scheduler, whose node some of them set down), beside the other
// faults, which touch no SLURM job.
func TestSLURMFaults(t *testing.T) {
	testcli.Group(t, []testcli.Case{
		{Name: "TestSLURMNodeDown", Run: testSLURMNodeDown},
		{Name: "TestSLURMNodeDownNoRequeue", Run: testSLURMNodeDownNoRequeue},
		{Name: "TestSLURMTimeLimit", Run: testSLURMTimeLimit},
		{Name: "TestSLURMPreemptedRequeued", Run: testSLURMPreemptedRequeued},
		{Name: "TestSLURMScancelWhileRequeued", Run: testSLURMScancelWhileRequeued},
		{Name: "TestSLURMPreemptedNoRequeue", Run: testSLURMPreemptedNoRequeue},
		{Name: "TestSLURMOutOfMemory", Run: testSLURMOutOfMemory},
		{Name: "TestSLURMLinkDropWhileRunning", Run: testSLURMLinkDropWhileRunning},
	})
}
