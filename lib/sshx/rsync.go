package sshx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const rsyncProgram = "rsync"

// RsyncOptions tunes RsyncFrom.
type RsyncOptions struct {
	// MaxSizeMB skips files over this many MiB (rsync --max-size); they
	// stay on the host, and ListLarge names them. 0 copies every file.
	MaxSizeMB int

	// Progress, when set, is called as bytes arrive, with the bytes copied
	// so far and the total to copy: the sizes of the remote regular files
	// that are not skipped, measured before the copy with GNU find. Where
	// that fails, total is estimated from rsync's percentage (which also
	// counts skipped files), and is -1 until rsync has one. A copy that
	// succeeds ends with a call where done equals total.
	Progress func(done, total int64)

	// StallTimeout stops the copy with a *StallError when no bytes have
	// arrived for this long; 0 waits for ever.
	StallTimeout time.Duration

	// RsyncPath replaces the remote rsync command (--rsync-path), e.g. to
	// apply a backend's env to it.
	RsyncPath string
}

// RsyncFrom copies the remote directory's contents into localDir:
//
//	rsync -a --no-owner --no-group --no-devices --no-specials -s --whole-file
//	      --info=progress2 --no-inc-recursive [--max-size=BYTES]
//	      -e "ssh -S ctl ..." -- host:remoteDir/ localDir/
//
// through the master. -s hands the paths to the remote rsync as they are,
// so they need no quoting; a leading ~/ means the remote home. Owners,
// groups, devices and special files are not copied: the files belong to
// whoever copies them. There is no --partial: rsync would keep the part of
// an interrupted file under the file's own name, a truncated model that
// looks whole, and with --whole-file a later copy gains nothing from it.
// Stopped by ctx or by the stall watchdog, rsync gets SIGTERM, on which it
// removes the file it was writing (SIGKILL follows after 3 s).
//
// rsync's exit status 24 (files vanished during the copy) counts as
// success. ssh's own failure is a *ConnError.
func (c *Conn) RsyncFrom(ctx context.Context, remoteDir, localDir string, opt RsyncOptions) error {
	if !ccNone() {
		return c.rsyncFrom(ctx, remoteDir, localDir, opt, false)
	}
	err := c.rsyncFrom(ctx, remoteDir, localDir, opt, true)
	if err != nil && strings.Contains(err.Error(), "checksum-choice") {
		// The host's rsync predates the option: copy with its checksum.
		return c.rsyncFrom(ctx, remoteDir, localDir, opt, false)
	}
	return err
}

var (
	ccOnce sync.Once
	ccOK   bool
)

// ccNone reports whether this machine's rsync has --checksum-choice
// (3.2.0 and later). The copy then skips rsync's whole-file checksum: the
// ssh channel's MAC already protects every byte in transit, and the
// checksum costs a third of the copy's throughput on a fast link.
func ccNone() bool {
	ccOnce.Do(func() {
		out, err := exec.Command(rsyncProgram, "--version").Output()
		if err != nil {
			return
		}
		var major, minor int
		if _, err := fmt.Sscanf(strings.TrimPrefix(string(out), "rsync  version "), "%d.%d", &major, &minor); err == nil {
			ccOK = major > 3 || major == 3 && minor >= 2
		}
	})
	return ccOK
}

func (c *Conn) rsyncFrom(ctx context.Context, remoteDir, localDir string, opt RsyncOptions, noChecksum bool) error {
	if remoteDir == "" || localDir == "" {
		return errors.New("rsync needs a remote and a local directory")
	}
	src := homeRelative(remoteDir)
	maxBytes := int64(0)
	if opt.MaxSizeMB > 0 {
		maxBytes = int64(opt.MaxSizeMB) << 20
	}
	total := int64(-1)
	if opt.Progress != nil {
		if n, err := c.remoteTotal(ctx, src, maxBytes); err == nil {
			total = n
		} else if ctx.Err() != nil {
			return fmt.Errorf("rsync from %s: %w", c.t.Host, context.Cause(ctx))
		}
	}

	args := []string{"-a", "--no-owner", "--no-group", "--no-devices", "--no-specials", "-s",
		"--whole-file", "--info=progress2", "--no-inc-recursive"}
	if maxBytes > 0 {
		args = append(args, "--max-size="+strconv.FormatInt(maxBytes, 10))
	}
	if noChecksum {
		args = append(args, "--checksum-choice=none")
	}
	if opt.RsyncPath != "" {
		args = append(args, "--rsync-path="+opt.RsyncPath)
	}
	args = append(args, "-e", c.rsh(), "--", rsyncHost(c.t.Host)+":"+withSlash(src), withSlash(localDir))

	last := int64(-1)
	moved := make(chan struct{}, 1)
	out := &lineWriter{line: func(l string) {
		done, pct, ok := parseProgress2(l)
		if !ok || done <= last {
			return
		}
		last = done
		select {
		case moved <- struct{}{}:
		default:
		}
		if opt.Progress != nil {
			opt.Progress(done, progressTotal(done, pct, total))
		}
	}}
	// rsync's ssh lends its stderr, this pipe, to the master, which keeps
	// it while the remote end lives; so the pipe is read here, and not
	// waited for once the copy is stopped.
	errR, errW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer errR.Close()
	stderr := newTailBuffer(64 << 10)
	stderrDone := make(chan struct{})
	cmd := exec.Command(rsyncProgram, args...)
	cmd.Stdout = out
	cmd.Stderr = errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = waitDelay
	err = cmd.Start()
	errW.Close()
	if err != nil {
		return fmt.Errorf("rsync from %s: %w", c.t.Host, err)
	}
	go func() {
		io.Copy(stderr, errR)
		close(stderrDone)
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var (
		timer *time.Timer
		stall <-chan time.Time // nil, never ready, without a watchdog
	)
	if opt.StallTimeout > 0 {
		timer = time.NewTimer(opt.StallTimeout)
		defer timer.Stop()
		stall = timer.C
	}
	for {
		select {
		case err := <-waited:
			out.flush() // rsync has exited: its output is all in
			select {
			case <-stderrDone:
			case <-time.After(waitDelay):
			}
			return c.rsyncResult(err, stderr.Bytes(), last, total, opt, src)
		case <-moved:
			if timer != nil {
				timer.Reset(opt.StallTimeout)
			}
		case <-stall:
			stopGroup(cmd.Process.Pid, waited)
			return &StallError{Host: c.t.Host, Seconds: int(math.Round(opt.StallTimeout.Seconds()))}
		case <-ctx.Done():
			stopGroup(cmd.Process.Pid, waited)
			return fmt.Errorf("rsync from %s: %w", c.t.Host, context.Cause(ctx))
		}
	}
}

// rsyncResult turns rsync's end into RsyncFrom's result; last is the
// last count of bytes it reported.
func (c *Conn) rsyncResult(err error, stderr []byte, last, total int64, opt RsyncOptions, src string) error {
	var ee *exec.ExitError
	if err != nil && errors.As(err, &ee) && ee.ExitCode() == 24 {
		err = nil
	}
	if err == nil {
		if opt.Progress != nil && total >= 0 && last < total {
			opt.Progress(total, total)
		}
		return nil
	}
	if !errors.As(err, &ee) || ee.ExitCode() < 0 {
		return fmt.Errorf("rsync from %s: %w", c.t.Host, err)
	}
	if merr := c.Err(); merr != nil {
		return merr
	}
	if ee.ExitCode() == 255 || isSSHFailure(stderr) {
		return translate(c.t.Host, stderr)
	}
	return fmt.Errorf("rsync from %s:%s exited with status %d: %s", c.t.Host, src, ee.ExitCode(), rsyncReason(stderr))
}

// stopGroup ends a process group: SIGTERM, then SIGKILL after 3 s.
func stopGroup(pid int, waited <-chan error) {
	syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-waited:
	case <-time.After(3 * time.Second):
		syscall.Kill(-pid, syscall.SIGKILL)
		<-waited
	}
}

// rsh is rsync's -e: ssh with the session options, each word quoted the
// way rsync splits that string. rsync appends the host and the remote
// rsync command.
func (c *Conn) rsh() string {
	words := []string{sshProgram}
	for _, a := range c.sessionArgs(nil) {
		words = append(words, rsyncQuote(a))
	}
	return strings.Join(words, " ")
}

// rsyncHost puts an IPv6 address in brackets, so its colons are not taken
// for the one before the path.
func rsyncHost(h string) string {
	if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
		return "[" + h + "]"
	}
	return h
}

func withSlash(p string) string {
	if strings.HasSuffix(p, "/") {
		return p
	}
	return p + "/"
}

// rsyncReason is the line of rsync's stderr that says what went wrong: the
// first "rsync: " message, else the last line.
func rsyncReason(stderr []byte) string {
	for _, l := range strings.Split(string(stderr), "\n") {
		if r, ok := strings.CutPrefix(strings.TrimSpace(l), "rsync: "); ok {
			return r
		}
	}
	if l := lastLine(string(stderr)); l != "" {
		return l
	}
	return "no message"
}

func progressTotal(done int64, pct int, total int64) int64 {
	if total < 0 && pct > 0 {
		total = done * 100 / int64(pct)
	}
	if total >= 0 && total < done {
		total = done
	}
	return total
}

// progress2 matches a line of rsync --info=progress2, such as
// "    120,586,240  36%   50.21MB/s    0:00:04 (xfr#1, to-chk=2/6)": the
// bytes copied so far, with the locale's thousands separators, and the
// percentage of the whole transfer.
var progress2 = regexp.MustCompile(`^\s*([0-9][0-9,.']*)\s+([0-9]{1,3})%(\s|$)`)

// parseProgress2 reads one line of rsync --info=progress2 output.
func parseProgress2(line string) (done int64, percent int, ok bool) {
	m := progress2.FindStringSubmatch(line)
	if m == nil {
		return 0, 0, false
	}
	digits := strings.Map(func(r rune) rune {
		if '0' <= r && r <= '9' {
			return r
		}
		return -1
	}, m[1])
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	p, _ := strconv.Atoi(m[2])
	return n, p, true
}

// lineWriter cuts what it is written into lines at \r or \n (rsync redraws
// its progress line with \r) and hands each to line.
type lineWriter struct {
	buf  []byte
	line func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexAny(w.buf, "\r\n")
		if i < 0 {
			break
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 4096 { // no line end in sight: not progress output
		w.buf = nil
	}
	return len(p), nil
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.line(string(w.buf))
		w.buf = nil
	}
}

// remoteTotal sums the sizes of the regular files under dir that a copy
// with --max-size=maxBytes would take (all when maxBytes is 0). It needs
// GNU find (-printf).
func (c *Conn) remoteTotal(ctx context.Context, dir string, maxBytes int64) (int64, error) {
	filter := ""
	if maxBytes > 0 {
		filter = fmt.Sprintf(" ! -size +%dc", maxBytes)
	}
	out, _, err := c.Run(ctx, "cd "+ShellQuote(dir)+" && find . -type f"+filter+` -printf '%s\n'`, nil)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, f := range strings.Fields(string(out)) {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("size %q from find on %s", f, c.t.Host)
		}
		sum += n
	}
	return sum, nil
}

// ListLarge names, relative to remoteDir and sorted, the regular files
// under it over maxMB MiB: those RsyncFrom with MaxSizeMB maxMB leaves on
// the host. maxMB 0 or less lists nothing. It uses only POSIX find.
func (c *Conn) ListLarge(ctx context.Context, remoteDir string, maxMB int) ([]string, error) {
	if maxMB <= 0 {
		return nil, nil
	}
	script := fmt.Sprintf(`cd %s && find . -type f -size +%dc -exec printf '%%s\000' {} +`,
		ShellQuote(homeRelative(remoteDir)), int64(maxMB)<<20)
	out, _, err := c.Run(ctx, script, nil)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range strings.Split(string(out), "\x00") {
		if n = strings.TrimPrefix(n, "./"); n != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}
