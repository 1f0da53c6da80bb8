package rundir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockFile opens path and takes an exclusive flock on it. The kernel
// releases it when the process dies, however it dies.
func lockFile(path string, wait bool) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	if err := flock(f, how); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// LockDir takes an exclusive flock on the directory dir itself, waiting
// for it, and returns its release; it leaves no file behind. The kernel
// releases it when the process dies, however it dies.
func LockDir(dir string) (release func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := flock(f, syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// lockIdle takes the dispatch lock of run id in dir without waiting:
// ErrBusy while its dispatch lives.
func lockIdle(dir, id string) (*os.File, error) {
	lock, err := lockFile(filepath.Join(dir, DispatchLockFile), false)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, fmt.Errorf("run %s: %w", id, ErrBusy)
	}
	return lock, err
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// lockHeld reports whether some process holds path's flock. A missing
// file is not held.
func lockHeld(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := flock(f, syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	_ = flock(f, syscall.LOCK_UN)
	return false
}

// pollInterval is how often a waiting run looks at the queue again. The
// queue is a directory: polling it is cheap and also sees runs written by
// other machines' clients of a shared file system.
var pollInterval = 100 * time.Millisecond

// Acquire waits until run is the oldest unfinished run whose dispatch is
// alive and takes queue.lock (SPEC B6: one run at a time, first come,
// first served). onWait is called once each time the run ahead changes,
// with that run's id. The returned function releases the queue.
func (r *Root) Acquire(ctx context.Context, run *Run, onWait func(ahead string)) (func(), error) {
	lastAhead := ""
	for {
		ahead, err := r.ahead(run)
		if err != nil {
			return nil, err
		}
		if ahead == "" {
			f, err := lockFile(filepath.Join(r.Dir, queueLock), false)
			if err == nil {
				return func() { f.Close() }, nil
			}
			if !errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, err
			}
			// An older run's dispatch still holds the queue while it ends.
		} else if ahead != lastAhead && onWait != nil {
			onWait(ahead)
		}
		lastAhead = ahead
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// ahead returns the oldest live unfinished run created before run, or "".
func (r *Root) ahead(run *Run) (string, error) {
	infos, err := r.List()
	if err != nil {
		return "", err
	}
	me := run.Record()
	for _, info := range infos {
		if info.RunID == run.ID {
			return "", nil
		}
		if info.Finished || info.Gone || Finished(info.State) {
			continue
		}
		if info.CreatedAt.After(me.CreatedAt) {
			continue
		}
		return info.RunID, nil
	}
	return "", nil
}
