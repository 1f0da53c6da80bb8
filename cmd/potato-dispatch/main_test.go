package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

func TestMain(m *testing.M) { os.Exit(testcli.Main(m)) }

// gatedProject is a project whose trainer waits for the file go in dir
// before it succeeds, so that a test can see a detached run still going
// after the command returned.
func gatedProject(t *testing.T) (r *testproject.Runs, trainer, gate string) {
	dir := t.TempDir()
	r = &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir, Config: testproject.Write(t, dir, 40, 30, "")}
	gate = filepath.Join(dir, "go")
	trainer = testproject.Trainer(t, dir, `while [ ! -e '`+gate+`' ]; do sleep 0.05; done
`+testproject.ResultLines)
	return r, trainer, gate
}

// runDispatch runs potato-dispatch with args and returns how it ended. Its
// bound of 60 s guards against a dispatch that never returns (one that
// detaches itself again and again), never a speed target.
func runDispatch(t *testing.T, r *testproject.Runs, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := r.Command("potato-dispatch", args...)
	cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	cmd.Env = append(append(os.Environ(), "PATH="+r.Bin+":"+os.Getenv("PATH")), env...)
	code, stdout, stderr = testproject.Exec(t, cmd)
	if ctx.Err() != nil {
		t.Fatalf("potato-dispatch %s did not return within 60 s", strings.Join(args, " "))
	}
	return code, stdout, stderr
}

func runDirs(t *testing.T, r *testproject.Runs) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(r.Root().Dir, "runs"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Name())
	}
	return ids
}

// --detach and --detach=true print the id and return while the run goes
// on; the background run is that one run, not a chain of dispatches each
// detaching again, and it keeps every flag it was given, from the command
// line or the environment.
func TestDetachForms(t *testing.T) {
	t.Parallel()
	for _, form := range []string{"--detach", "--detach=true"} {
		t.Run(form, func(t *testing.T) {
			r, trainer, gate := gatedProject(t)
			code, stdout, stderr := runDispatch(t, r, []string{"POTATO_TRAINER=" + trainer},
				"run", r.Config, "--schemas", "sentiment", form, "--param", "note=a,b", "--trigger", "cron", "--run-id", "20261202-135501-7f3a")
			if code != 0 || stdout != "20261202-135501-7f3a\n" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 0 and the run id", code, stdout, stderr)
			}
			if info := r.Info("20261202-135501-7f3a"); info.Finished {
				t.Fatalf("the run is over (%s) before its trainer was let go: it did not run in the background", info.State)
			}
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			info := r.Wait("20261202-135501-7f3a", 60*time.Second)
			if info.State != rundir.StateSuccess {
				t.Fatalf("state %s: %s\n%s", info.State, info.Error, r.File(info.RunID, "run.log"))
			}
			if info.Trainer != trainer || info.Trigger != "cron" || info.Params["note"] != "a,b" {
				t.Errorf("the background run lost flags: trainer %q, trigger %q, params %v", info.Trainer, info.Trigger, info.Params)
			}
			if ids := runDirs(t, r); len(ids) != 1 {
				t.Errorf("runs %v, want the one run", ids)
			}
		})
	}
}

// The background process of --detach waits, once its run is recorded,
// for the command that started it to let it go (startDetached's pipe
// closed, or that command gone): auto writes its start line to auto.log in
// that time, so that a run that fails at once cannot log its end before
// it (one did, under load). Started here by hand with the pipe held: its
// trainer has not started a second later, and runs once the pipe is
// closed. (A second proves nothing where the run would have taken longer;
// it cannot fail a correct build.)
func TestDetachedRunWaitsForItsRelease(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := filepath.Join(dir, "started")
	trainer := testproject.Trainer(t, dir, "touch '"+marker+"'\n"+testproject.ResultLines)
	cfg := testproject.Write(t, dir, 40, 30, "")
	cmd := exec.Command(filepath.Join(testcli.Binaries(t), "potato-dispatch"), "run", "--detached", "--trainer="+trainer, "--schemas=sentiment", "--", cfg)
	hold, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hold.Close(); _ = cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	id := strings.TrimSpace(line)
	if !rundir.ValidID(id) {
		t.Fatalf("stdout %q: want the run id", line)
	}
	time.Sleep(time.Second)
	if _, err := os.Stat(marker); err == nil || testproject.Read(t, dir, id).Finished {
		t.Fatal("the trainer ran before the background process was let go")
	}
	hold.Close()
	testproject.WaitFor(t, "the released run's end", func() bool { return testproject.Read(t, dir, id).Finished })
	if info := testproject.Read(t, dir, id); info.State != rundir.StateSuccess {
		t.Fatalf("state %s: %s", info.State, info.Error)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the trainer did not run: %v", err)
	}
}

// --detach=false is no detach: the command waits for the run's end and
// reports it.
func TestDetachFalseWaits(t *testing.T) {
	t.Parallel()
	r, trainer, gate := gatedProject(t)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runDispatch(t, r, nil, "run", r.Config, "--trainer", trainer, "--schemas", "sentiment", "--detach=false")
	id := strings.TrimSpace(stdout)
	if code != 0 || !rundir.ValidID(id) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if info := r.Info(id); !info.Finished || info.State != rundir.StateSuccess {
		t.Errorf("the command returned with the run %s (finished %v): it did not wait", info.State, info.Finished)
	}
	if !strings.Contains(stderr, "potato-dispatch: run "+id+": success") {
		t.Errorf("no summary of the run waited for on stderr: %q", stderr)
	}
	if ids := runDirs(t, r); len(ids) != 1 {
		t.Errorf("runs %v, want the one run", ids)
	}
}

// A detached run refused before it is recorded passes on its message and
// exit status, and leaves no run behind.
func TestDetachRefused(t *testing.T) {
	t.Parallel()
	r, _, _ := gatedProject(t)
	code, stdout, stderr := runDispatch(t, r, nil, "run", r.Config, "--trainer", "nosuch", "--schemas", "sentiment", "--detach=true")
	if code != 2 || stdout != "" || !strings.Contains(stderr, `unknown trainer "nosuch": the trainers are tfidf-logreg,`) {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and the trainer error", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(r.Root().Dir, "runs")); err == nil {
		if ids := runDirs(t, r); len(ids) != 0 {
			t.Errorf("a refused run left runs %v", ids)
		}
	}
}
