package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

// modeProject is a project whose trainer does what its run's --param
// mode says: fail (an error event and exit 1), gate (wait for the file
// gate, then succeed) or, without it, succeed.
func modeProject(t *testing.T) (r *testproject.Runs, trainer, gate string) {
	dir := t.TempDir()
	r = &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir, Config: testproject.Write(t, dir, 40, 30, "")}
	gate = filepath.Join(dir, "gate")
	trainer = testproject.Trainer(t, dir, `if grep -q '"mode": "fail"' "$2"; then
  echo '{"v":1,"event":"error","code":"fit_failed","message":"told to fail"}'; exit 1
fi
if grep -q '"mode": "gate"' "$2"; then
  while [ ! -e '`+gate+`' ]; do sleep 0.05; done
fi
`+testproject.ResultLines)
	return r, trainer, gate
}

// startDispatch starts potato-dispatch args in the background, so that a
// test can act while it waits, and returns it with the first line of its
// standard output when firstLine is set (run prints the run's id; wait
// prints nothing there).
func startDispatch(t *testing.T, r *testproject.Runs, firstLine bool, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := r.Command("potato-dispatch", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	if !firstLine {
		return cmd, ""
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	return cmd, strings.TrimSpace(line)
}

// exitOf waits for a command started by startDispatch, at most 60 s (a
// guard against a hang, never a speed target).
func exitOf(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not return within 60 s", strings.Join(cmd.Args, " "))
		return -1
	}
}

// run without --detach exits with the run's own exit code, the one in
// its exit_code file: 0 success, 1 failed, 3 cancelled; wait on each run
// exits the same, and with several runs the first non-zero in the order
// given.
func TestRunAndWaitExitCodes(t *testing.T) {
	t.Parallel()
	r, trainer, _ := modeProject(t)
	codes := map[string]int{}
	for _, mode := range []string{"success", "fail"} {
		code, stdout, stderr := runDispatch(t, r, nil, "run", r.Config, "--trainer", trainer, "--schemas", "sentiment", "--param", "mode="+mode)
		id := strings.TrimSpace(stdout)
		codes[mode] = code
		if got := strings.TrimSpace(r.File(id, "exit_code")); got != map[string]string{"success": "0", "fail": "1"}[mode] || got != strconv.Itoa(code) {
			t.Errorf("%s: run exited %d, exit_code %q; stderr %q", mode, code, got, stderr)
		}
		wcode, wout, werr := runDispatch(t, r, nil, "wait", r.Config, id)
		if wcode != code || wout != "" || !strings.Contains(werr, "potato-dispatch: run "+id+": ") {
			t.Errorf("%s: wait exited %d (stdout %q, stderr %q), want %d and the run's summary", mode, wcode, wout, werr, code)
		}
		if mode == "fail" && !strings.Contains(werr, "potato-dispatch: error: run "+id+" failed; see potato-dispatch status") {
			t.Errorf("wait on a failed run: stderr %q", werr)
		}
		codes[id] = code
	}

	// A run waited for by run itself and by wait, then cancelled: both
	// exit 3.
	runCmd, cancelled := startDispatch(t, r, true, "run", r.Config, "--trainer", trainer, "--schemas", "sentiment", "--param", "mode=gate")
	if !rundir.ValidID(cancelled) {
		t.Fatalf("run printed %q", cancelled)
	}
	waitCmd, _ := startDispatch(t, r, false, "wait", r.Config, cancelled)
	testproject.WaitFor(t, "the run to train", func() bool { return r.Info(cancelled).State == rundir.StateRunning })
	if code, _, stderr := runDispatch(t, r, nil, "cancel", r.Config, cancelled); code != 0 {
		t.Fatalf("cancel: exit %d: %s", code, stderr)
	}
	if code := exitOf(t, runCmd); code != 3 {
		t.Errorf("run of a cancelled run exited %d, want 3", code)
	}
	if code := exitOf(t, waitCmd); code != 3 {
		t.Errorf("wait on a cancelled run exited %d, want 3", code)
	}
	if got := strings.TrimSpace(r.File(cancelled, "exit_code")); got != "3" {
		t.Errorf("exit_code of the cancelled run: %q", got)
	}

	var ok, failed string
	for _, id := range runDirs(t, r) {
		switch {
		case id == cancelled:
		case codes[id] == 0:
			ok = id
		default:
			failed = id
		}
	}
	for _, c := range []struct {
		ids  []string
		want int
	}{
		{[]string{ok, ok}, 0},
		{[]string{ok, failed, cancelled}, 1},
		{[]string{ok, cancelled, failed}, 3},
	} {
		code, _, stderr := runDispatch(t, r, nil, append([]string{"wait", r.Config}, c.ids...)...)
		if code != c.want || strings.Count(stderr, "potato-dispatch: run ") != len(c.ids) {
			t.Errorf("wait %v: exit %d, want %d; stderr %q", c.ids, code, c.want, stderr)
		}
	}

	// A run that does not exist is a usage error, found before waiting.
	if code, _, stderr := runDispatch(t, r, nil, "wait", r.Config, ok, "20261203T151024-6ad8dd"); code != 2 || !strings.Contains(stderr, "no run 20261203T151024-6ad8dd") {
		t.Errorf("wait on no run: exit %d, stderr %q", code, stderr)
	}
}

// --timeout gives up with status 124 and leaves the run going; the run
// then ends as it would have.
func TestWaitTimeout(t *testing.T) {
	t.Parallel()
	r, trainer, gate := modeProject(t)
	id := r.Detach("--trainer", trainer, "--schemas", "sentiment", "--param", "mode=gate")
	code, stdout, stderr := runDispatch(t, r, nil, "wait", r.Config, id, "--timeout", "1s")
	if code != 124 || stdout != "" || !strings.Contains(stderr, "potato-dispatch: error: run "+id+" not over after 1s (--timeout)") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 124 and the run named", code, stdout, stderr)
	}
	if info := r.Info(id); info.Finished {
		t.Fatalf("the run ended (%s) when wait gave up", info.State)
	}
	waitCmd, _ := startDispatch(t, r, false, "wait", r.Config, id)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, waitCmd); code != 0 {
		t.Errorf("wait on the released run exited %d", code)
	}
}

// A run whose dispatch dies (SIGKILL) without writing exit_code does not
// make wait hang: the dispatch's lock is released, wait settles the run
// as lost and exits 1.
func TestWaitDispatchKilled(t *testing.T) {
	t.Parallel()
	r, trainer, _ := modeProject(t)
	id := r.Detach("--trainer", trainer, "--schemas", "sentiment", "--param", "mode=gate")
	testproject.WaitFor(t, "the run to train", func() bool { return r.Info(id).State == rundir.StateRunning })
	waitCmd, _ := startDispatch(t, r, false, "wait", r.Config, id)
	pid := r.Info(id).PID
	// Killed while wait blocks on the dispatch's lock, the case this test
	// is for, the lock's release wakes it: the kill comes once
	// /proc/locks shows wait's request blocked on the lock.
	testproject.WaitFor(t, "wait to block on the dispatch's lock", func() bool {
		return flockWaiter(t, filepath.Join(r.Root().RunDir(id), rundir.DispatchLockFile))
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, waitCmd); code != 1 {
		t.Errorf("wait on a run whose dispatch was killed exited %d, want 1", code)
	}
	info := r.Info(id)
	if !info.Finished || info.ErrorCode != rundir.CodeLost || strings.TrimSpace(r.File(id, "exit_code")) != "1" {
		t.Errorf("the lost run: finished %v, error_code %q, exit_code %q", info.Finished, info.ErrorCode, r.File(id, "exit_code"))
	}
}

// Parameters are checked before the run is recorded: an unknown name or a
// bad value exits 2 with the trainer's parameters listed, with or without
// --detach, and leaves no run directory.
func TestRunRefusesParams(t *testing.T) {
	t.Parallel()
	r, _, _ := modeProject(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--param", "epocs=5"}, `trainer tfidf-logreg has no parameter "epocs" (did you mean epochs?); the parameters of tfidf-logreg are:`},
		{[]string{"--param", "epochs=abc"}, `param epochs="abc" is not a whole number; the parameters of tfidf-logreg are:`},
		{[]string{"--param", "epochs=0", "--detach"}, `param epochs="0" is not 1 or more`},
	} {
		args := append([]string{"run", r.Config, "--trainer", "tfidf-logreg", "--schemas", "sentiment"}, c.args...)
		code, stdout, stderr := runDispatch(t, r, nil, args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, "potato-dispatch: error: "+c.want) ||
			!strings.Contains(stderr, "\n  epochs           whole number, 1 or more; default 30\n") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", c.args, code, stdout, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(r.Root().Dir, "runs")); err == nil {
		if ids := runDirs(t, r); len(ids) != 0 {
			t.Errorf("refused runs left run directories %v", ids)
		}
	}
	// A good value runs.
	code, stdout, stderr := runDispatch(t, r, nil, "run", r.Config, "--trainer", "tfidf-logreg", "--schemas", "sentiment", "--param", "epochs=3")
	if id := strings.TrimSpace(stdout); code != 0 || r.Info(id).Params["epochs"] != "3" {
		t.Errorf("epochs=3: exit %d, stderr %q", code, stderr)
	}
}

// flockWaiter reports whether a process waits for the flock(2) of path:
// /proc/locks lists a blocked request as "N: -> FLOCK ... MAJ:MIN:INODE".
func flockWaiter(t *testing.T, path string) bool {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	inode := ":" + strconv.FormatUint(st.Ino, 10) + " "
	for _, l := range strings.Split(string(locks), "\n") {
		if strings.Contains(l, "-> FLOCK") && strings.Contains(l, inode) {
			return true
		}
	}
	return false
}
