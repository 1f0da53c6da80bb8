package slurm

import (
	"cmp"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSbatchArgs(t *testing.T) {
	o := Options{Partition: "gpu", Gres: "gpu:1", Time: "01:00:00", Account: "lab", QOS: "normal",
		CPUsPerTask: 4, Mem: "16G", Constraint: "a100"}
	got := o.SbatchArgs("20261202-135501-7f3a", "/shared/p/jobs/20261202-135501-7f3a")
	want := []string{"--parsable", "--job-name=potato-20261202-135501-7f3a", "--output=slurm.out",
		"--chdir=/shared/p/jobs/20261202-135501-7f3a", "--partition=gpu", "--gres=gpu:1", "--time=01:00:00",
		"--account=lab", "--qos=normal", "--cpus-per-task=4", "--mem=16G", "--constraint=a100", "job.sh"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("args\n got %q\nwant %q", got, want)
	}
	if got := (Options{}).Flags(); len(got) != 0 {
		t.Errorf("no keys, flags %q", got)
	}
	for gres, gpu := range map[string]bool{"gpu:1": true, "gpu:a100:2": true, "gpu": true, "": false, "shard:1": false, "mps:50,gpu:1": true} {
		if (Options{Gres: gres}).WithGPU() != gpu {
			t.Errorf("gres %q: WithGPU %v", gres, !gpu)
		}
	}
}

func TestParseSubmit(t *testing.T) {
	for in, want := range map[string]string{"4242\n": "4242", "4242;cluster\n": "4242", "sbatch: warning: x\n77\n": "77"} {
		got, err := ParseSubmit([]byte(in))
		if err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "\n", "Submitted batch job 12\n", "12x"} {
		if id, err := ParseSubmit([]byte(in)); err == nil {
			t.Errorf("%q: id %q, want an error", in, id)
		}
	}
}

func TestParseSqueue(t *testing.T) {
	q, ok, err := ParseSqueue([]byte("4242|PENDING|Priority|||1:00:00\n"), "4242")
	if err != nil || !ok || q.Describe() != "PENDING (Priority)" {
		t.Errorf("pending: %+v %v %v", q, ok, err)
	}
	q, ok, _ = ParseSqueue([]byte("4242|RUNNING|None|node07|0:05|1:00:00\n"), "4242")
	if !ok || q.Describe() != "RUNNING on node07" {
		t.Errorf("running: %+v", q)
	}
	if _, ok, err := ParseSqueue([]byte(""), "4242"); ok || err != nil {
		t.Errorf("empty: ok %v err %v", ok, err)
	}
	if _, ok, _ := ParseSqueue([]byte("4243|RUNNING|None|n|0:01|1:00\n"), "4242"); ok {
		t.Error("another job's line taken for ours")
	}
	if _, _, err := ParseSqueue([]byte("4242 RUNNING\n"), "4242"); err == nil {
		t.Error("a line without the fields is no error")
	}
	if !InvalidJob([]byte("slurm_load_jobs error: Invalid job id specified\n")) {
		t.Error("InvalidJob")
	}
}

func TestNormalState(t *testing.T) {
	for in, want := range map[string]string{"CANCELLED by 1000": "CANCELLED", "CANCELLED+": "CANCELLED",
		"running": "RUNNING", " TIMEOUT ": "TIMEOUT"} {
		if got := NormalState(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// Real scontrol output of slurm-wlm 22.05, trimmed.
const scontrolTimeout = `JobId=20 JobName=potato-x
   UserId=potatotest(1001) GroupId=potatotest(1001) MCS_label=N/A
   Priority=1 Nice=0 Account=(null) QOS=(null)
   JobState=TIMEOUT Reason=TimeLimit Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15
   RunTime=00:01:14 TimeLimit=00:01:00 TimeMin=N/A
   Partition=debug AllocNode:Sid=vm:1234
   NodeList=vm
   Command=/home/potatotest/a dir/job.sh
   WorkDir=/home/potatotest/jobs/x
`

func TestParseScontrol(t *testing.T) {
	j, err := ParseScontrol([]byte(scontrolTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != "20" || j.State != StateTimeout || j.Reason != "TimeLimit" || j.ExitCode != 0 || j.Signal != 15 ||
		j.NodeList != "vm" || j.RunTime != "00:01:14" || j.Restarts != 0 {
		t.Errorf("%+v", j)
	}
	if got := j.Fields["Command"]; got != "/home/potatotest/a dir/job.sh" {
		t.Errorf("a value with a space: %q", got)
	}
	j, _ = ParseScontrol([]byte("JobId=3 JobName=x\n JobState=PENDING Reason=BeginTime\n Requeue=1 Restarts=1 ExitCode=0:0\n"))
	if j.Restarts != 1 || j.State != StatePending {
		t.Errorf("requeued: %+v", j)
	}
	if _, err := ParseScontrol([]byte("slurm_load_jobs error: Invalid job id specified")); err == nil {
		t.Error("an error message parsed as a job")
	}
}

func TestReason(t *testing.T) {
	cases := []struct {
		state, out string
		ours       bool
		want       string
	}{
		{"TIMEOUT", "", false, ReasonTimeLimit},
		{"NODE_FAIL", "", false, ReasonNodeFail},
		{"PREEMPTED", "", false, ReasonPreempted},
		{"OUT_OF_MEMORY", "", false, ReasonOOM},
		{"CANCELLED by 1001", "slurmstepd: error: *** JOB 12 ON vm CANCELLED AT 2026-12-02T15:04:36 ***\n", false, ReasonCancelled},
		{"CANCELLED", "slurmstepd: error: *** JOB 12 ON vm CANCELLED AT 2026-12-02T15:04:36 ***\n", true, ""},
		{"CANCELLED", "*** JOB 12 ON vm CANCELLED AT 2026-12-02T15:04:36 DUE TO TIME LIMIT ***", true, ReasonTimeLimit},
		{"COMPLETED", "*** JOB 1 ON vm CANCELLED AT 2026-12-02T15:04:36 ***", true, ""},
		{"FAILED", "", false, ""},
		{"COMPLETED", "", false, ""},
		// Older than MinJobAge: only slurm.out says.
		{"", "slurmstepd: error: *** JOB 20 ON vm CANCELLED AT 2026-12-02T15:06:14 DUE TO TIME LIMIT ***", false, ReasonTimeLimit},
		{"", "*** JOB 9 ON vm CANCELLED AT 2026-12-02T15:06:14 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***", false, ReasonNodeFail},
		{"", "*** JOB 9 ON vm CANCELLED AT 2026-12-02T15:06:14 DUE TO PREEMPTION ***", false, ReasonPreempted},
		{"", "slurmstepd: error: Detected 1 oom_kill event in StepId=9.batch. Some of the step tasks have been OOM Killed.", false, ReasonOOM},
		{"", "hello\n", false, ""},
	}
	for _, c := range cases {
		if got := Reason(c.state, []byte(c.out), c.ours); got != c.want {
			t.Errorf("Reason(%q, %q, %v) = %q, want %q", c.state, c.out, c.ours, got, c.want)
		}
	}
	msg := Ended("4242", ReasonTimeLimit)
	if msg != "SLURM job 4242 ended before the worker finished: it reached its time limit" || !IsEnded(msg) {
		t.Errorf("F9: %q", msg)
	}
}

func TestReadOptions(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "slurm.json")
	os.WriteFile(p, []byte(`{"job_python":"/opt/py/bin/python","partition":"gpu","gres":"gpu:1","time":"2:00:00","prelude":["module load cuda"],"env":{"A":"b"}}`), 0o644)
	o, ignored, err := ReadOptions(p)
	if err != nil || o.Partition != "gpu" || o.JobPython != "/opt/py/bin/python" || len(o.Prelude) != 1 || o.Env["A"] != "b" || len(ignored) != 0 {
		t.Errorf("%+v %v %v", o, ignored, err)
	}
	for _, bad := range []string{`{"partion":"gpu"}`, `{"time":"soon"}`, `{"cpus_per_task":-1}`, `{"env":{"A B":"x"}}`, `[1]`,
		`{"type":"ssh","host":"h"}`, `{"gpus":"auto"}`, `{"packages":["x"]}`, `{"gres":1}`} {
		os.WriteFile(p, []byte(bad), 0o644)
		if _, _, err := ReadOptions(p); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// The tutorial's cluster entry, as JSON: what applies on a login node is
// taken, python as the job's interpreter when job_python is left out; the
// keys of the server's ssh connection are named as ignored.
func TestReadOptionsBackendEntry(t *testing.T) {
	p := filepath.Join(t.TempDir(), "slurm.json")
	os.WriteFile(p, []byte(`{"type": "slurm", "host": "login.cluster.example.org",
		"python": "/opt/conda/bin/python3", "job_python": "/shared/envs/train/bin/python",
		"remote_dir": "/shared/projects/me/potato-training", "partition": "gpu", "gres": "gpu:1",
		"time": "04:00:00", "prelude": ["module load cuda/12.4"]}`), 0o644)
	o, ignored, err := ReadOptions(p)
	want := Options{JobPython: "/shared/envs/train/bin/python", Partition: "gpu", Gres: "gpu:1", Time: "04:00:00", Prelude: []string{"module load cuda/12.4"}}
	if err != nil || !reflect.DeepEqual(o, want) || !slices.Equal(ignored, []string{"host", "remote_dir", "type"}) {
		t.Errorf("%+v %q %v", o, ignored, err)
	}
	os.WriteFile(p, []byte(`{"type": "slurm", "host": "h", "python": "/opt/py", "user": "me", "heartbeat_timeout_s": 60}`), 0o644)
	o, ignored, err = ReadOptions(p)
	if err != nil || o.JobPython != "/opt/py" || !slices.Equal(ignored, []string{"heartbeat_timeout_s", "host", "type", "user"}) {
		t.Errorf("%+v %q %v", o, ignored, err)
	}
}

// runScript runs job.sh with /bin/sh around a shell "training process".
func runScript(t *testing.T, body string, o Options) (*exec.Cmd, string) {
	t.Helper()
	dir := t.TempDir()
	trainer := filepath.Join(dir, "trainer")
	os.WriteFile(trainer, []byte("#!/bin/sh\n"+body), 0o755)
	script := o.Script("r1", dir, []string{trainer, "--spec", "spec.json"}, []string{"POTATO_TRAINING_DEVICE=cpu"})
	os.WriteFile(filepath.Join(dir, "job.sh"), []byte(script), 0o755)
	if len(o.Env) > 0 {
		os.WriteFile(filepath.Join(dir, EnvFile), []byte(o.EnvScript()), 0o600)
	}
	os.WriteFile(filepath.Join(dir, "exit_code"), []byte("99\n"), 0o644) // a previous attempt's
	cmd := exec.Command(jobShell, filepath.Join(dir, "job.sh"))
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, dir
}

// jobShell runs job.sh: /bin/sh, as its first line names; clusters whose
// /bin/sh is bash are tried with POTATO_TEST_JOB_SHELL=/bin/bash.
var jobShell = cmp.Or(os.Getenv("POTATO_TEST_JOB_SHELL"), "/bin/sh")

// waitStarted waits until the training process of runScript has written
// "started" to events.jsonl.
func waitStarted(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(dir, "events.jsonl"))
		if strings.Contains(string(b), "started") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the training process did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readExit(t *testing.T, dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "exit_code"))
	if err != nil {
		t.Fatalf("no exit_code: %v", err)
	}
	return strings.TrimSpace(string(b))
}

func TestScriptRunsTheTrainingProcess(t *testing.T) {
	o := Options{Prelude: []string{"export PRELUDE_RAN=yes"}, Env: map[string]string{"FROM_ENV": "it's here"}}
	cmd, dir := runScript(t, `echo '{"v":1,"event":"log","level":"info","msg":"'"$PRELUDE_RAN $FROM_ENV $POTATO_TRAINING_DEVICE $1 $(pwd)"'"}'
echo oops >&2
exit 3
`, o)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("job.sh exit: %v, want status 3", err)
	}
	if got := readExit(t, dir); got != "3" {
		t.Errorf("exit_code %q", got)
	}
	ev, _ := os.ReadFile(filepath.Join(dir, "events.jsonl"))
	if !strings.Contains(string(ev), "yes it's here cpu --spec "+dir) {
		t.Errorf("events.jsonl: %s", ev)
	}
	if se, _ := os.ReadFile(filepath.Join(dir, "stderr.log")); string(se) != "oops\n" {
		t.Errorf("stderr.log: %q", se)
	}
	// The env's values are in job.env only, never in job.sh, which sbatch
	// keeps and shows.
	if js, _ := os.ReadFile(filepath.Join(dir, "job.sh")); strings.Contains(string(js), "it's here") || strings.Contains(string(js), "it'\\''s here") {
		t.Errorf("job.sh holds the env's value:\n%s", js)
	}
}

// A plain scancel and a time limit signal the batch shell only: job.sh
// passes TERM on and still writes exit_code.
func TestScriptForwardsTERM(t *testing.T) {
	cmd, dir := runScript(t, `trap 'echo got-term; exit 4' TERM
echo started
while :; do sleep 0.1; done
`, Options{})
	waitStarted(t, dir)
	if _, err := os.Stat(filepath.Join(dir, "exit_code")); err == nil {
		t.Fatal("a previous attempt's exit_code was not removed")
	}
	// The shell alone, as the scheduler does it.
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 {
		t.Errorf("job.sh exit: %v, want status 4", err)
	}
	if got := readExit(t, dir); got != "4" {
		t.Errorf("exit_code %q, want 4", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "events.jsonl")); !strings.Contains(string(b), "got-term") {
		t.Errorf("the training process did not get TERM: %s", b)
	}
}

// scancel --full signals every process of the job at once: the training
// process ends by its own trap while job.sh's wait is interrupted, and
// exit_code is still the training process's status, not the 143 of the
// interrupted wait, whichever ends first.
func TestScriptTERMToTheWholeJob(t *testing.T) {
	for i := 0; i < 20; i++ {
		cmd, dir := runScript(t, `trap 'exit 4' TERM
echo started
while :; do sleep 0.05; done
`, Options{})
		waitStarted(t, dir)
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		cmd.Wait()
		if got := readExit(t, dir); got != "4" {
			t.Fatalf("try %d: exit_code %q, want the training process's 4", i+1, got)
		}
	}
}

func TestScriptKilledTrainer(t *testing.T) {
	cmd, dir := runScript(t, "kill -KILL $$\n", Options{})
	cmd.Wait()
	if got := readExit(t, dir); got != "137" {
		t.Errorf("exit_code %q, want 137 (128+SIGKILL)", got)
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{"abc": "abc", "/a/b-c.d": "/a/b-c.d", "": "''", "a b": "'a b'", "it's": `'it'\''s'`, "$HOME": "'$HOME'"} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}
