// Package testcli is the testscript set-up shared by the binaries' tests:
// the exitcode command, the variables the scripts use and the sibling
// binaries built once onto PATH.
package testcli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// Root is the repository's root directory, found from the working
// directory by looking for go.mod.
func Root() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			panic("testcli: no go.mod above the working directory")
		}
		dir = parent
	}
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// Binaries builds every command under cmd/ once per test process into a
// temporary directory and returns it.
//
// make check and make test build them once, into .testbin/, and name that
// directory in $POTATO_TEST_BIN, so that each test package does not link
// them again; the tests use it as they find it.
func Binaries(t testing.TB) string {
	buildOnce.Do(func() {
		if dir := os.Getenv("POTATO_TEST_BIN"); dir != "" {
			if _, err := os.Stat(filepath.Join(dir, "potato-dispatch")); err != nil {
				buildErr = fmt.Errorf("POTATO_TEST_BIN=%s: %v: run make testbin", dir, err)
			}
			binDir = dir
			return
		}
		binDir, buildErr = os.MkdirTemp("", "potato-bin-")
		if buildErr != nil {
			return
		}
		// The potatotest tag adds the seams some tests need (see
		// lib/backend/ssh/testtoken_potatotest.go); installed binaries have none.
		cmd := exec.Command("go", "build", "-tags", "potatotest", "-o", binDir+string(filepath.Separator), "./cmd/...")
		cmd.Dir = Root()
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/...: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// CopyBinary copies the built command name (Binaries) into dir, mode
// 0755, and returns the copy's path: for a test that needs it alone in a
// directory, or where the sshd's user can run it. A cp process writes it:
// a child that another test forks while this process holds a file open
// for writing keeps it open until that child execs, and running the file
// then fails with "text file busy" (Go issue 22315).
func CopyBinary(t testing.TB, name, dir string) string {
	t.Helper()
	dst := filepath.Join(dir, name)
	copyExecutable(t, filepath.Join(Binaries(t), name), dst)
	return dst
}

// copyExecutable copies src to dst, mode 0755, by a cp process, into a new
// file (--remove-destination: never one a running program has open).
func copyExecutable(t interface {
	Helper()
	Fatal(args ...any)
}, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "--remove-destination", src, dst).CombinedOutput(); err != nil {
		t.Fatal(fmt.Sprintf("cp %s: %v\n%s", dst, err, out))
	}
	if err := os.Chmod(dst, 0o755); err != nil {
		t.Fatal(err)
	}
}

// WriteExecutable writes data to path as a program, mode 0755, by a cp
// process from a file beside it, for CopyBinary's reason: a script this
// process wrote itself could be held open for writing by a child another
// test forked meanwhile, and running it fail with "text file busy".
func WriteExecutable(t interface {
	Helper()
	Fatal(args ...any)
}, path string, data []byte) {
	t.Helper()
	tmp := path + ".w"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(tmp)
	copyExecutable(t, tmp, path)
}

// HasModule reports whether python finds module name, asked of importlib
// without importing it (an import of torch costs a second or two of CPU).
func HasModule(python, name string) bool {
	return exec.Command(python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)", name).Run() == nil
}

// Params returns testscript parameters for the scripts in dir. The
// scripts see $REPO (the repository) and, when siblings is set, $BIN
// holding every built binary, also put first on PATH. Nothing outside the
// repository is named: reference data lives in $REPO/testdata.
func Params(t testing.TB, dir string, siblings bool) testscript.Params {
	root := Root()
	var bin string
	if siblings {
		bin = Binaries(t)
	}
	return testscript.Params{
		Dir: dir,
		Setup: func(env *testscript.Env) error {
			env.Setenv("REPO", root)
			if bin != "" {
				env.Setenv("BIN", bin)
				env.Setenv("PATH", bin+string(os.PathListSeparator)+env.Getenv("PATH"))
			}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exitcode": ExitCode,
		},
		RequireExplicitExec: false,
	}
}

// ExitCode is the script command "exitcode N PROGRAM [ARGS...]": it runs
// PROGRAM, keeps its stdout and stderr for the next assertions, and fails
// unless PROGRAM exited with status N.
func ExitCode(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! exitcode")
	}
	if len(args) < 2 {
		ts.Fatalf("usage: exitcode N program [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitcode: %q is not a number", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		got = ee.ExitCode()
	case err != nil:
		ts.Fatalf("exitcode: %s: %v", args[1], err)
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}

// Short skips t under go test -short, the fast tier of make check: what
// starts a real service (sshd, SLURM, Potato, a browser) or a real
// fine-tune is left to make test, which runs everything. The skip says
// which it is.
func Short(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: %s; make test runs it", what)
	}
}

// SSHD returns the state directory of the test sshd that scripts/test-sshd
// starts ($POTATO_TEST_SSHD_DIR, else /tmp/potato-test-sshd). Without it
// the test skips, except under CI, where .ci/run starts it and a missing
// server fails the test.
func SSHD(t testing.TB) string {
	t.Helper()
	Short(t, "it logs in to the test sshd")
	dir := os.Getenv("POTATO_TEST_SSHD_DIR")
	if dir == "" {
		dir = "/tmp/potato-test-sshd"
	}
	if _, err := os.Stat(filepath.Join(dir, "ssh_config")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the test sshd is not running (%v): .ci/run starts it with scripts/test-setup", err)
		}
		t.Skip("the test sshd is not running: start it with scripts/test-sshd")
	}
	return dir
}

// SSHBackend is the model_training lines of a project whose default
// backend "gpu" is the ssh host alias host of the ssh_config file
// sshConfig: remote_dir, heartbeat_timeout_s and keys, more lines at the
// backend's indent.
func SSHBackend(host, sshConfig, remoteDir string, heartbeatS int, keys string) string {
	return fmt.Sprintf(`  backend: gpu
  backends:
    gpu:
      type: ssh
      host: %s
      ssh_config: %s
      remote_dir: %s
      heartbeat_timeout_s: %d
`, host, sshConfig, remoteDir, heartbeatS) + keys
}

// SLURMBackend is the model_training lines of a project whose default
// backend "cluster" is a SLURM login node reached over the test sshd
// (SSHD): remote_dir, heartbeat_timeout_s, a poll_interval_s of 1, the
// variables env (YAML flow entries) and keys, more lines at the
// backend's indent.
func SLURMBackend(t testing.TB, remoteDir string, heartbeatS int, env, keys string) string {
	t.Helper()
	return fmt.Sprintf(`  backend: cluster
  backends:
    cluster:
      type: slurm
      host: potato-test
      ssh_config: %s/ssh_config
      remote_dir: %s
      heartbeat_timeout_s: %d
      poll_interval_s: 1
      env: {%s}
`, SSHD(t), remoteDir, heartbeatS, env) + keys
}

// SharedDir makes a directory under /tmp with mode, for what the test
// sshd's user must reach (fake programs, trainers, a remote_dir), and
// removes it when the test ends: the test's own TempDir may sit where
// that user cannot go.
func SharedDir(t testing.TB, mode os.FileMode) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", "potato-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, mode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// SLURM returns the state directory of the single-node SLURM that
// scripts/test-slurm starts ($POTATO_TEST_SLURM_DIR, else
// /tmp/potato-test-slurm) once its slurm.conf exists and scontrol ping
// says UP. Clients find that cluster with SLURM_CONF=DIR/slurm.conf; the
// node is named in DIR/node. Without it the test skips, except under CI,
// where .ci/run starts it and a missing scheduler fails the test.
func SLURM(t testing.TB) string {
	t.Helper()
	Short(t, "it submits jobs to the test SLURM")
	dir := os.Getenv("POTATO_TEST_SLURM_DIR")
	if dir == "" {
		dir = "/tmp/potato-test-slurm"
	}
	conf := filepath.Join(dir, "slurm.conf")
	err := slurmUp(conf)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the test SLURM is not running (%v): .ci/run starts it with scripts/test-setup", err)
		}
		t.Skipf("the test SLURM is not running (%v): start it with scripts/test-slurm", err)
	}
	return dir
}

func slurmUp(conf string) error {
	if _, err := os.Stat(conf); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "scontrol", "ping")
	cmd.Env = append(os.Environ(), "SLURM_CONF="+conf)
	out, err := cmd.CombinedOutput()
	if !bytes.Contains(out, []byte(" is UP")) {
		if err == nil {
			err = errors.New("not UP")
		}
		return fmt.Errorf("scontrol ping: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// Main runs a package's tests and then removes the binaries Binaries
// built, so test runs leave nothing behind; use it as TestMain. The
// binaries of $POTATO_TEST_BIN are the Makefile's, and stay.
func Main(m *testing.M) int {
	code := m.Run()
	if binDir != "" && os.Getenv("POTATO_TEST_BIN") == "" {
		os.RemoveAll(binDir)
	}
	return code
}

// CleanM is m for testscript.Main, which takes a TestingM and exits
// itself: its Run is Main's, so that a package whose TestMain is
// testscript's removes the binaries Binaries built too.
type CleanM struct{ M *testing.M }

// Run runs the tests through Main.
func (c CleanM) Run() int { return Main(c.M) }

// Case is one test of a Group: its name and its function.
type Case struct {
	Name string
	Run  func(*testing.T)
}

// Group runs cases one after the other, as subtests of t, and t itself
// beside the package's other parallel tests: tests that share a part (one
// SLURM node, one sshd) run in turn, and a package's groups side by side.
func Group(t *testing.T, cases []Case) {
	t.Parallel()
	for _, c := range cases {
		t.Run(c.Name, c.Run)
	}
}

// RemoteUser is the name of the test sshd's user (scripts/test-sshd).
const RemoteUser = "potatotest"

// RemoteIDs are the uid and gid of RemoteUser.
func RemoteIDs(t testing.TB) (uid, gid int) {
	t.Helper()
	var ids [2]int
	for i, flag := range []string{"-u", "-g"} {
		out, err := exec.Command("id", flag, RemoteUser).Output()
		if err != nil {
			t.Fatalf("id %s %s: %v", flag, RemoteUser, err)
		}
		ids[i], _ = strconv.Atoi(strings.TrimSpace(string(out)))
	}
	return ids[0], ids[1]
}

// UserDir makes a directory of mode 0755 under under that RemoteUser
// owns, and removes it when the test ends: a remote_dir in the user's
// home (SPEC V1 refuses /tmp, which compute nodes do not share), or a
// place for its programs.
func UserDir(t testing.TB, under string) string {
	t.Helper()
	uid, gid := RemoteIDs(t)
	d, err := os.MkdirTemp(under, "potato-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, uid, gid); err != nil {
		t.Fatal(err)
	}
	return d
}

// AsRemoteUser makes cmd run as RemoteUser, as the agent does on a login
// node.
func AsRemoteUser(t testing.TB, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	uid, gid := RemoteIDs(t)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	return cmd
}

// SyncBuffer is a bytes.Buffer that a test may read while a process or a
// goroutine writes to it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Bytes is a copy of what was written so far.
func (s *SyncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// Venv is the interpreter of the virtual environment that
// scripts/install-deps makes from requirements/NAME.txt, under
// $POTATO_TRAINING_VENVS (default /opt/potato-training), and what code
// printed there: code checks what the test needs (an import, a version).
// Without the environment, or when code fails, the test skips, except
// under CI, where it fails.
func Venv(t testing.TB, name, code string) (python, out string) {
	t.Helper()
	Short(t, "it runs the Python stack "+name+" (a real fine-tune or the released Potato)")
	venvs := os.Getenv("POTATO_TRAINING_VENVS")
	if venvs == "" {
		venvs = "/opt/potato-training"
	}
	python = filepath.Join(venvs, name, "bin", "python")
	b, err := exec.Command(python, "-c", code).Output()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no %s environment at %s (%v): scripts/install-deps installs it", name, python, err)
		}
		t.Skipf("no %s environment at %s (%v): scripts/install-deps installs it", name, python, err)
	}
	return python, strings.TrimSpace(string(b))
}
