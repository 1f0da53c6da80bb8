package sshx

// These tests log in to the real sshd that scripts/test-sshd starts on
// 127.0.0.1 (users potatotest, with a key, and potatopw, with only a
// password). Every context below is a guard against a hang, never a timing
// assertion.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/lib/shell"
)

func TestMain(m *testing.M) { os.Exit(testcli.Main(m)) }

// sshdDir is the state directory of the test sshd (testcli.SSHD): the
// tests skip under -short, as every test that logs in to it does, and
// where it is not running, except under CI, where its absence fails them.
func sshdDir(t *testing.T) string { return testcli.SSHD(t) }

// testTarget logs in as potatotest through the test sshd's ssh_config.
func testTarget(t *testing.T) Target {
	t.Helper()
	return Target{Host: "potato-test", SSHConfig: filepath.Join(sshdDir(t), "ssh_config")}
}

func guard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, tg Target, dir string) *Conn {
	t.Helper()
	c, err := Dial(guard(t), tg, dir)
	if err != nil {
		t.Fatalf("Dial(%s): %v (is scripts/test-sshd running?)", tg.Host, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func run(t *testing.T, c *Conn, remote string) string {
	t.Helper()
	out, stderr, err := c.Run(guard(t), remote, nil)
	if err != nil {
		t.Fatalf("Run(%q): %v\n%s", remote, err, stderr)
	}
	return string(out)
}

// remoteDir makes a fresh directory in the remote home, removed at the end;
// its name has a space and a quote, to exercise the quoting.
func remoteDir(t *testing.T, c *Conn) string {
	t.Helper()
	top := "potato-sshx-" + randomHex(4)
	dir := top + "/it's here"
	run(t, c, "mkdir -p "+shell.Quote(dir))
	t.Cleanup(func() { c.Run(context.Background(), "rm -rf "+shell.Quote(top), nil) })
	return dir
}

func TestDialRun(t *testing.T) {
	t.Parallel()
	c := dial(t, testTarget(t), "")
	if n := len(c.ControlPath()); n > maxControlPath {
		t.Errorf("control path %q has %d bytes", c.ControlPath(), n)
	}
	if fi, err := os.Stat(filepath.Dir(c.ControlPath())); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("control directory: %v, %v; want mode 0700", fi.Mode(), err)
	}

	if got := run(t, c, "echo hi"); got != "hi\n" {
		t.Errorf("echo hi: %q", got)
	}
	out, _, err := c.Run(guard(t), "cat; echo", strings.NewReader("from stdin"))
	if err != nil || string(out) != "from stdin\n" {
		t.Errorf("cat: %q, %v", out, err)
	}

	out, _, err = c.Run(guard(t), "echo partial; echo oops >&2; exit 3", nil)
	var re *RemoteError
	if !errors.As(err, &re) {
		t.Fatalf("exit 3: %v (%T), want a *RemoteError", err, err)
	}
	if re.ExitCode != 3 || re.Host != "potato-test" || re.Stderr != "oops\n" || string(out) != "partial\n" {
		t.Errorf("exit 3: %+v, stdout %q", re, out)
	}

	// ssh itself exits 255 on its failures; a remote command through a live
	// master that exits 255 is still the command's status.
	_, _, err = c.Run(guard(t), "exit 255", nil)
	if !errors.As(err, &re) || re.ExitCode != 255 {
		t.Errorf("exit 255: %v (%T), want a *RemoteError with status 255", err, err)
	}
}

func TestRunContextEnds(t *testing.T) {
	t.Parallel()
	c := dial(t, testTarget(t), "")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _, err := c.Run(ctx, "sleep 10", nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run past its context: %v, want context.DeadlineExceeded", err)
	}
	if got := run(t, c, "echo still"); got != "still\n" {
		t.Errorf("the master after a killed session: %q", got)
	}
}

// TestBatchModePasswordOnly: potatopw has only a password; under BatchMode
// the login fails at once with SPEC F1's reason instead of prompting.
func TestBatchModePasswordOnly(t *testing.T) {
	t.Parallel()
	tg := Target{Host: "potato-test-pw", SSHConfig: filepath.Join(sshdDir(t), "ssh_config")}
	c, err := Dial(guard(t), tg, "")
	if err == nil {
		c.Close()
		t.Fatal("Dial as potatopw worked; want Permission denied")
	}
	if got, want := err.Error(), "ssh to potato-test-pw failed: Permission denied"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	var ce *ConnError
	if !errors.As(err, &ce) || ce.Reason != ReasonPermissionDenied {
		t.Errorf("%v (%T), want a *ConnError", err, err)
	}
}

func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	tg := Target{Host: "127.0.0.1", Port: port, SSHConfig: filepath.Join(sshdDir(t), "ssh_config")}
	_, err = Dial(guard(t), tg, "")
	if err == nil || err.Error() != "ssh to 127.0.0.1 failed: Connection refused" {
		t.Errorf("Dial to a closed port: %v", err)
	}
}

func TestDialRefusesOptionHost(t *testing.T) {
	_, err := Dial(guard(t), Target{Host: "-oProxyCommand=touch /tmp/pwned"}, "")
	if err == nil || !strings.Contains(err.Error(), `starts with "-"`) {
		t.Errorf("Dial: %v", err)
	}
}

// TestDialDir: a short directory given by the caller holds the socket and
// stays after Close; one too deep for a unix socket is passed over.
func TestDialDir(t *testing.T) {
	t.Parallel()
	short, err := os.MkdirTemp("/tmp", "sshx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	c := dial(t, testTarget(t), short)
	if filepath.Dir(c.ControlPath()) != short {
		t.Errorf("control path %q is not in %q", c.ControlPath(), short)
	}
	run(t, c, "true")
	c.Close()
	if _, err := os.Stat(short); err != nil {
		t.Errorf("the caller's directory went with Close: %v", err)
	}
	if _, err := os.Stat(c.ControlPath()); err == nil {
		t.Errorf("control socket %s is still there", c.ControlPath())
	}

	deep := filepath.Join(t.TempDir(), strings.Repeat("d", 60))
	c = dial(t, testTarget(t), deep)
	if strings.HasPrefix(c.ControlPath(), deep) || len(c.ControlPath()) > maxControlPath {
		t.Errorf("control path %q: want a short one elsewhere", c.ControlPath())
	}
	run(t, c, "true")
}

// procsWith counts the processes whose command line holds s.
func procsWith(t *testing.T, s string) int {
	t.Helper()
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil || len(cmdlines) == 0 {
		t.Skip("no /proc to look for processes in")
	}
	self := fmt.Sprintf("/proc/%d/", os.Getpid())
	n := 0
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err == nil && !strings.HasPrefix(f, self) && bytes.Contains(b, []byte(s)) {
			n++
		}
	}
	return n
}

func TestCloseEndsMaster(t *testing.T) {
	t.Parallel()
	c, err := Dial(guard(t), testTarget(t), "")
	if err != nil {
		t.Fatal(err)
	}
	ctl := c.ControlPath()
	if procsWith(t, ctl) == 0 {
		t.Fatalf("no process holds %s while connected", ctl)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case <-c.Done():
	default:
		t.Error("Done is not closed after Close")
	}
	if n := procsWith(t, ctl); n != 0 {
		t.Errorf("%d processes still hold %s after Close", n, ctl)
	}
	if c.Err() != nil {
		t.Errorf("Err after Close: %v", c.Err())
	}
	if _, err := os.Stat(filepath.Dir(ctl)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Dial's directory is still there: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestCloseWithoutSocket: a master whose control socket was removed
// cannot be asked to exit; Close must still end it.
func TestCloseWithoutSocket(t *testing.T) {
	t.Parallel()
	c, err := Dial(guard(t), testTarget(t), "")
	if err != nil {
		t.Fatal(err)
	}
	ctl := c.ControlPath()
	if err := os.Remove(ctl); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n := procsWith(t, ctl); n != 0 {
		t.Errorf("%d processes still hold %s after Close", n, ctl)
	}
}

// TestHelperProcess is the remote end of TestReverseForward: the test
// binary, uploaded to the host, talks to the forwarded socket.
func TestHelperProcess(t *testing.T) {
	if os.Getenv("SSHX_HELPER") != "unix-client" {
		return
	}
	conn, err := net.Dial("unix", os.Getenv("SSHX_SOCK"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintln(conn, "ping")
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Print(reply)
	os.Exit(0)
}

// TestReverseForward: -R remote.sock:local.sock on a session through the
// master reaches a local unix-socket server from the host, and the remote
// socket has mode 0600 (the server's StreamLocalBindMask).
func TestReverseForward(t *testing.T) {
	t.Parallel()
	c := dial(t, testTarget(t), "")
	rd := remoteDir(t, c)

	local := filepath.Join(t.TempDir(), "echo.sock")
	ln, err := net.Listen("unix", local)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				line, _ := bufio.NewReader(conn).ReadString('\n')
				fmt.Fprintf(conn, "pong %s", line)
			}()
		}
	}()

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := rd + "/sshx.test"
	if err := c.Upload(guard(t), exe, helper, 0o755, RsyncAuto); err != nil {
		t.Fatal(err)
	}
	sock := "/tmp/potato-sshx-" + randomHex(4) + ".sock"
	defer c.Run(context.Background(), "rm -f "+sock, nil)

	remote := fmt.Sprintf("stat -c %%a %s && env SSHX_HELPER=unix-client SSHX_SOCK=%s %s -test.run=%s",
		sock, sock, shell.Quote("./"+helper), shell.Quote("^TestHelperProcess$"))
	cmd := c.Command(guard(t), remote, "-R", sock+":"+local)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, c.CommandError(guard(t), remote, err, stderr.Bytes()), stderr.Bytes())
	}
	if got, want := string(out), "600\npong ping\n"; got != want {
		t.Errorf("remote side printed %q, want %q", got, want)
	}
}

// TestForwardRefused: a forward the server refuses fails that command as
// ssh's own failure; the master stays up.
func TestForwardRefused(t *testing.T) {
	t.Parallel()
	c := dial(t, testTarget(t), "")
	local := filepath.Join(t.TempDir(), "x.sock")
	ln, err := net.Listen("unix", local)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	remote := "echo should not run"
	cmd := c.Command(guard(t), remote, "-R", "/root/potato-sshx-nope.sock:"+local)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	err = c.CommandError(guard(t), remote, err, stderr.Bytes())
	var ce *ConnError
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "remote port forwarding failed") {
		t.Errorf("refused forward: %v (%T), want a *ConnError", err, err)
	}
	if len(out) != 0 {
		t.Errorf("the command ran: %q", out)
	}
	if got := run(t, c, "echo up"); got != "up\n" {
		t.Errorf("master after a refused forward: %q", got)
	}
}

// TestUpload: by rsync and by sh and cat, the same contract.
func TestUpload(t *testing.T) {
	for _, how := range []Rsync{RsyncNever, RsyncAlways} {
		t.Run(methodName(how), func(t *testing.T) {
			t.Parallel()
			if how == RsyncAlways {
				needRsync(t)
			}
			testUpload(t, how)
		})
	}
}

func methodName(how Rsync) string {
	if how == RsyncAlways {
		return "rsync"
	}
	return "tar"
}

// needRsync skips where this machine has no rsync (the test host is this
// machine), except under CI, which installs it (scripts/install-deps) and
// where a missing rsync fails the test.
func needRsync(t *testing.T) {
	t.Helper()
	if !localRsync() {
		if os.Getenv("CI") != "" {
			t.Fatal("no rsync on PATH: .ci/run installs it with scripts/install-deps")
		}
		t.Skip("no rsync on PATH: scripts/install-deps installs it")
	}
}

func testUpload(t *testing.T, how Rsync) {
	c := dial(t, testTarget(t), "")
	rd := remoteDir(t, c)
	local := filepath.Join(t.TempDir(), "model.bin")
	content := []byte("weights\x00\x01\n'quoted' $HOME\n")
	if err := os.WriteFile(local, content, 0o600); err != nil {
		t.Fatal(err)
	}
	dst := rd + "/it's up.bin"
	if err := c.Upload(guard(t), local, dst, 0o640, how); err != nil {
		t.Fatal(err)
	}
	if got := run(t, c, "cat "+shell.Quote(dst)); got != string(content) {
		t.Errorf("remote content %q, want %q", got, content)
	}
	if got := run(t, c, "stat -c %a "+shell.Quote(dst)); got != "640\n" {
		t.Errorf("remote mode %q, want 640", got)
	}
	// Again over the same name, through ~/.
	if err := c.Upload(guard(t), local, "~/"+dst, 0o600, how); err != nil {
		t.Fatal(err)
	}
	if got := run(t, c, "stat -c %a "+shell.Quote(dst)); got != "600\n" {
		t.Errorf("remote mode after the second upload %q, want 600", got)
	}
	if got := run(t, c, "ls -A "+shell.Quote(rd)); got != "it's up.bin\n" {
		t.Errorf("remote directory holds %q; want only the file, no temporary", got)
	}

	err := c.Upload(guard(t), local, rd+"/missing/x.bin", 0o644, how)
	var re *RemoteError
	if !errors.As(err, &re) {
		t.Errorf("upload into a missing directory: %v (%T), want a *RemoteError", err, err)
	}
	if err := c.Upload(guard(t), filepath.Join(t.TempDir(), "absent"), rd+"/y", 0o644, how); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("upload of a missing local file: %v", err)
	}
}

// remoteAgent copies the real potato-agent, the far side of Fetch, into a
// directory the remote user can read.
func remoteAgent(t *testing.T) string {
	t.Helper()
	return testcli.CopyBinary(t, "potato-agent", testcli.SharedDir(t, 0o755))
}

// sshProcsWith counts this machine's ssh clients whose command line holds
// s; on loopback the remote user's processes hold it too, and are left out.
func sshProcsWith(t *testing.T, s string) int {
	t.Helper()
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	n := 0
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err == nil && bytes.HasPrefix(b, []byte("ssh\x00")) && bytes.Contains(b, []byte(s)) {
			n++
		}
	}
	return n
}

// Not parallel: it lowers directMin, so the 1.5 MB file goes on a session
// of its own, straight into its local file. The same checks hold for the
// tar stream and for rsync.
func TestFetch(t *testing.T) {
	defer func(d int64) { directMin = d }(directMin)
	directMin = 1 << 20
	for _, how := range []Rsync{RsyncNever, RsyncAlways} {
		t.Run(methodName(how), func(t *testing.T) {
			if how == RsyncAlways {
				needRsync(t)
			}
			testFetch(t, how)
		})
	}
}

func testFetch(t *testing.T, how Rsync) {
	agent := shell.Quote(remoteAgent(t))
	c := dial(t, testTarget(t), "")
	rd := remoteDir(t, c)
	q := shell.Quote(rd)
	run(t, c, "cd "+q+" && mkdir -p 'sub dir/deep' && head -c 1500000 /dev/urandom > a.bin && printf hi > \"sub dir/it's.txt\""+
		" && head -c 500000 /dev/urandom > 'sub dir/deep/c.bin' && head -c 2200000 /dev/urandom > 'big file.bin'"+
		" && ln -s /etc/passwd link && mkfifo fifo")
	a := run(t, c, "cat "+shell.Quote(rd+"/a.bin"))
	cb := run(t, c, "cat "+shell.Quote(rd+"/sub dir/deep/c.bin"))

	local := filepath.Join(t.TempDir(), "art ifacts")
	var calls [][2]int64
	err := c.Fetch(guard(t), agent, "~/"+rd, local, FetchOptions{
		Rsync:        how,
		MaxSizeMB:    2,
		StallTimeout: 20 * time.Second,
		Progress:     func(done, total int64) { calls = append(calls, [2]int64{done, total}) },
	})
	if err != nil {
		t.Fatal(err)
	}
	const want = 1500000 + 2 + 500000
	if len(calls) == 0 {
		t.Fatal("no progress reported")
	}
	for i, cl := range calls {
		if cl[1] != want || cl[0] > want || i > 0 && cl[0] < calls[i-1][0] {
			t.Errorf("progress %v (all: %v); want done rising to total %d", cl, calls, want)
			break
		}
	}
	if last := calls[len(calls)-1]; last != [2]int64{want, want} {
		t.Errorf("last progress %v, want [%d %d]", last, want, want)
	}
	if got, err := os.ReadFile(filepath.Join(local, "a.bin")); err != nil || !bytes.Equal(got, []byte(a)) {
		t.Errorf("a.bin: %d bytes, %v; want the remote file", len(got), err)
	}
	if got, err := os.ReadFile(filepath.Join(local, "sub dir", "deep", "c.bin")); err != nil || !bytes.Equal(got, []byte(cb)) {
		t.Errorf("sub dir/deep/c.bin: %d bytes, %v; want the remote file", len(got), err)
	}
	if got, err := os.ReadFile(filepath.Join(local, "sub dir", "it's.txt")); err != nil || string(got) != "hi" {
		t.Errorf("sub dir/it's.txt: %q, %v", got, err)
	}
	for _, n := range []string{"big file.bin", "link", "fifo"} {
		if _, err := os.Lstat(filepath.Join(local, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was copied: %v", n, err)
		}
	}
	if ents, _ := os.ReadDir(local); len(ents) != 2 {
		t.Errorf("local directory holds %d entries, want a.bin and sub dir", len(ents))
	}

	large, err := c.ListLarge(guard(t), "~/"+rd, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"big file.bin"}; !reflect.DeepEqual(large, want) {
		t.Errorf("ListLarge = %q, want %q", large, want)
	}
	if large, err := c.ListLarge(guard(t), rd, 3); err != nil || len(large) != 0 {
		t.Errorf("ListLarge over 3 MB = %q, %v; want none", large, err)
	}

	err = c.Fetch(guard(t), agent, rd+"/missing", t.TempDir(), FetchOptions{Rsync: how})
	var re *RemoteError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "no such file or directory") {
		t.Errorf("fetch of a missing directory: %v, want a *RemoteError naming the missing directory", err)
	}
}

// TestFetchStall: two faults hard to cause for real on loopback, made
// with a wrapper around the remote agent that sends nothing for 6 s,
// either before the tar stream or before a file sent apart. The
// watchdog, at 2 s, must stop the copy with SPEC F7's message, leave no
// ssh client of it behind, and leave no file that looks whole but is not.
// Not parallel: it lowers directMin.
func TestFetchStall(t *testing.T) {
	defer func(d int64) { directMin = d }(directMin)
	directMin = 1 << 20
	agent := remoteAgent(t)
	c := dial(t, testTarget(t), "")
	rd := remoteDir(t, c)
	run(t, c, "cd "+shell.Quote(rd)+" && printf data > a.txt && head -c 1500000 /dev/zero > model.bin")
	wrapper := filepath.Join(filepath.Dir(agent), "slow-"+randomHex(4))
	os.WriteFile(wrapper, []byte("#!/bin/sh\ncase \" $* \" in *\" --file \"*) sleep 6 ;; esac\nexec "+agent+" \"$@\"\n"), 0o755)
	for _, tc := range []struct {
		name, prefix, agent string
		whole               []string // the files that arrive before the stall
	}{
		{"before the stream", "sleep 6; ", shell.Quote(agent), nil},
		{"before a file sent apart", "", shell.Quote(wrapper), []string{"a.txt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local := filepath.Join(t.TempDir(), "stalled")
			marker := "potato-stall-" + randomHex(4)
			err := c.Fetch(guard(t), tc.agent, rd, local, FetchOptions{
				Rsync:        RsyncNever,
				StallTimeout: 2 * time.Second,
				Prefix:       ": " + marker + "; " + tc.prefix,
				Progress:     func(done, total int64) {},
			})
			wantStalled(t, err, marker)
			var names []string
			filepath.WalkDir(local, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					names = append(names, d.Name())
				}
				return nil
			})
			if !reflect.DeepEqual(names, tc.whole) {
				t.Errorf("local files %q, want %q", names, tc.whole)
			}
			if got := run(t, c, "echo up"); got != "up\n" {
				t.Errorf("master after the stopped copy: %q", got)
			}
		})
	}
}

// TestFetchRsyncStall: rsync's side of F7. A wrapper holds the remote
// rsync for 6 s, the plan before it passes; the watchdog, at 2 s, stops
// the copy with F7's message, leaves no ssh client of it and no file that
// looks whole: what was cut is only under .potato-partial/.
func TestFetchRsyncStall(t *testing.T) {
	needRsync(t)
	t.Parallel()
	agent := remoteAgent(t)
	c := dial(t, testTarget(t), "")
	rd := remoteDir(t, c)
	run(t, c, "cd "+shell.Quote(rd)+" && printf data > a.txt")
	wrapper := filepath.Join(filepath.Dir(agent), "slow-rsync-"+randomHex(4))
	os.WriteFile(wrapper, []byte("#!/bin/sh\ncase \" $* \" in *\" --server \"*) sleep 6 ;; esac\nexec \"$@\"\n"), 0o755)
	local := filepath.Join(t.TempDir(), "stalled")
	marker := "potato-stall-" + randomHex(4)
	err := c.Fetch(guard(t), shell.Quote(agent), rd, local, FetchOptions{
		Rsync:        RsyncAlways,
		StallTimeout: 2 * time.Second,
		Prefix:       ": " + marker + "; " + shell.Quote(wrapper) + " ",
		Progress:     func(done, total int64) {},
	})
	wantStalled(t, err, marker)
	if names := localFiles(t, local); len(names) != 0 {
		t.Errorf("local files %q, want none", names)
	}
	if got := run(t, c, "echo up"); got != "up\n" {
		t.Errorf("master after the stopped copy: %q", got)
	}
}

// wantStalled checks that err is F7's, after 2 s of silence, and that no
// ssh client of the stopped copy, whose command line holds marker, is
// left.
func wantStalled(t *testing.T, err error, marker string) {
	t.Helper()
	var se *StallError
	if !errors.As(err, &se) {
		t.Fatalf("Fetch: %v (%T), want a *StallError", err, err)
	}
	if got, want := err.Error(), "The copy from potato-test sent nothing for 2 s"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if n := sshProcsWith(t, marker); n != 0 {
		t.Errorf("%d ssh clients of the stopped copy are left", n)
	}
}

// localFiles names the regular files under dir, relative to it, leaving
// out rsync's partial directories.
func localFiles(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == PartialDir {
			return filepath.SkipDir
		}
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			names = append(names, rel)
		}
		return nil
	})
	return names
}

// TestFetchResume: the link drops in the middle of a large file (its ssh
// client is killed once a third has arrived), copied by the tar stream
// (the first copy's way) or by rsync; the next Fetch into the same
// directory takes rsync, completes the file, with the same content, and
// the bytes that came over the connection the second time are well under
// the file's size: rsync resumed from the part kept in .potato-partial/.
func TestFetchResume(t *testing.T) {
	needRsync(t)
	for _, first := range []Rsync{RsyncAuto, RsyncAlways} {
		t.Run(methodName(first), func(t *testing.T) {
			t.Parallel()
			testFetchResume(t, first)
		})
	}
}

func testFetchResume(t *testing.T, first Rsync) {
	const size = 64 << 20
	agent := shell.Quote(remoteAgent(t))
	c := dial(t, testTarget(t), "")
	rd := remoteDir(t, c)
	run(t, c, "cd "+shell.Quote(rd)+" && head -c "+fmt.Sprint(size)+" /dev/urandom > model.bin && printf hi > b.txt")
	sum := strings.Fields(run(t, c, "sha256sum "+shell.Quote(rd+"/model.bin")))[0]
	local := filepath.Join(t.TempDir(), "artifacts")
	marker := "potato-drop-" + randomHex(4)

	// The dropped link: the copy's ssh client is killed once rsync's
	// temporary file holds a third of the model.
	stop := make(chan struct{})
	dropped := make(chan bool, 1)
	go func() {
		for {
			select {
			case <-stop:
				dropped <- false
				return
			case <-time.After(2 * time.Millisecond):
			}
			tmps, _ := filepath.Glob(filepath.Join(local, ".model.bin.*"))
			for _, p := range tmps {
				if st, err := os.Stat(p); err == nil && st.Size() >= size/3 {
					killSSH(t, marker)
					dropped <- true
					return
				}
			}
		}
	}()
	var used []string
	using := func(m string) { used = append(used, m) }
	err := c.Fetch(guard(t), agent, rd, local, FetchOptions{Rsync: first, Prefix: ": " + marker + "; ", Using: using})
	close(stop)
	if !<-dropped {
		t.Fatalf("the copy ended before the link could be dropped: %v", err)
	}
	if err == nil {
		t.Fatal("Fetch with its link dropped: no error")
	}
	t.Logf("first copy: %v", err)
	part, err := os.Stat(filepath.Join(local, PartialDir, "model.bin"))
	if err != nil || part.Size() == 0 || part.Size() >= size {
		t.Fatalf("the part kept: %v, %v; want a partial model.bin in %s", part, err, PartialDir)
	}
	if _, err := os.Stat(filepath.Join(local, "model.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("model.bin is there after a cut copy: %v", err)
	}

	var wire int64 = -1
	if err := c.Fetch(guard(t), agent, rd, local, FetchOptions{Using: using, Wire: func(n int64) { wire = n }}); err != nil {
		t.Fatal(err)
	}
	if want := []string{map[Rsync]string{RsyncAuto: "tar stream", RsyncAlways: "rsync"}[first], "rsync"}; !reflect.DeepEqual(used, want) {
		t.Errorf("methods %q, want %q", used, want)
	}
	got, err := os.ReadFile(filepath.Join(local, "model.bin"))
	if err != nil || fmt.Sprintf("%x", sha256.Sum256(got)) != sum {
		t.Fatalf("model.bin after the resumed copy: %d bytes, %v; want the remote file", len(got), err)
	}
	remaining := size - part.Size()
	t.Logf("kept %d bytes; the resumed copy received %d bytes for the %d missing (%.3f)", part.Size(), wire, remaining, float64(wire)/float64(remaining))
	if wire < 0 || wire > size-part.Size()/2 {
		t.Errorf("the resumed copy received %d bytes of a %d-byte file whose first %d were kept: it did not resume", wire, size, part.Size())
	}
	if _, err := os.Stat(filepath.Join(local, PartialDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is left after a complete copy: %v", PartialDir, err)
	}
}

// killSSH kills this machine's ssh clients whose command line holds s.
func killSSH(t *testing.T, s string) {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err == nil && bytes.HasPrefix(b, []byte("ssh\x00")) && bytes.Contains(b, []byte(s)) {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}
