package testproject

import (
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"potato-training/lib/rundir"
)

// Runs drives potato-dispatch for one test project and reads its runs.
type Runs struct {
	T testing.TB
	// Bin holds the built binaries; Dir is the project, Config its file.
	Bin, Dir, Config string
	// Env is added to the dispatch's environment.
	Env []string
}

// Result is how a potato-dispatch run ended.
type Result struct {
	Code   int
	ID     string
	Stderr string
}

// Command is one of the built binaries, Bin first on PATH.
func (r *Runs) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(r.Bin, name), args...)
	cmd.Env = append(append(os.Environ(), "PATH="+r.Bin+":"+os.Getenv("PATH")), r.Env...)
	return cmd
}

// Run is potato-dispatch run CONFIG ARGS..., waited for.
func (r *Runs) Run(args ...string) Result {
	r.T.Helper()
	code, out, errb := Exec(r.T, r.Command("potato-dispatch", append([]string{"run", r.Config}, args...)...))
	return Result{code, strings.TrimSpace(out), errb}
}

// Exec runs cmd and returns its exit status and what it wrote; a command
// that cannot be run at all fails the test.
func Exec(t T, cmd *exec.Cmd) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// Detach starts a run in the background and returns its id. A run the
// test leaves unfinished is cancelled when the test ends, so that its
// dispatch does not outlive it.
func (r *Runs) Detach(args ...string) string {
	r.T.Helper()
	res := r.Run(append(args, "--detach")...)
	if res.Code != 0 {
		r.T.Fatalf("detach: exit %d: %s", res.Code, res.Stderr)
	}
	r.T.Cleanup(func() {
		if i, err := r.Root().Read(res.ID); err == nil && !i.Finished {
			r.Command("potato-dispatch", "cancel", r.Config, res.ID).Run()
			for n := 0; n < 300; n++ {
				if i, err := r.Root().Read(res.ID); err != nil || i.Finished {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
	return res.ID
}

// Root is the project's training directory.
func (r *Runs) Root() *rundir.Root { return Root(r.Dir) }

// Info reads a run's record.
func (r *Runs) Info(id string) rundir.Info {
	r.T.Helper()
	i, err := r.Root().Read(id)
	if err != nil {
		r.T.Fatal(err)
	}
	return i
}

// File is a file of a run's directory, "" when it is not there.
func (r *Runs) File(id, name string) string {
	b, _ := os.ReadFile(filepath.Join(r.Root().RunDir(id), name))
	return string(b)
}

// Wait waits for a run's end, at most bound (a guard against a hang,
// never a speed target), and shows its log when it does not come.
func (r *Runs) Wait(id string, bound time.Duration) rundir.Info {
	r.T.Helper()
	deadline := time.Now().Add(bound)
	for {
		info := r.Info(id)
		if info.Finished {
			return info
		}
		if time.Now().After(deadline) {
			r.T.Fatalf("the run did not end within %s\nrun.log:\n%s\nagent.log:\n%s", bound, r.File(id, "run.log"), r.File(id, "agent.log"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StartServer starts bin/potato-server on cfg on a free port of
// 127.0.0.1, its output to out (nil: discarded), and returns it and its
// address once it accepts connections.
func StartServer(t T, bin, cfg string, out io.Writer) (*exec.Cmd, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	srv := exec.Command(filepath.Join(bin, "potato-server"), cfg, "--listen", addr)
	srv.Stdout, srv.Stderr = out, out
	if err := srv.Start(); err != nil {
		t.Fatal("starting potato-server: " + err.Error())
	}
	WaitFor(t, "potato-server on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return srv, addr
}

// StartServer starts potato-server on the project's config (StartServer)
// and returns its address; the server is killed when the test ends.
func (r *Runs) StartServer() string {
	r.T.Helper()
	srv, addr := StartServer(r.T, r.Bin, r.Config, nil)
	r.T.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	return addr
}
