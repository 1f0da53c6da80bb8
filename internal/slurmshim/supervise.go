package slurmshim

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The supervisor is the stand-in for slurmctld and slurmstepd for one
// job: it waits for the job's turn, runs the batch script in its own
// process group, enforces the time limit, carries out kill requests that
// scancel and the fail verb record in job.json, and writes the end state.

const pollEvery = 100 * time.Millisecond

func supervise(id int) error {
	st, err := openStore()
	if err != nil {
		return err
	}
	for {
		j, cmd, err := waitTurn(st, id)
		if err != nil || j == nil {
			return err
		}
		requeued, err := watch(st, j, cmd)
		if err != nil || !requeued {
			return err
		}
	}
}

// waitTurn polls, under the lock, until the job may start, then starts
// it. It returns a nil job when the job was cancelled or removed.
func waitTurn(st *store, id int) (*job, *exec.Cmd, error) {
	for {
		if err := st.Lock(); err != nil {
			return nil, nil, err
		}
		j, err := st.Load(id)
		if err != nil || j.State != statePending {
			st.Unlock()
			return nil, nil, nil
		}
		if j.SupervisorPID != os.Getpid() {
			j.SupervisorPID = os.Getpid()
			st.Save(j)
		}
		jobs, err := st.All()
		if err != nil {
			st.Unlock()
			return nil, nil, err
		}
		now := time.Now()
		gpus, reason := schedule(jobs, st.cfg, id, now)
		if reason == "" {
			cmd, err := launch(st, j, gpus, now)
			st.Unlock()
			if err != nil {
				return nil, nil, err
			}
			if cmd == nil {
				return nil, nil, nil
			}
			return j, cmd, nil
		}
		if reason != j.Reason {
			j.Reason = reason
			st.Save(j)
		}
		st.Unlock()
		time.Sleep(pollEvery)
	}
}

// schedule decides, first come first served, whether pending job id may
// start now: it returns the GPUs it gets, or the reason it waits.
// Each job takes one slot.
func schedule(jobs []*job, cfg shimConfig, id int, now time.Time) ([]string, string) {
	slots := cfg.Slots
	used := map[string]bool{}
	for _, j := range jobs {
		if j.State == stateRunning || j.State == stateCompleting {
			slots--
			for _, g := range j.AllocGPUs {
				used[g] = true
			}
		}
	}
	var free []string
	for _, g := range cfg.GPUs {
		if !used[g] {
			free = append(free, g)
		}
	}
	blocked := false
	for _, j := range jobs {
		if j.State != statePending {
			continue
		}
		reason := ""
		switch {
		case now.Before(j.EligibleTime):
			reason = "BeginTime"
		case blocked:
			reason = "Priority"
		case slots <= 0:
			reason, blocked = "Priority", true
		case j.GPUs > len(free):
			reason, blocked = "Resources", true
		}
		if j.ID == id {
			if reason != "" {
				return nil, reason
			}
			return append([]string(nil), free[:j.GPUs]...), ""
		}
		if reason == "" {
			slots--
			free = free[j.GPUs:]
		}
	}
	return nil, "Priority"
}

// launch starts the batch script and marks the job RUNNING. Call it
// under the lock. A script that cannot be started ends the job FAILED
// and launch returns a nil command.
func launch(st *store, j *job, gpus []string, now time.Time) (*exec.Cmd, error) {
	j.State, j.Reason = stateRunning, "None"
	j.StartTime, j.EndTime = now, time.Time{}
	j.Node, j.AllocGPUs, j.Kill = st.cfg.Node, gpus, nil
	j.ExitStatus, j.ExitSignal = 0, 0

	cmd, files, err := prepare(st, j)
	if err == nil {
		err = cmd.Start()
	}
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		appendLine(j.StdErr, fmt.Sprintf("slurmstepd: error: execve(): %s: %v", j.Command, err))
		j.State, j.Reason, j.ExitStatus = stateFailed, "JobLaunchFailure", 1
		j.EndTime = time.Now()
		return nil, st.Save(j)
	}
	j.PID = cmd.Process.Pid
	return cmd, st.Save(j)
}

// prepare builds the batch step: the script copy run directly (the
// kernel reads its #! line), in its own process group, in the job's
// working directory, with SLURM's variables added to sbatch's environment.
func prepare(st *store, j *job) (*exec.Cmd, []*os.File, error) {
	dir := st.jobDir(j.ID)
	var env []string
	if b, err := os.ReadFile(filepath.Join(dir, "environment")); err == nil {
		json.Unmarshal(b, &env)
	}
	set := map[string]string{
		"SLURM_JOB_ID": strconv.Itoa(j.ID), "SLURM_JOBID": strconv.Itoa(j.ID),
		"SLURM_JOB_NAME": j.Name, "SLURM_SUBMIT_DIR": j.SubmitDir, "SLURM_SUBMIT_HOST": j.SubmitHost,
		"SLURM_JOB_NODELIST": j.Node, "SLURM_NODELIST": j.Node, "SLURMD_NODENAME": j.Node,
		"SLURM_JOB_PARTITION": j.Partition, "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1",
		"SLURM_JOB_USER": j.User, "SLURM_JOB_UID": strconv.Itoa(j.UID),
		"SLURM_RESTART_COUNT": strconv.Itoa(j.Restarts), "SLURM_CLUSTER_NAME": st.cfg.Cluster,
		"SLURM_JOB_CPUS_PER_NODE": strconv.Itoa(j.cpus()),
	}
	if st.cfg.Cluster == "" {
		set["SLURM_CLUSTER_NAME"] = "shim"
	}
	if j.CPUs > 0 {
		set["SLURM_CPUS_PER_TASK"] = strconv.Itoa(j.CPUs)
	}
	if j.Account != "" {
		set["SLURM_JOB_ACCOUNT"] = j.Account
	}
	if j.QOS != "" {
		set["SLURM_JOB_QOS"] = j.QOS
	}
	if j.MemMB > 0 {
		set["SLURM_MEM_PER_NODE"] = strconv.FormatInt(j.MemMB, 10)
	}
	if j.GPUs > 0 {
		list := strings.Join(j.AllocGPUs, ",")
		set["CUDA_VISIBLE_DEVICES"] = list
		set["GPU_DEVICE_ORDINAL"] = list
		set["SLURM_JOB_GPUS"] = list
		set["SLURM_GPUS_ON_NODE"] = strconv.Itoa(j.GPUs)
	}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		out = append(out, k+"="+set[k])
	}

	workDir := j.WorkDir
	if st, err := os.Stat(workDir); err != nil || !st.IsDir() {
		appendLine(j.StdErr, fmt.Sprintf("slurmstepd: error: couldn't chdir to `%s': No such file or directory: going to /tmp instead", workDir))
		workDir = "/tmp"
	}
	// Truncated at the first start, appended to after a requeue, as
	// slurmstepd does; always opened O_APPEND so the supervisor's own
	// lines do not overwrite the job's.
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if !j.OpenAppend && j.Restarts == 0 {
		flags |= os.O_TRUNC
	}
	stdout, err := os.OpenFile(j.StdOut, flags, 0o644)
	if err != nil {
		return nil, nil, err
	}
	files := []*os.File{stdout}
	stderr := stdout
	if j.StdErr != j.StdOut {
		if stderr, err = os.OpenFile(j.StdErr, flags, 0o644); err != nil {
			return nil, files, err
		}
		files = append(files, stderr)
	}
	cmd := exec.Command(filepath.Join(dir, "script"), j.Args...)
	cmd.Dir, cmd.Env = workDir, out
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, files, nil
}

// appendLine adds one line to a job's output file, as slurmstepd does.
func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintln(f, line)
	f.Close()
}

// endLines are the lines slurmstepd writes when the scheduler ends a job.
func endLine(kind string, j *job, at time.Time) string {
	head := fmt.Sprintf("slurmstepd: error: *** JOB %d ON %s CANCELLED AT %s", j.ID, j.Node, at.Format(timeStamp))
	switch kind {
	case "timeout":
		return head + " DUE TO TIME LIMIT ***"
	case "node_fail":
		return head + " DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"
	case "preempted":
		return head + " DUE TO PREEMPTION ***"
	case "out_of_memory":
		return fmt.Sprintf("slurmstepd: error: Detected 1 oom_kill event in StepId=%d.batch. Some of the step tasks have been OOM Killed.", j.ID)
	}
	return head + " ***"
}

// watch waits for the batch script to end, enforcing the time limit and
// carrying out kill requests, then records the end. It reports whether
// the job was requeued.
func watch(st *store, j *job, cmd *exec.Cmd) (bool, error) {
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	pid := j.PID
	var limit, warn time.Time
	if j.TimeLimitS > 0 {
		limit = j.StartTime.Add(time.Duration(j.TimeLimitS) * time.Second)
		if j.Signal != 0 {
			warn = limit.Add(-time.Duration(j.SignalSecs) * time.Second)
		}
	}
	var kill *killReq
	var killAt time.Time // when the group gets SIGKILL
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
loop:
	for {
		select {
		case <-done:
			break loop
		case <-tick.C:
		}
		now := time.Now()
		if kill == nil {
			cur, err := st.Load(j.ID)
			if errors.Is(err, os.ErrNotExist) {
				// The state directory is gone: nothing to report to.
				syscall.Kill(-pid, syscall.SIGKILL)
				<-done
				return false, nil
			}
			switch {
			case err == nil && cur.Kill != nil:
				kill = cur.Kill
			case !limit.IsZero() && !now.Before(limit):
				kill = &killReq{Kind: "timeout", At: now}
			case !warn.IsZero() && !now.Before(warn):
				if j.SignalB {
					syscall.Kill(pid, syscall.Signal(j.Signal))
				} else {
					syscall.Kill(-pid, syscall.Signal(j.Signal))
				}
				warn = time.Time{}
			}
			if kill != nil {
				killAt = begin(st, j, kill, now)
			}
		} else if !killAt.IsZero() && !now.Before(killAt) {
			syscall.Kill(-pid, syscall.SIGKILL)
			killAt = time.Time{}
		}
	}
	// Like SLURM's cgroup, nothing of the job outlives its batch script.
	syscall.Kill(-pid, syscall.SIGKILL)
	return finish(st, j.ID, cmd.ProcessState, kill)
}

// begin carries out a kill request: it records it, marks the job
// COMPLETING, writes slurmstepd's line and sends the first signal. It
// returns when the group is to get SIGKILL (zero: already sent).
func begin(st *store, j *job, kill *killReq, now time.Time) time.Time {
	if err := st.Lock(); err == nil {
		if cur, err := st.Load(j.ID); err == nil {
			cur.Kill = kill
			cur.State = stateCompleting
			if kill.Kind == "timeout" {
				cur.Reason = "TimeLimit"
			}
			st.Save(cur)
		}
		st.Unlock()
	}
	appendLine(j.StdErr, endLine(kill.Kind, j, now))
	wait := now.Add(seconds(st.cfg.KillWaitS))
	switch kill.Kind {
	case "node_fail", "out_of_memory":
		syscall.Kill(-j.PID, syscall.SIGKILL)
		return time.Time{}
	case "preempted":
		syscall.Kill(-j.PID, syscall.SIGTERM)
	default: // cancel, timeout: the batch shell only, as under proctrack/cgroup
		syscall.Kill(j.PID, syscall.SIGTERM)
	}
	return wait
}

// finish writes the job's end state under the lock; a requeued job goes
// back to PENDING.
func finish(st *store, id int, ps *os.ProcessState, kill *killReq) (bool, error) {
	if err := st.Lock(); err != nil {
		return false, err
	}
	defer st.Unlock()
	j, err := st.Load(id)
	if err != nil {
		return false, nil
	}
	now := time.Now()
	j.PID = 0
	j.EndTime = now
	kind := ""
	if kill != nil {
		kind = kill.Kind
	}
	if (kind == "node_fail" || kind == "preempted") && kill.Requeue && j.Requeue {
		j.State, j.Reason = statePending, "BeginTime"
		j.Restarts++
		j.EligibleTime = now.Add(seconds(st.cfg.RequeueDelayS))
		j.StartTime, j.EndTime = time.Time{}, time.Time{}
		j.Node, j.AllocGPUs, j.Kill = "", nil, nil
		j.ExitStatus, j.ExitSignal = 0, 0
		return true, st.Save(j)
	}
	j.ExitStatus, j.ExitSignal = 0, 0
	switch kind {
	case "":
		ws, _ := ps.Sys().(syscall.WaitStatus)
		switch {
		case ws.Signaled():
			j.State, j.Reason, j.ExitSignal = stateFailed, "JobLaunchFailure", int(ws.Signal())
		case ws.ExitStatus() != 0:
			j.State, j.Reason, j.ExitStatus = stateFailed, "NonZeroExitCode", ws.ExitStatus()
		default:
			j.State, j.Reason = stateCompleted, "None"
		}
	case "cancel":
		j.State, j.Reason, j.ExitSignal = stateCancelled, "None", int(syscall.SIGTERM)
	case "timeout":
		j.State, j.Reason, j.ExitSignal = stateTimeout, "TimeLimit", int(syscall.SIGTERM)
	case "node_fail":
		j.State, j.Reason, j.ExitSignal = stateNodeFail, "NodeDown", int(syscall.SIGKILL)
	case "preempted":
		j.State, j.Reason, j.ExitSignal = statePreempted, "None", int(syscall.SIGTERM)
	case "out_of_memory":
		j.State, j.Reason, j.ExitSignal = stateOOM, "OutOfMemory", 125
	}
	return false, st.Save(j)
}
