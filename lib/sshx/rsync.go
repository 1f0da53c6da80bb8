package sshx

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"potato-training/lib/bundle"
	"potato-training/lib/shell"
)

const rsyncProgram = "rsync"

// Rsync says whether a copy through the master uses rsync.
type Rsync int

const (
	// RsyncAuto uses rsync where this machine and the host both have it:
	// always for Upload; for Fetch, to resume a copy that broke off.
	RsyncAuto Rsync = iota
	// RsyncNever keeps to what needs nothing on the host: the agent's tar
	// stream for Fetch, sh and cat for Upload.
	RsyncNever
	// RsyncAlways uses rsync; a missing one is the copy's error.
	RsyncAlways
)

// PartialDir is where a copy keeps the part of a file that broke off: a
// directory of that name beside the file, in localDir's tree, never the
// file's own name, so a cut file never looks whole. The next Fetch into
// the same directory resumes from it, by rsync, and removes it.
const PartialDir = ".potato-partial"

// noRsyncMark is what the plan of a Fetch writes on its standard error
// when the host has no rsync.
const noRsyncMark = "potato-no-rsync"

var (
	localRsyncOnce sync.Once
	localRsyncOK   bool
)

// localRsync says whether this machine has rsync on its PATH.
func localRsync() bool {
	localRsyncOnce.Do(func() {
		_, err := exec.LookPath(rsyncProgram)
		localRsyncOK = err == nil
	})
	return localRsyncOK
}

// fetchRsync is Fetch with rsync. One session first runs the plan,
//
//	PREFIX AGENT send-tree --max-bytes BYTES --direct-min 1 -- DIR &&
//	{ command -v rsync || echo potato-no-rsync >&2; }
//
// whose stream only announces the files, so it is small, and starts with
// the total to copy, for the progress; it also says whether the host has
// rsync, and fails as the tar stream would on a missing directory. Where
// the host lacks rsync and opt.Rsync is RsyncAuto, the tar stream follows;
// otherwise
//
//	rsync -rt -s --partial-dir=.potato-partial [--whole-file] --max-size=BYTES
//	      --info=progress2 --stats -e "ssh -S ctl ..." -- host:DIR/ localDir/
//
// through the master, the remote rsync started as PREFIX rsync. Only
// regular files are copied (no -l, no -D); files over the limit stay on
// the host. rsync writes each file under a temporary name and renames it
// once whole. A copy that breaks off, a dropped link, a stall or ctx,
// leaves the part in .potato-partial/ beside the file, and the next Fetch
// sends only what that part lacks (rsync's delta transfer against it);
// with no part under localDir, --whole-file spares the delta transfer.
// The progress counts rsync's bytes, checked against the plan's total; a
// silence of StallTimeout, no progress line, stops rsync with SIGTERM.
//
// rsync's exit status 24 (files vanished during the copy) counts as
// success. A failure of ssh is a *ConnError; rsync's own, a *RemoteError
// with its message.
func (c *Conn) fetchRsync(ctx context.Context, agent, remoteDir, localDir string, opt FetchOptions) error {
	maxBytes := int64(0)
	if opt.MaxSizeMB > 0 {
		maxBytes = int64(opt.MaxSizeMB) << 20
	}
	src := homeRelative(remoteDir)
	total, hostHas, err := c.fetchPlan(ctx, agent, src, maxBytes, opt)
	if err != nil {
		return err
	}
	if !hostHas && opt.Rsync == RsyncAuto {
		opt.using("tar stream")
		return c.fetchTree(ctx, agent, remoteDir, localDir, opt)
	}
	limit := int64(opt.MaxTotalMB) << 20
	if limit > 0 && total > limit {
		return fmt.Errorf("fetch from %s: the host would send %d bytes, over the limit of %d bytes in all", c.t.Host, total, limit)
	}
	// The host's rsync could send more than its list said: rsync is
	// stopped once more than the list's total has come, and what it
	// wrote is checked against this side's bounds (checkTree).
	if limit <= 0 || total < limit {
		limit = total
	}
	opt.using("rsync")
	if err := os.MkdirAll(localDir, 0o755); err != nil {
		return err
	}
	args := []string{"-rt", "-s", "--partial-dir=" + PartialDir, "--info=progress2", "--stats"}
	if !hasPartial(localDir) {
		// Nothing to resume from: rsync's delta transfer has no use, and
		// --whole-file spares its bookkeeping.
		args = append(args, "--whole-file")
	}
	if maxBytes > 0 {
		args = append(args, "--max-size="+strconv.FormatInt(maxBytes, 10))
	}
	if opt.Prefix != "" {
		args = append(args, "--rsync-path="+opt.Prefix+rsyncProgram)
	}
	rsh, err := c.rsh()
	if err != nil {
		return err
	}
	args = append(args, "-e", rsh, "--", rsyncHost(c.t.Host)+":"+withSlash(src), withSlash(localDir))

	if opt.Progress != nil {
		opt.Progress(0, total)
	}
	last, received := int64(0), int64(-1)
	var overLimit atomic.Bool
	moved := make(chan struct{}, 1)
	out := &lineWriter{line: func(l string) {
		if n, ok := parseReceived(l); ok {
			received = n
			return
		}
		done, ok := parseProgress2(l)
		if !ok {
			return
		}
		select {
		case moved <- struct{}{}:
		default:
		}
		if done > limit {
			overLimit.Store(true)
		}
		done = min(done, total)
		if done <= last {
			return
		}
		last = done
		if opt.Progress != nil {
			opt.Progress(done, total)
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
	cmd.Stdout, cmd.Stderr = out, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = waitDelay
	err = cmd.Start()
	errW.Close()
	if err != nil {
		return fmt.Errorf("fetch from %s: %w", c.t.Host, err)
	}
	go func() {
		io.Copy(stderr, errR)
		close(stderrDone)
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	wire := func() {
		if opt.Wire != nil && received >= 0 {
			opt.Wire(received)
		}
	}

	stall := newWatchdog(opt.StallTimeout)
	defer stall.stop()
	for {
		select {
		case werr := <-waited:
			out.flush() // rsync has exited: its output is all in
			select {
			case <-stderrDone:
			case <-time.After(waitDelay):
			}
			wire()
			if err := c.rsyncError(ctx, args, werr, stderr.Bytes()); err != nil {
				return err
			}
			if err := checkTree(c.t.Host, localDir, maxBytes, limit); err != nil {
				return err
			}
			if opt.Progress != nil && last < total {
				opt.Progress(total, total)
			}
			return nil
		case <-moved:
			stall.reset()
			if overLimit.Load() {
				stopGroup(cmd.Process.Pid, waited)
				wire()
				return fmt.Errorf("fetch from %s: rsync brought more than the %d bytes the host listed", c.t.Host, limit)
			}
		case <-stall.c:
			stopGroup(cmd.Process.Pid, waited)
			wire()
			return &StallError{Host: c.t.Host, Seconds: int(math.Round(opt.StallTimeout.Seconds()))}
		case <-ctx.Done():
			stopGroup(cmd.Process.Pid, waited)
			wire()
			return fmt.Errorf("fetch from %s: %w", c.t.Host, context.Cause(ctx))
		}
	}
}

// hasPartial says whether a copy left a part under dir.
func hasPartial(dir string) bool {
	found := false
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == PartialDir {
			found = true
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

// fetchPlan runs the plan of fetchRsync: the total to copy and whether the
// host has rsync. The stall watchdog bounds it too.
func (c *Conn) fetchPlan(ctx context.Context, agent, src string, maxBytes int64, opt FetchOptions) (total int64, hostHas bool, err error) {
	script := opt.Prefix + agent + " " + SendTreeCommand + " --max-bytes " + strconv.FormatInt(maxBytes, 10) +
		" --direct-min 1 -- " + shell.Quote(src) +
		" && { command -v " + rsyncProgram + " >/dev/null 2>&1 || echo " + noRsyncMark + " >&2; }"
	pctx := ctx
	if opt.StallTimeout > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, opt.StallTimeout)
		defer cancel()
	}
	out, stderr, err := c.Run(pctx, script, nil)
	if err != nil {
		if ctx.Err() == nil && pctx.Err() != nil {
			return 0, false, &StallError{Host: c.t.Host, Seconds: int(math.Round(opt.StallTimeout.Seconds()))}
		}
		return 0, false, err
	}
	hdr, err := tar.NewReader(bytes.NewReader(out)).Next()
	if err != nil || hdr.Typeflag != tar.TypeXGlobalHeader {
		return 0, false, fmt.Errorf("fetch from %s: the remote agent's list does not start with its total", c.t.Host)
	}
	total, err = strconv.ParseInt(hdr.PAXRecords[bundle.TotalRecord], 10, 64)
	if err != nil || total < 0 {
		return 0, false, fmt.Errorf("fetch from %s: the remote agent's list gives the total %q", c.t.Host, hdr.PAXRecords[bundle.TotalRecord])
	}
	return total, !bytes.Contains(stderr, []byte(noRsyncMark)), nil
}

// rsyncError classifies the end of an rsync through the master.
func (c *Conn) rsyncError(ctx context.Context, args []string, werr error, stderr []byte) error {
	var ee *exec.ExitError
	if werr == nil || errors.As(werr, &ee) && ee.ExitCode() == 24 {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("rsync with %s: %w", c.t.Host, context.Cause(ctx))
	}
	if !errors.As(werr, &ee) || ee.ExitCode() < 0 {
		return fmt.Errorf("rsync with %s: %w", c.t.Host, werr)
	}
	if merr := c.Err(); merr != nil {
		return merr
	}
	if ee.ExitCode() == 255 || isSSHFailure(stderr) {
		return translate(c.t.Host, stderr)
	}
	return &RemoteError{Host: c.t.Host, Command: rsyncProgram + " " + strings.Join(args, " "),
		ExitCode: ee.ExitCode(), Stderr: rsyncReason(stderr)}
}

// uploadRsync is Upload with rsync: rsync writes a temporary file in the
// remote directory and renames it once whole, and removes it when the
// copy fails.
func (c *Conn) uploadRsync(ctx context.Context, localPath, remotePath string, mode os.FileMode) error {
	rsh, err := c.rsh()
	if err != nil {
		return err
	}
	args := []string{"-s", "-p", fmt.Sprintf("--chmod=F%04o", mode.Perm()), "-e", rsh, "--",
		localPath, rsyncHost(c.t.Host) + ":" + homeRelative(remotePath)}
	cmd := exec.CommandContext(ctx, rsyncProgram, args...)
	inGroup(cmd)
	_, stderr, err := capture(ctx, cmd)
	return c.rsyncError(ctx, args, err, stderr)
}

// hostRsync says whether rsync is on the host's PATH, for the login's
// shell.
func (c *Conn) hostRsync(ctx context.Context) (bool, error) {
	_, _, err := c.Run(ctx, "command -v "+rsyncProgram+" >/dev/null 2>&1", nil)
	var re *RemoteError
	if errors.As(err, &re) {
		return false, nil
	}
	return err == nil, err
}

// rsh is rsync's -e: ssh with the session options, each word quoted the
// way rsync splits that string (single or double quotes around a word
// with a space; rsync knows no backslash escapes). rsync appends the host
// and the remote rsync command.
func (c *Conn) rsh() (string, error) {
	words := []string{sshProgram}
	for _, a := range c.sessionArgs(nil) {
		switch {
		case a != "" && !strings.ContainsAny(a, " \t'\""):
			words = append(words, a)
		case !strings.Contains(a, "'"):
			words = append(words, "'"+a+"'")
		case !strings.Contains(a, `"`):
			words = append(words, `"`+a+`"`)
		default:
			return "", fmt.Errorf("rsync with %s: the ssh option %q holds both kinds of quote", c.t.Host, a)
		}
	}
	return strings.Join(words, " "), nil
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
	if l := LastLine(string(stderr)); l != "" {
		return l
	}
	return "no message"
}

// progress2 matches a line of rsync --info=progress2, such as
// "    120,586,240  36%   50.21MB/s    0:00:04 (xfr#1, to-chk=2/6)": the
// bytes copied so far, with the locale's thousands separators.
var progress2 = regexp.MustCompile(`^\s*([0-9][0-9,.']*)\s+[0-9]{1,3}%(\s|$)`)

// parseProgress2 reads the bytes copied from a line of rsync
// --info=progress2.
func parseProgress2(line string) (int64, bool) {
	m := progress2.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	return digits(m[1])
}

// received matches the line of rsync --stats that counts the bytes that
// came over the connection.
var received = regexp.MustCompile(`^Total bytes received: ([0-9][0-9,.']*)\s*$`)

func parseReceived(line string) (int64, bool) {
	m := received.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		return 0, false
	}
	return digits(m[1])
}

// digits reads a number written with the locale's thousands separators.
func digits(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.Map(func(r rune) rune {
		if '0' <= r && r <= '9' {
			return r
		}
		return -1
	}, s), 10, 64)
	return n, err == nil
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
