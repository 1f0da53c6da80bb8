package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/fsnotify/fsnotify"

	"potato-training/lib/config"
	"potato-training/lib/rundir"
)

// ExitTimeout is potato-dispatch wait's status when --timeout passed
// before the runs ended, as timeout(1)'s.
const ExitTimeout = 124

// WaitOptions are potato-dispatch wait's arguments.
type WaitOptions struct {
	ConfigPath string
	RunIDs     []string
	// Ended is called as each run is found over, in RunIDs' order.
	Ended func(info rundir.Info)
}

// Wait blocks until every run of opt.RunIDs has ended, or ctx is done, and
// returns each run's exit code in RunIDs' order (-1 for a run not over when
// ctx ended; err is then ctx's error). A run id that names no run is a
// UsageError, found before anything is waited for.
//
// It waits on events, not by polling: fsnotify on the run directory
// (run.json and exit_code are renamed into place), and, since a process's
// death writes no file, a blocking flock on the run's dispatch.lock,
// which the kernel releases however the dispatch ends. A run whose
// dispatch is gone is settled as status does (dispatch_lost, exit code 1),
// so wait never hangs on it.
func Wait(ctx context.Context, opt WaitOptions) ([]int, error) {
	cfg, err := LoadConfig(opt.ConfigPath)
	if err != nil {
		return nil, err
	}
	root, err := Root(cfg)
	if err != nil {
		return nil, err
	}
	if len(opt.RunIDs) == 0 {
		return nil, usagef("no run id given")
	}
	for _, id := range opt.RunIDs {
		if !rundir.ValidID(id) {
			return nil, usagef("no run %q", id)
		}
		if _, err := os.Stat(root.RunDir(id)); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, usagef("no run %s in %s", id, filepath.Join(root.Dir, "runs"))
			}
			return nil, err
		}
	}
	codes := make([]int, len(opt.RunIDs))
	for i := range codes {
		codes[i] = -1
	}
	for i, id := range opt.RunIDs {
		info, err := waitRun(ctx, cfg, root, id)
		if err != nil {
			return codes, err
		}
		code := ExitFailed
		if info.ExitCode != nil {
			code = *info.ExitCode
		}
		codes[i] = code
		if opt.Ended != nil {
			opt.Ended(info)
		}
	}
	return codes, nil
}

// waitRun waits for the end of one run: its exit_code written.
func waitRun(ctx context.Context, cfg *config.Config, root *rundir.Root, id string) (rundir.Info, error) {
	dir := root.RunDir(id)
	// The watch starts before the first look, so no change between the two
	// is missed.
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return rundir.Info{}, fmt.Errorf("cannot watch run %s: %w", id, err)
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		return rundir.Info{}, fmt.Errorf("cannot watch run %s: %w", id, err)
	}
	lock := filepath.Join(dir, rundir.DispatchLockFile)
	var released <-chan struct{}
	lockFreed := false
	for {
		info, err := root.Read(id)
		switch {
		case err == nil && info.Finished:
			return info, nil
		case err == nil && info.Gone:
			// The dispatch died before it wrote exit_code: settle the run
			// as status would, then read its end.
			settleLost(cfg, root)
			info, err := root.Read(id)
			if err == nil && !info.Finished {
				err = fmt.Errorf("run %s: %s, and its end could not be recorded: see its run.log", id, rundir.GoneError)
			}
			return info, err
		case err != nil:
			// A run.json being created is not there yet: wait for it,
			// while its dispatch lives.
			if _, serr := os.Stat(filepath.Join(dir, rundir.RecordFile)); serr == nil || !errors.Is(serr, fs.ErrNotExist) {
				return info, err
			}
			if lockFreed {
				return info, fmt.Errorf("run %s has no %s, and no dispatch holds it", id, rundir.RecordFile)
			}
		}
		if released == nil {
			released = lockReleased(lock)
		}
		select {
		case <-ctx.Done():
			return info, ctx.Err()
		case err := <-w.Errors:
			return info, fmt.Errorf("watching run %s: %w", id, err)
		case ev, ok := <-w.Events:
			if !ok {
				return info, fmt.Errorf("watching run %s: the watch ended", id)
			}
			if ev.Name == dir && ev.Has(fsnotify.Remove) {
				return info, fmt.Errorf("run %s was removed while it was waited for", id)
			}
		case <-released:
			// The dispatch let go of its lock: it ended, or died. The next
			// look tells which (and watches the lock again if another
			// process only held it for a moment).
			released, lockFreed = nil, true
		}
	}
}

// lockReleased returns a channel closed once nobody holds path's flock,
// nil when there is no such file yet (the run directory's creation goes
// on, and the watch sees the file come):
// a goroutine blocks in flock(2) for a shared lock, then lets it go at
// once, so that a later writer of the run (potato-dispatch writeback, a
// settling of the lost run) finds it free. A goroutine still blocked when
// its caller gives up stays blocked until the lock is released or the
// process exits; nothing else is held meanwhile.
func lockReleased(path string) <-chan struct{} {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		defer f.Close()
		for {
			err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	}()
	return ch
}
