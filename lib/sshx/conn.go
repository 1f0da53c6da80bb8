package sshx

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"potato-training/lib/shell"
)

const sshProgram = "ssh"

// maxControlPath is the longest control socket path that works. A unix
// socket path has at most 107 bytes, and the master first binds a name 17
// bytes longer (its path plus "." and 16 random characters) and renames it.
// A master given a longer path logs an error and runs on without a socket.
const maxControlPath = 107 - 17

// waitDelay bounds how long Wait waits for a child's output after it
// exited: a session's descriptors are lent to the master, which closes them
// soon after the session ends.
const waitDelay = 2 * time.Second

// Conn is one ssh ControlMaster connection to a target, reused by every
// command of a run, so the host sees one login.
type Conn struct {
	t      Target
	ctl    string // the master's control socket
	dir    string // the directory holding ctl
	ownDir bool   // dir was made by Dial and goes with Close

	master  *exec.Cmd
	stderr  *tailBuffer
	done    chan struct{} // closed once the master exited
	err     error         // why the master ended by itself; set before done closes
	closing atomic.Bool

	closeOnce sync.Once
	closeErr  error
}

// Dial starts the master, `ssh -M -S DIR/%C -o ControlPersist=no -N ...
// -- host`, in its own process group, and returns once it is logged in and
// answers on its control socket. When the master exits first, the error is a
// *ConnError made from its stderr ("ssh to HOST failed: Permission denied").
//
// dir holds the control socket; it should be a short private directory
// (0700), made if missing. The socket's name is ssh's %C, a 40-character
// hash, so the path stays short. When dir is "", or the path in it would
// pass the 107-byte limit of a unix socket, Dial makes a private directory
// under $XDG_RUNTIME_DIR or /tmp instead, the socket named "master" in it,
// and Close removes it.
//
// ctx bounds the login only; the connection lives until Close.
func Dial(ctx context.Context, t Target, dir string) (*Conn, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	c := &Conn{t: t, stderr: newTailBuffer(64 << 10), done: make(chan struct{})}
	if err := c.chooseControl(ctx, dir); err != nil {
		return nil, err
	}
	if err := c.clearStale(ctx); err != nil {
		c.removeDir()
		return nil, err
	}
	args := []string{"-M", "-S", c.ctl, "-o", "ControlPersist=no", "-N"}
	args = append(args, t.Args()...)
	args = append(args, "--", t.Host)
	m := exec.Command(sshProgram, args...)
	m.Stderr = c.stderr
	m.SysProcAttr = masterAttr()
	m.WaitDelay = waitDelay
	c.master = m

	started := make(chan error, 1)
	go func() {
		// On Linux the master gets SIGTERM when the thread that started it
		// ends (masterAttr); this thread stays for the master's lifetime.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := m.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		werr := m.Wait()
		if !c.closing.Load() {
			c.err = c.masterError(werr)
		}
		close(c.done)
	}()
	if err := <-started; err != nil {
		c.removeDir()
		return nil, fmt.Errorf("ssh to %s: %w", t.Host, err)
	}
	if err := c.waitReady(ctx); err != nil {
		c.closing.Store(true)
		c.kill()
		<-c.done
		c.removeDir()
		return nil, err
	}
	return c, nil
}

// chooseControl settles the control socket path, as ssh expands it.
func (c *Conn) chooseControl(ctx context.Context, dir string) error {
	// ssh expands % and ${} in a ControlPath; such a directory is not used.
	if dir != "" && !strings.ContainsAny(dir, "%$") {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return err
		}
		p, err := c.expandControlPath(ctx, abs)
		if err != nil {
			return err
		}
		if len(p) <= maxControlPath {
			c.dir, c.ctl = abs, p
			return nil
		}
	}
	for _, base := range []string{os.Getenv("XDG_RUNTIME_DIR"), "/tmp"} {
		if base == "" || !filepath.IsAbs(base) || strings.ContainsAny(base, "%$") {
			continue
		}
		d, err := os.MkdirTemp(base, "potato-ssh-")
		if err != nil {
			continue
		}
		// The directory is this connection's alone, so the socket needs
		// no name of ssh's (%C) and ssh -G, a process started and a
		// config read, is spared; the master reads the config itself,
		// and fails on a missing one as ssh -G would.
		if p := filepath.Join(d, "master"); len(p) <= maxControlPath && !strings.ContainsAny(p, "%$") {
			c.dir, c.ctl, c.ownDir = d, p, true
			return nil
		}
		p, err := c.expandControlPath(ctx, d)
		if err != nil {
			os.Remove(d)
			return err
		}
		if len(p) <= maxControlPath {
			c.dir, c.ctl, c.ownDir = d, p, true
			return nil
		}
		os.Remove(d)
	}
	return fmt.Errorf("ssh to %s: no directory gives a control socket path of at most %d bytes", c.t.Host, maxControlPath)
}

// expandControlPath asks ssh what dir/%C is for the target. It also reads
// the config files, so a missing -F file fails here.
func (c *Conn) expandControlPath(ctx context.Context, dir string) (string, error) {
	args := append([]string{"-G", "-S", dir + "/%C"}, c.t.Args()...)
	args = append(args, "--", c.t.Host)
	cmd := exec.CommandContext(ctx, sshProgram, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("ssh to %s: %w", c.t.Host, context.Cause(ctx))
		}
		return "", translate(c.t.Host, stderr.Bytes())
	}
	for _, l := range strings.Split(string(out), "\n") {
		if p, ok := strings.CutPrefix(l, "controlpath "); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("ssh to %s: ssh -G printed no controlpath", c.t.Host)
}

// clearStale removes a socket left by a master that was killed; a live
// master for the same target in the same directory is an error.
func (c *Conn) clearStale(ctx context.Context) error {
	if _, err := os.Lstat(c.ctl); err != nil {
		return nil
	}
	if c.control(ctx, "check") == nil {
		return &ConnError{Host: c.t.Host, Reason: ReasonInUse}
	}
	return os.Remove(c.ctl)
}

// waitReady waits for the control socket, then connects to it.
// It looks every 10 ms at most: every step of a run waits for the login,
// and a longer poll is time added to each.
func (c *Conn) waitReady(ctx context.Context) error {
	delay := 5 * time.Millisecond
	for {
		if fi, err := os.Stat(c.ctl); err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		// Messages of a master that will never make its socket.
		if e := c.stderr.Bytes(); bytes.Contains(e, []byte("disabling multiplexing")) || bytes.Contains(e, []byte("unix_listener")) {
			return translate(c.t.Host, e)
		}
		select {
		case <-c.done:
			return c.err
		case <-ctx.Done():
			return fmt.Errorf("ssh to %s: %w", c.t.Host, context.Cause(ctx))
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Millisecond)
	}
	// The master renames its socket into place once it listens, so a
	// connection to it confirms the master, at a fraction of the cost of
	// starting `ssh -O check` (a run's every step waits for Dial).
	var d net.Dialer
	s, err := d.DialContext(ctx, "unix", c.ctl)
	if err != nil {
		select {
		case <-c.done:
			return c.err
		default:
			return fmt.Errorf("ssh to %s: the control socket does not answer: %w", c.t.Host, err)
		}
	}
	s.Close()
	return nil
}

// control runs `ssh -S ctl -O op ... -- host`.
func (c *Conn) control(ctx context.Context, op string) error {
	args := append([]string{"-S", c.ctl, "-O", op}, c.t.Args()...)
	args = append(args, "--", c.t.Host)
	cmd := exec.CommandContext(ctx, sshProgram, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("ssh to %s: %w", c.t.Host, context.Cause(ctx))
		}
		return translate(c.t.Host, stderr.Bytes())
	}
	return nil
}

func (c *Conn) masterError(werr error) error {
	if werr == nil {
		return &ConnError{Host: c.t.Host, Reason: "the connection ended"}
	}
	var ee *exec.ExitError
	if errors.As(werr, &ee) && ee.ExitCode() == 255 || len(c.stderr.Bytes()) > 0 {
		return translate(c.t.Host, c.stderr.Bytes())
	}
	return fmt.Errorf("ssh to %s: %w", c.t.Host, werr)
}

func (c *Conn) kill() { c.signal(syscall.SIGKILL) }

// signal signals the master's process group.
func (c *Conn) signal(sig syscall.Signal) {
	if p := c.master.Process; p != nil {
		syscall.Kill(-p.Pid, sig)
	}
}

func (c *Conn) removeDir() error {
	if c.ownDir {
		return os.RemoveAll(c.dir)
	}
	if err := os.Remove(c.ctl); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// ControlPath is the master's control socket.
func (c *Conn) ControlPath() string { return c.ctl }

// Done is closed when the master has exited, by Close or by itself.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why the master ended by itself, a *ConnError such as "ssh to
// HOST failed: Timeout, server HOST not responding"; nil while it runs and
// after Close.
func (c *Conn) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// sessionArgs are the options of a session through the master. With
// ControlMaster=no a session never becomes a master itself, whatever the
// user's config says; when the master is gone, ssh logs in anew.
func (c *Conn) sessionArgs(extra []string) []string {
	a := []string{"-S", c.ctl, "-o", "ControlMaster=no"}
	a = append(a, c.t.Args()...)
	return append(a, extra...)
}

// Command returns, unstarted, `ssh -S ctl ... [extra] -- host remote`: the
// remote command through the master, in its own process group, killed as a
// group when ctx is done. remote is one string for the remote login shell;
// quote its words with shell.Quote.
//
// extra adds ssh options, such as -R /tmp/x.sock:/local/y.sock for a
// reverse forward of a unix socket. The master sets the forward up before
// the command starts and, with ExitOnForwardFailure, a forward the server
// refuses fails the command with exit status 255 ("Error: remote port
// forwarding failed for listen path ..."); the master itself carries on.
// The forward belongs to the master, not to the session: it outlives the
// command and lasts until Close (or `ssh -S ctl -O cancel -R ...`).
func (c *Conn) Command(ctx context.Context, remote string, extra ...string) *exec.Cmd {
	args := append(c.sessionArgs(extra), "--", c.t.Host)
	if remote != "" {
		args = append(args, remote)
	}
	cmd := exec.CommandContext(ctx, sshProgram, args...)
	inGroup(cmd)
	return cmd
}

// inGroup starts cmd in its own process group and kills the group when its
// context is done.
func inGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
}

// Run runs remote through the master with stdin (nil for none) and returns
// its output. A remote exit status other than 0 is a *RemoteError, ssh's own
// failure a *ConnError.
func (c *Conn) Run(ctx context.Context, remote string, stdin io.Reader) (stdout, stderr []byte, err error) {
	cmd := c.Command(ctx, remote)
	cmd.Stdin = stdin
	stdout, stderr, err = capture(ctx, cmd)
	return stdout, stderr, c.CommandError(ctx, remote, err, stderr)
}

// capture runs cmd and collects its output through pipes read here. A
// session lends its descriptors to the master, which keeps them while the
// remote command lives, so once ctx has ended the session nothing more is
// waited for; otherwise the output is read to its end (within waitDelay).
func capture(ctx context.Context, cmd *exec.Cmd) (stdout, stderr []byte, err error) {
	var (
		bufs          [2]bytes.Buffer
		reads, writes [2]*os.File
	)
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	for i := range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(reads[:])
			closeAll(writes[:])
			return nil, nil, err
		}
		reads[i], writes[i] = r, w
	}
	cmd.Stdout, cmd.Stderr = writes[0], writes[1]
	err = cmd.Start()
	closeAll(writes[:])
	if err != nil {
		closeAll(reads[:])
		return nil, nil, err
	}
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			io.Copy(&bufs[i], reads[i])
		}()
	}
	read := make(chan struct{})
	go func() {
		wg.Wait()
		close(read)
	}()
	err = cmd.Wait()
	if ctx.Err() == nil {
		select {
		case <-read:
		case <-time.After(waitDelay):
		}
	}
	closeAll(reads[:])
	<-read // a close ends the readers
	return bufs[0].Bytes(), bufs[1].Bytes(), err
}

// CommandError classifies the error of a finished Command: nil stays nil,
// a done ctx gives ctx's error, exit status 255 with a message of ssh's own
// (or a master that has died) a *ConnError, any other status a
// *RemoteError. A remote command that exits 255 by itself, through a live
// master and without ssh's messages, is a *RemoteError too.
func (c *Conn) CommandError(ctx context.Context, remote string, err error, stderr []byte) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("ssh to %s: %w", c.t.Host, context.Cause(ctx))
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() < 0 {
		return fmt.Errorf("ssh to %s: %w", c.t.Host, err)
	}
	if ee.ExitCode() == 255 {
		if merr := c.Err(); merr != nil {
			return merr
		}
		if isSSHFailure(stderr) {
			return translate(c.t.Host, stderr)
		}
	}
	return &RemoteError{Host: c.t.Host, Command: remote, ExitCode: ee.ExitCode(), Stderr: string(stderr)}
}

// Close ends the master (`ssh -O exit`), which ends its sessions and
// forwards, reaps it, and removes the control socket, and the directory
// when Dial made it. Closing twice is harmless.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closing.Store(true)
		select {
		case <-c.done:
		default:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := c.control(ctx, "exit")
			cancel()
			wait := 5 * time.Second
			if err != nil { // the socket is gone or dead: no use waiting
				c.signal(syscall.SIGTERM)
				wait = time.Second
			}
			select {
			case <-c.done:
			case <-time.After(wait):
				c.kill()
				<-c.done
			}
		}
		c.closeErr = c.removeDir()
	})
	return c.closeErr
}

// Upload copies a local file to remotePath with mode: it is written under
// a temporary name and renamed into place, so nobody sees half a file; a
// failed upload removes its temporary file. The remote directory must
// exist. A leading ~/ means the remote home.
//
// With how RsyncAuto, rsync copies the file where both ends have it (one
// more command asks the host); otherwise, and with RsyncNever, the host's
// sh writes remotePath.tmp.<random> with cat, then chmod and mv.
func (c *Conn) Upload(ctx context.Context, localPath, remotePath string, mode os.FileMode, how Rsync) error {
	f, err := os.Open(localPath)
	if err != nil {
		return err
	}
	defer f.Close()
	if how == RsyncAlways || how == RsyncAuto && localRsync() {
		has := how == RsyncAlways
		if !has {
			if has, err = c.hostRsync(ctx); err != nil {
				return fmt.Errorf("upload of %s to %s:%s: %w", localPath, c.t.Host, remotePath, err)
			}
		}
		if has {
			if err := c.uploadRsync(ctx, localPath, remotePath, mode); err != nil {
				return fmt.Errorf("upload of %s to %s:%s: %w", localPath, c.t.Host, remotePath, err)
			}
			return nil
		}
	}
	dst := homeRelative(remotePath)
	tmp := shell.Quote(dst + ".tmp." + randomHex(6))
	script := fmt.Sprintf("umask 077 && cat > %[1]s && chmod %[2]o %[1]s && mv -f %[1]s %[3]s || { rc=$?; rm -f %[1]s; exit $rc; }",
		tmp, mode.Perm(), shell.Quote(dst))
	// sh -c, so the script means the same under any login shell.
	if _, _, err := c.Run(ctx, "sh -c "+shell.Quote(script), f); err != nil {
		return fmt.Errorf("upload of %s to %s:%s: %w", localPath, c.t.Host, remotePath, err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.b)
}
