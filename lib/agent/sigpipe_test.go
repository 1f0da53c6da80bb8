package agent_test

// The agent of an ssh or slurm backend whose ssh session drops: the
// login node's sshd, its connection gone, closes the agent's standard
// input and the pipes of its standard output and error. The agent's
// first line after that, its reason for stopping the job, goes to a pipe
// without a reader: a Go program that writes to a broken pipe on fd 2
// dies of SIGPIPE, and the agent died so, before it stopped its
// training process or cancelled its SLURM job, which kept its GPU.
//
// Here the agent is the built potato-agent started with --socket, as a
// dispatch starts it, its standard error a pipe that the test reads until
// the drop and then closes, before it closes the agent's standard input,
// so that the agent's next write finds no reader. The socket stays up: the
// agent's result still reaches the test.

import (
	"bufio"
	"encoding/json"
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
	"potato-training/lib/agentproto"
)

// droppable is potato-agent --socket --once whose ssh session the test
// can drop.
type droppable struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *os.File // the pipe's read end, nil once closed
	log    *testcli.SyncBuffer
	copied chan struct{}
	exited chan struct{}
}

func startDroppable(t *testing.T, cwd, sock, token string, env []string, args ...string) *droppable {
	t.Helper()
	args = append([]string{"--socket", sock, "--once", "--backend", "gpu"}, args...)
	a := &droppable{cmd: exec.Command(filepath.Join(testcli.Binaries(t), "potato-agent"), args...),
		log: &testcli.SyncBuffer{}, copied: make(chan struct{}), exited: make(chan struct{})}
	a.cmd.Dir, a.cmd.Env = cwd, env
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	a.cmd.Stderr = w
	if a.stdin, err = a.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close() // the agent holds the only write end
	a.stderr = r
	go func() {
		io.Copy(a.log, r)
		close(a.copied)
	}()
	a.stdin.Write([]byte(token + "\n"))
	go func() {
		a.cmd.Wait()
		close(a.exited)
	}()
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		<-a.exited
		a.drop()
	})
	return a
}

// drop is what sshd does when the connection goes: the reader of the
// agent's standard error goes, then its standard input ends.
func (a *droppable) drop() {
	if a.stderr != nil {
		a.stderr.Close()
		<-a.copied
		a.stderr = nil
	}
	a.stdin.Close()
}

// exit waits for the agent to exit and fails the test unless it exited by
// itself with status 1 (its job failed), not killed by a signal.
func (a *droppable) exit(t *testing.T) {
	t.Helper()
	select {
	case <-a.exited:
	case <-time.After(90 * time.Second):
		t.Fatalf("the agent did not exit after its session dropped\n%s", a.log)
	}
	ws := a.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		t.Fatalf("the agent was killed by %v after its session dropped\n%s", ws.Signal(), a.log)
	}
	if code := ws.ExitStatus(); code != 1 {
		t.Errorf("exit %d, want 1\n%s", code, a.log)
	}
}

var trainingStarted = regexp.MustCompile(`training process (\d+) started`)

// The ssh backend's agent: its training process runs under it. Expected:
// the agent survives the closed pipe, stops the training process
// (SIGTERM to its group) and reports the lost session as its result.
func TestDroppedSessionStderrClosed(t *testing.T) {
	cwd := t.TempDir()
	r := serveSocketRun(t, testproject.Trainer(t, cwd, "sleep 300"), nil)
	a := startDroppable(t, cwd, r.sock, r.token, os.Environ(), "--workdir", filepath.Join(cwd, "wd"))
	var pid int
	testproject.WaitFor(t, "the training process", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, e := range r.events {
			if m := trainingStarted.FindStringSubmatch(e.String("msg")); m != nil {
				pid, _ = strconv.Atoi(m[1])
			}
		}
		return pid > 0
	})
	a.drop()
	a.exit(t)
	r.mu.Lock()
	res := r.result
	r.mu.Unlock()
	want := "the agent's ssh session ended: it stopped the training process (killed by SIGTERM)"
	if res == nil || res.Code != agentproto.CodeLostSession || res.Error != want {
		t.Errorf("result %+v, want code %s and %q", res, agentproto.CodeLostSession, want)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("the training process %d still runs", pid)
	}
}

// The slurm backend's agent, on a login node whose scheduler is
// potato-slurm-shim: its job runs (a prelude that sleeps). Expected: the
// agent survives the closed pipe, cancels its job, which leaves the
// queue, and reports the lost session as its result.
func TestDroppedSessionStderrClosedSLURM(t *testing.T) {
	testcli.Short(t, "it waits for a SLURM job's cancel after the session drops (about 30 s)")
	cwd := t.TempDir()
	sh := newShim(t, cwd, []string{"sleep 300"})
	r := serveSocketRun(t, "tfidf-logreg", nil)
	a := startDroppable(t, cwd, r.sock, r.token, sh.env, "--workdir", filepath.Join(cwd, "wd"), "--slurm-config", sh.config)
	testproject.WaitFor(t, "the job to run", func() bool { return r.logHas(": RUNNING on node07") })
	a.drop()
	a.exit(t)
	r.mu.Lock()
	res := r.result
	r.mu.Unlock()
	if res == nil || res.Code != agentproto.CodeLostSession || !strings.HasPrefix(res.Error, "the agent's ssh session ended: it cancelled SLURM job ") {
		t.Errorf("result %+v, want code %s and the cancel", res, agentproto.CodeLostSession)
	}
	if out := sh.admin(t, "list"); strings.Contains(out, "RUNNING") || strings.Contains(out, "PENDING") {
		t.Errorf("the job is still in the queue:\n%s", out)
	}
}

// potato-agent worker whose standard output, its events, is a pipe whose
// reader goes (its agent or dispatch died) while it fits. Expected: it
// survives the closed pipe and stops the fit at its next checkpoint, as
// on SIGTERM (exit 4), saying why on its standard error, rather than
// train on for nobody.
func TestWorkerStdoutClosed(t *testing.T) {
	r := serveSocketRun(t, "tfidf-logreg", map[string]string{"epochs": "100000000", "patience": "0"})
	spec := r.claim.Spec
	spec.BundleDir, spec.Workdir = filepath.Join(r.dir, "bundle"), t.TempDir()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	specPath := filepath.Join(t.TempDir(), "spec.json")
	if err := os.WriteFile(specPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(testcli.Binaries(t), "potato-agent"), "worker", "--spec", specPath)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testcli.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = pw, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	// The fit has begun once a progress event comes; then nobody reads.
	events := bufio.NewReader(pr)
	for {
		line, err := events.ReadString('\n')
		if err != nil {
			t.Fatalf("the worker's events ended before its fit: %v\n%s", err, stderr)
		}
		if strings.Contains(line, `"progress"`) {
			break
		}
	}
	pr.Close()
	select {
	case <-exited:
	case <-time.After(90 * time.Second):
		t.Fatalf("the worker still fits 90 s after its standard output closed\n%s", stderr)
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() || ws.ExitStatus() != 4 {
		t.Errorf("the worker ended %v, want exit status 4\n%s", cmd.ProcessState, stderr)
	}
	if !strings.Contains(stderr.String(), "nobody reads the events on standard output any more (the pipe is closed): stopping the fit") {
		t.Errorf("the worker does not say why it stopped:\n%s", stderr)
	}
}
