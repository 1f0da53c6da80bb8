package sshx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"potato-training/lib/bundle"
	"potato-training/lib/shell"
)

// SendTreeCommand is the word that follows a potato-agent on the remote
// command line of Fetch: `potato-agent send-tree --max-bytes N -- DIR`
// writes DIR's tree stream (bundle.WriteTree) on its standard output.
const SendTreeCommand = "send-tree"

// directMin is the size over which a file is not sent in the tar stream
// but on a session of its own, whose standard output is the local file
// itself: the master then writes the bytes straight into it, and no
// process of ours copies them. On loopback that is about 1.4 times the
// throughput of reading the stream through a pipe.
var directMin int64 = 16 << 20

// FetchOptions tunes Fetch.
type FetchOptions struct {
	// MaxSizeMB leaves files over this many MiB on the host; ListLarge
	// names them. 0 copies every file. The host's side leaves them out;
	// this side refuses any file over it that the host sends all the same.
	MaxSizeMB int

	// MaxTotalMB stops the copy with an error once more than this many
	// MiB in all would arrive, whatever total the host announces; 0 sets
	// no bound beyond that announced total.
	MaxTotalMB int

	// Progress, when set, is called as bytes arrive, with the bytes of
	// file content written so far and the total to copy, which the host
	// sends before the first file. A copy that succeeds ends with a call
	// where done equals total.
	Progress func(done, total int64)

	// StallTimeout stops the copy with a *StallError when no bytes have
	// arrived for this long; 0 waits for ever.
	StallTimeout time.Duration

	// Prefix goes before the remote command, e.g. a backend's env as
	// exports ("export PATH=...; ").
	Prefix string

	// Rsync chooses between rsync and the tar stream; the zero value,
	// RsyncAuto, takes rsync where both ends have it.
	Rsync Rsync

	// Using, when set, is called once the method is chosen, with
	// "rsync" or "tar stream".
	Using func(method string)

	// Wire, when set, is called once a copy by rsync ends, even a failed
	// one, with the bytes that came over the connection as rsync counts
	// them (its "Total bytes received").
	Wire func(received int64)
}

// Fetch copies the regular files of the remote directory into localDir
// through the master. A first copy is a tar stream written by the remote
// agent, the fastest way: on the 2-core loopback test machine 1.1 to 1.3
// times "ssh host cat", rsync 0.8 to 0.95. A copy that breaks off keeps
// what arrived of a file sent apart in .potato-partial/ beside it, and a
// Fetch that finds such a part takes rsync, where this machine and the
// host both have it, which sends only what the part lacks (fetchRsync).
// opt.Rsync can choose either way instead. For the tar stream the host
// runs, on one session,
//
//	PREFIX AGENT send-tree --max-bytes BYTES --direct-min 16777216 -- DIR
//
// where AGENT is the remote potato-agent as a shell word: it writes a tar
// stream of the files (bundle.WriteTree), which is read here by
// bundle.UnpackStream, with its checks of names and types and its
// temporary names. Files over 16 MiB are announced in the stream and
// fetched each on a session of its own,
//
//	PREFIX AGENT send-tree --file NAME --size N -- DIR
//
// whose standard output is the local temporary file, so their bytes go
// from the master straight into it. Nothing but the toolkit's own agent is
// needed on the host: no rsync, tar or find, whose flavours differ.
//
// The copy is complete when every session ended with exit status 0 and
// the stream was read to its end. A remote failure is a *RemoteError with
// the agent's message, ssh's own a *ConnError. Stopped by ctx or by the
// stall watchdog, the sessions are killed and the file being written is
// removed; the files already whole stay in localDir.
func (c *Conn) Fetch(ctx context.Context, agent, remoteDir, localDir string, opt FetchOptions) error {
	if agent == "" || remoteDir == "" || localDir == "" {
		return errors.New("fetch needs the remote agent, a remote and a local directory")
	}
	if opt.Rsync == RsyncNever || opt.Rsync == RsyncAuto && (!localRsync() || !hasPartial(localDir)) {
		opt.using("tar stream")
		return c.fetchTree(ctx, agent, remoteDir, localDir, opt)
	}
	return c.fetchRsync(ctx, agent, remoteDir, localDir, opt)
}

// keepPartial keeps what arrived of a file sent apart whose copy broke
// off, f, as .potato-partial/BASE beside it, where rsync finds it (a hard
// link: the unpacker removes f's own name). A later Fetch resumes from it.
func keepPartial(f *os.File, name string) {
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return
	}
	dir := filepath.Join(filepath.Dir(f.Name()), PartialDir)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return
	}
	dst := filepath.Join(dir, path.Base(name))
	os.Remove(dst)
	os.Link(f.Name(), dst)
}

// removePartials removes the .potato-partial directories under dir.
func removePartials(dir string) {
	var found []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == PartialDir {
			found = append(found, p)
			return filepath.SkipDir
		}
		return nil
	})
	for _, p := range found {
		os.RemoveAll(p)
	}
}

func (o FetchOptions) using(method string) {
	if o.Using != nil {
		o.Using(method)
	}
}

// fetchTree is Fetch's tar stream.
func (c *Conn) fetchTree(ctx context.Context, agent, remoteDir, localDir string, opt FetchOptions) error {
	maxBytes := int64(0)
	if opt.MaxSizeMB > 0 {
		maxBytes = int64(opt.MaxSizeMB) << 20
	}
	dir := shell.Quote(homeRelative(remoteDir))
	limit := int64(opt.MaxTotalMB) << 20
	remote := opt.Prefix + agent + " " + SendTreeCommand + " --max-bytes " + strconv.FormatInt(maxBytes, 10) +
		" --direct-min " + strconv.FormatInt(directMin, 10) + " -- " + dir

	// The session lends its stdout and stderr, these pipes, to the
	// master, which keeps them while the remote end lives; so both are
	// read here, and not waited for once the copy is stopped.
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer outR.Close()
	growPipe(outR)
	sess, err := c.startSession(ctx, remote, outW)
	outW.Close()
	if err != nil {
		return err
	}
	defer sess.close()

	var (
		total atomic.Int64
		done  atomic.Int64
	)
	total.Store(-1)
	in := &activityReader{r: outR, moved: make(chan struct{}, 1)}
	quit := make(chan struct{}) // closed to stop a direct copy
	unpacked := make(chan error, 1)
	go func() {
		err := bundle.UnpackStream(in, localDir, bundle.StreamOptions{
			MaxFileBytes: maxBytes,
			Limit:        limit,
			Total: func(n int64) {
				total.Store(n)
				if opt.Progress != nil {
					opt.Progress(0, n)
				}
			},
			Progress: func(n int64) {
				done.Store(n)
				if opt.Progress != nil {
					opt.Progress(n, max(total.Load(), n))
				}
			},
			Direct: func(name string, size int64, f *os.File) error {
				base := done.Load()
				err := c.fetchFile(ctx, opt.Prefix+agent+" "+SendTreeCommand+" --file "+shell.Quote(name)+
					" --size "+strconv.FormatInt(size, 10)+" -- "+dir, f, size, quit, in.moved, func(n int64) {
					done.Store(base + n)
					if opt.Progress != nil {
						opt.Progress(base+n, max(total.Load(), base+n))
					}
				})
				if err != nil && !errors.Is(err, errOverrun) {
					keepPartial(f, name)
				}
				return err
			},
		})
		if err == nil {
			// What follows the archive's end: tar's padding, at most.
			_, err = io.Copy(io.Discard, io.LimitReader(in, 1<<20))
		}
		unpacked <- err
	}()

	stall := newWatchdog(opt.StallTimeout)
	defer stall.stop()
	// stop ends the session and the unpacking, which removes the file it
	// was writing.
	stop := func() {
		close(quit)
		sess.stop()
		outR.Close()
		<-unpacked
	}
	for {
		select {
		case uerr := <-unpacked:
			var werr error
			ended := true
			select {
			case werr = <-sess.waited:
			case <-time.After(waitDelay):
				// A sender left blocked by a refused stream, or a session
				// that lingers after its stream.
				sess.stop()
				ended = false
			}
			if ended {
				sess.settle()
			}
			cut := uerr == nil || errors.Is(uerr, io.ErrUnexpectedEOF)
			switch {
			case ended && werr != nil && cut:
				// The remote side's failure explains a cut stream best.
				return c.fetchError(ctx, remote, werr, sess.stderr.Bytes())
			case uerr != nil:
				return fmt.Errorf("fetch from %s: %w", c.t.Host, uerr)
			case !ended:
				return fmt.Errorf("fetch from %s: the session did not end after the stream", c.t.Host)
			}
			if t := total.Load(); opt.Progress != nil && t >= 0 && done.Load() < t {
				opt.Progress(t, t)
			}
			// Every file is whole: parts kept by earlier copies are of no use.
			removePartials(localDir)
			return nil
		case <-in.moved:
			stall.reset()
		case <-stall.c:
			stop()
			return &StallError{Host: c.t.Host, Seconds: int(math.Round(opt.StallTimeout.Seconds()))}
		case <-ctx.Done():
			stop()
			return fmt.Errorf("fetch from %s: %w", c.t.Host, context.Cause(ctx))
		}
	}
}

// errStopped ends a direct copy that Fetch stopped; Fetch returns its own
// reason instead.
var errStopped = errors.New("stopped")

// fetchFile runs remote, which writes one file's content, size bytes,
// with f as its standard output: the master writes into f directly. It
// reports the file's growth to progress and as activity on moved, stops
// when quit is closed, and stops the session as soon as f has grown past
// size: a host that sends more than it announced gets no more of this
// machine's disk than one check's worth (100 ms).
func (c *Conn) fetchFile(ctx context.Context, remote string, f *os.File, size int64, quit <-chan struct{}, moved chan<- struct{}, progress func(int64)) error {
	sess, err := c.startSession(ctx, remote, f)
	if err != nil {
		return err
	}
	defer sess.close()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last int64
	grew := func() {
		if st, err := f.Stat(); err == nil && st.Size() > last {
			last = min(st.Size(), size)
			progress(last)
			select {
			case moved <- struct{}{}:
			default:
			}
		}
	}
	for {
		select {
		case werr := <-sess.waited:
			grew()
			sess.settle()
			if werr != nil {
				return c.fetchError(ctx, remote, werr, sess.stderr.Bytes())
			}
			return overrun(c.t.Host, f, size)
		case <-tick.C:
			grew()
			if err := overrun(c.t.Host, f, size); err != nil {
				sess.stop()
				return err
			}
		case <-quit:
			sess.stop()
			return errStopped
		}
	}
}

// errOverrun is a file sent apart that grew past its announced size.
var errOverrun = errors.New("a file grew past the size the host announced")

// overrun is the error of a file sent apart that has grown past the size
// the host announced for it; nil while it has not.
func overrun(host string, f *os.File, size int64) error {
	if st, err := f.Stat(); err == nil && st.Size() > size {
		return fmt.Errorf("fetch from %s: %w (%d bytes)", host, errOverrun, size)
	}
	return nil
}

// session is one ssh session of a fetch through the master: its standard
// error is kept, the last 64 KiB, and waited is sent the end of the
// process.
type session struct {
	cmd        *exec.Cmd
	errR       *os.File
	stderr     *tailBuffer
	stderrDone chan struct{}
	waited     chan error
}

// startSession runs remote with stdout as its standard output. The
// session lends its stdout and stderr to the master, which may keep them
// while the remote end lives: stderr is read here, and a stopped session
// is not waited for.
func (c *Conn) startSession(ctx context.Context, remote string, stdout *os.File) (*session, error) {
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := c.Command(context.WithoutCancel(ctx), remote)
	cmd.Stdout, cmd.Stderr = stdout, errW
	err = cmd.Start()
	errW.Close()
	if err != nil {
		errR.Close()
		return nil, fmt.Errorf("fetch from %s: %w", c.t.Host, err)
	}
	s := &session{cmd: cmd, errR: errR, stderr: newTailBuffer(64 << 10), stderrDone: make(chan struct{}), waited: make(chan error, 1)}
	go func() {
		io.Copy(s.stderr, errR)
		close(s.stderrDone)
	}()
	go func() { s.waited <- cmd.Wait() }()
	return s, nil
}

// stop ends the session's process group.
func (s *session) stop() { stopGroup(s.cmd.Process.Pid, s.waited) }

// settle gives the session's standard error a moment to be read whole
// once the process has ended.
func (s *session) settle() {
	select {
	case <-s.stderrDone:
	case <-time.After(waitDelay):
	}
}

func (s *session) close() { s.errR.Close() }

// fetchError classifies the end of a Fetch's session that failed.
func (c *Conn) fetchError(ctx context.Context, remote string, werr error, stderr []byte) error {
	var ee *exec.ExitError
	if !errors.As(werr, &ee) {
		return fmt.Errorf("fetch from %s: %w", c.t.Host, werr)
	}
	return c.CommandError(ctx, remote, werr, stderr)
}

// activityReader signals moved, without blocking, whenever a read brings
// bytes.
type activityReader struct {
	r     io.Reader
	moved chan struct{}
}

func (a *activityReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		select {
		case a.moved <- struct{}{}:
		default:
		}
	}
	return n, err
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

// checkTree refuses what a copy by rsync brought into dir past this
// side's bounds, whatever the host's rsync said it would send: a file over
// maxFile bytes, which is removed, or more than limit bytes in all (0: no
// bound for either).
func checkTree(host, dir string, maxFile, limit int64) error {
	var total int64
	var over []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if maxFile > 0 && info.Size() > maxFile {
			over = append(over, p)
			return nil
		}
		total += info.Size()
		return nil
	})
	if err != nil {
		return fmt.Errorf("fetch from %s: %w", host, err)
	}
	for _, p := range over {
		os.Remove(p)
	}
	switch {
	case len(over) > 0:
		rel, _ := filepath.Rel(dir, over[0])
		return fmt.Errorf("fetch from %s: %s is over the limit of %d bytes for a file, which the host should have left out: removed", host, rel, maxFile)
	case limit > 0 && total > limit:
		return fmt.Errorf("fetch from %s: %d bytes arrived, over the limit of %d bytes in all", host, total, limit)
	}
	return nil
}

// ListLarge names, relative to remoteDir and sorted, the regular files
// under it over maxMB MiB: those Fetch with MaxSizeMB maxMB leaves on the
// host. maxMB 0 or less lists nothing. It uses only POSIX find.
func (c *Conn) ListLarge(ctx context.Context, remoteDir string, maxMB int) ([]string, error) {
	if maxMB <= 0 {
		return nil, nil
	}
	script := fmt.Sprintf(`cd %s && find . -type f -size +%dc -exec printf '%%s\000' {} +`,
		shell.Quote(homeRelative(remoteDir)), int64(maxMB)<<20)
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

// watchdog is a copy's stall timer: c is ready once nothing came for d
// since the last reset; with d zero, never.
type watchdog struct {
	t *time.Timer
	c <-chan time.Time
	d time.Duration
}

func newWatchdog(d time.Duration) *watchdog {
	w := &watchdog{d: d}
	if d > 0 {
		w.t = time.NewTimer(d)
		w.c = w.t.C
	}
	return w
}

func (w *watchdog) reset() {
	if w.t != nil {
		w.t.Reset(w.d)
	}
}

func (w *watchdog) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}
