package main

// The released Potato and this toolkit on one PATH, in both orders: the
// first command of every Potato tutorial, `potato start config.yaml`,
// reaches Potato's own potato and serves on loopback, and `potato
// training status` reaches the toolkit's. Potato is the virtual
// environment that scripts/install-deps makes from requirements/potato.txt,
// as cmd/potato-dispatch/potato_live_test.go uses it.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
)

// releasedPotatoDir is the bin directory of the virtual environment that
// scripts/install-deps makes from requirements/potato.txt, under
// $POTATO_TRAINING_VENVS (default /opt/potato-training), with
// potato-annotation's potato in it. Without it the test skips, except
// under CI, where it fails.
func releasedPotatoDir(t *testing.T) string {
	t.Helper()
	py, version := testcli.Venv(t, "potato", "import importlib.metadata as m, os, sys; os.stat(os.path.join(os.path.dirname(sys.executable), 'potato')); print(m.version('potato-annotation'))")
	dir := filepath.Dir(py)
	t.Logf("potato-annotation %s in %s", version, dir)
	return dir
}

// shell runs `potato ARGS...` as a shell user types it: /bin/sh finds
// potato on path, in dir.
func shell(dir, path string, args ...string) *exec.Cmd {
	cmd := exec.Command("/bin/sh", append([]string{"-c", `exec potato "$@"`, "sh"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+path, "HOME="+filepath.Join(dir, "home"))
	return cmd
}

// served is one `potato start` on a free port of 127.0.0.1: the process
// the shell started, and what it wrote.
type served struct {
	cmd    *exec.Cmd
	log    *testcli.SyncBuffer
	exited chan struct{}
	url    string
}

// startPotato runs `potato start config.yaml -p PORT --host 127.0.0.1`
// through the shell with path, and waits until /health answers. The
// process is in a group of its own, which the test kills at its end
// whatever happened.
func startPotato(t *testing.T, dir, path string) *served {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &served{log: new(testcli.SyncBuffer), exited: make(chan struct{}), url: fmt.Sprintf("http://127.0.0.1:%d", port)}
	s.cmd = shell(dir, path, "start", "config.yaml", "-p", strconv.Itoa(port), "--host", "127.0.0.1")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
		if t.Failed() {
			t.Logf("potato start wrote:\n%s", s.log.String())
		}
	})
	// A bound against a server that never comes up, not a speed target.
	for deadline := time.Now().Add(3 * time.Minute); ; {
		select {
		case <-s.exited:
			t.Fatalf("potato start exited: %v", s.cmd.ProcessState)
		default:
		}
		if res, err := http.Get(s.url + "/health"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("potato start did not answer on %s", s.url)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop sends sig to the process the shell started, that process alone,
// and returns how it ended: Potato, if the front command passed the
// signal on by being Potato, stops by itself.
func (s *served) stop(t *testing.T, sig syscall.Signal) *os.ProcessState {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("potato start still runs 60 s after %v", sig)
	}
	if res, err := http.Get(s.url + "/health"); err == nil {
		res.Body.Close()
		t.Fatalf("%s still answers after potato start ended", s.url)
	}
	return s.cmd.ProcessState
}

// proc is what /proc says of the process the shell started: its command
// line and its environment.
func (s *served) proc(t *testing.T) (cmdline, environ []string) {
	t.Helper()
	pid := strconv.Itoa(s.cmd.Process.Pid)
	read := func(f string) []string {
		b, err := os.ReadFile(filepath.Join("/proc", pid, f))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	}
	return read("cmdline"), read("environ")
}

// The bar of issue 35: with the released Potato installed, `potato start
// config.yaml` reaches Potato, which serves on loopback, whichever of the
// two tools comes first on PATH; `potato training status` reaches the
// toolkit's when the toolkit comes first, and the toolkit's potato by its
// path when Potato's does. potato(1) says so.
func TestReleasedPotatoBothOrders(t *testing.T) {
	potatoBin := releasedPotatoDir(t)
	bin := testcli.Binaries(t)
	self, err := filepath.EvalSymlinks(filepath.Join(bin, "potato"))
	if err != nil {
		t.Fatal(err)
	}
	project := func(t *testing.T) string {
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS(filepath.Join(testcli.Root(), "testdata", "potato-live"))); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	sys := ":/usr/bin:/bin"
	var ends []string // how Potato ended on SIGINT, in each order

	t.Run("toolkit first", func(t *testing.T) {
		dir := project(t)
		path := bin + ":" + potatoBin + sys
		s := startPotato(t, dir, path)
		// The process the shell started as the front command is now
		// Potato's: the same process id runs Potato's console script, and
		// its environment shows the front command it came through.
		cmdline, environ := s.proc(t)
		if len(cmdline) < 3 || cmdline[1] != filepath.Join(potatoBin, "potato") || cmdline[2] != "start" {
			t.Errorf("the process is %q, want Potato's potato start", cmdline)
		}
		if !slices.Contains(environ, passedVar+"="+self) {
			t.Errorf("Potato's environment has no %s=%s: it was not reached through the front command", passedVar, self)
		}
		if out := s.log.String(); !strings.Contains(out, "potato.flask_server") {
			t.Errorf("Potato's log did not come through the front command's standard output:\n%s", out)
		}
		st := s.stop(t, syscall.SIGINT)
		ends = append(ends, st.String())

		// SIGTERM too, with a symbolic link to the front command and a
		// copy of it also ahead of Potato on PATH.
		link, cp := filepath.Join(dir, "link"), filepath.Join(dir, "copy")
		for _, d := range []string{link, cp} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(self, filepath.Join(link, "potato")); err != nil {
			t.Fatal(err)
		}
		copyFile(t, self, filepath.Join(cp, "potato"))
		s = startPotato(t, dir, bin+":"+link+":"+cp+":"+potatoBin+sys)
		if cmdline, _ := s.proc(t); len(cmdline) < 2 || cmdline[1] != filepath.Join(potatoBin, "potato") {
			t.Errorf("the process is %q, want Potato's potato", cmdline)
		}
		st = s.stop(t, syscall.SIGTERM)
		if ws, ok := st.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
			t.Errorf("potato start ended %v after SIGTERM, want killed by it, as Potato's own is", st)
		}

		code, stdout, stderr := testproject.Exec(t, shell(dir, path, "training", "status", "config.yaml", "--json"))
		if code != 0 || strings.TrimSpace(stdout) != "[]" {
			t.Errorf("potato training status: exit %d, stdout %q, stderr %q; want the toolkit's [] and exit 0", code, stdout, stderr)
		}
	})

	t.Run("Potato first", func(t *testing.T) {
		dir := project(t)
		path := potatoBin + ":" + bin + sys
		s := startPotato(t, dir, path)
		_, environ := s.proc(t)
		for _, kv := range environ {
			if strings.HasPrefix(kv, passedVar+"=") {
				t.Errorf("Potato first on PATH, yet it came through the front command: %s", kv)
			}
		}
		ends = append(ends, s.stop(t, syscall.SIGINT).String())

		// The shell finds Potato's potato, which knows no training verb:
		// the toolkit's is reached by its path (potato(1)).
		code, _, stderr := testproject.Exec(t, shell(dir, path, "training", "status", "config.yaml", "--json"))
		if code != 2 || !strings.Contains(stderr, "invalid choice: 'training'") {
			t.Errorf("Potato's potato training status: exit %d, stderr %q; want Potato's usage error", code, stderr)
		}
		cmd := exec.Command(filepath.Join(bin, "potato"), "training", "status", "config.yaml", "--json")
		cmd.Dir, cmd.Env = dir, append(os.Environ(), "PATH="+path)
		code, stdout, stderr := testproject.Exec(t, cmd)
		if code != 0 || strings.TrimSpace(stdout) != "[]" {
			t.Errorf("%s training status: exit %d, stdout %q, stderr %q; want [] and exit 0", cmd.Path, code, stdout, stderr)
		}
	})

	// Through the front command or not, SIGINT ends Potato the same way.
	t.Logf("on SIGINT Potato ended: %q", ends)
	if len(ends) == 2 && ends[0] != ends[1] {
		t.Errorf("on SIGINT Potato ended %q through the front command, %q started by the shell", ends[0], ends[1])
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// One virtual environment with both packages has one bin/potato, the
// toolkit's when it was installed last: `potato start` then runs Potato's
// module with the Python beside the front command (python -m potato),
// serves on loopback, and stops on the signal sent to that process. The
// environment here is a bin/ with copies of the front command and
// potato-dispatch, as the wheel lays them, and a python3 that runs the
// released Potato's interpreter.
func TestReleasedPotatoOneEnvironment(t *testing.T) {
	potatoBin := releasedPotatoDir(t)
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(testcli.Root(), "testdata", "potato-live"))); err != nil {
		t.Fatal(err)
	}
	env := filepath.Join(dir, "venv", "bin")
	if err := os.MkdirAll(env, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"potato", "potato-dispatch"} {
		testcli.CopyBinary(t, b, env)
	}
	py := "#!/bin/sh\nexec " + filepath.Join(potatoBin, "python3") + ` "$@"` + "\n"
	testcli.WriteExecutable(t, filepath.Join(env, "python3"), []byte(py))
	path := env + ":/usr/bin:/bin"
	s := startPotato(t, dir, path)
	if cmdline, _ := s.proc(t); !slices.Contains(cmdline, "-m") || !slices.Contains(cmdline, "potato") || !slices.Contains(cmdline, "start") {
		t.Errorf("the process is %q, want Potato's module run as python -m potato start", cmdline)
	}
	st := s.stop(t, syscall.SIGINT)
	t.Logf("on SIGINT Potato ended: %v", st)

	// --help names it; the toolkit's own verbs stay the toolkit's.
	code, stdout, _ := testproject.Exec(t, shell(dir, path, "--help"))
	if code != 0 || !strings.Contains(stdout, filepath.Join(env, "python3")+" -m potato") {
		t.Errorf("potato --help: exit %d, want it to name %s -m potato:\n%s", code, filepath.Join(env, "python3"), stdout)
	}
	code, stdout, stderr := testproject.Exec(t, shell(dir, path, "training", "status", "config.yaml", "--json"))
	if code != 0 || strings.TrimSpace(stdout) != "[]" {
		t.Errorf("potato training status: exit %d, stdout %q, stderr %q; want the toolkit's [] and exit 0", code, stdout, stderr)
	}
}
