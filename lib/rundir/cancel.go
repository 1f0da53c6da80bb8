package rundir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"potato-training/lib/atomicfile"
)

// ErrFinished is Cancel's error for a run that is over; ErrGone for one
// whose dispatch is gone.
var (
	ErrFinished = errors.New("finished already")
	ErrGone     = errors.New(GoneError)
)

// Cancel asks run id to stop (RequestCancel), as potato-dispatch cancel and
// the server's API do, unless it is over: finished, by its exit_code or by
// the final state run.json holds, which the dispatch writes before
// exit_code, or gone.
func (r *Root) Cancel(id string) error {
	info, err := r.Read(id)
	if err != nil {
		return err
	}
	// Gone before the state: Read reports a gone run in state error.
	switch {
	case info.Finished:
		return fmt.Errorf("run %s is %w (%s)", id, ErrFinished, info.State)
	case info.Gone:
		return fmt.Errorf("run %s: %w", id, ErrGone)
	case Finished(info.State):
		return fmt.Errorf("run %s is %w (%s)", id, ErrFinished, info.State)
	}
	return r.RequestCancel(id)
}

// RequestCancel creates the cancel file of run id; the run's dispatch
// notices. Cancel checks that the run is not over first.
func (r *Root) RequestCancel(id string) error {
	return atomicfile.WriteFile(filepath.Join(r.RunDir(id), CancelFile), []byte("cancel\n"), 0o644)
}

// cancelPoll is the backup for fsnotify, which misses writes made by
// another client of a network file system.
var cancelPoll = time.Second

// WatchCancel returns a channel closed when the run's cancel file appears.
// It watches the directory with fsnotify and also polls.
func (run *Run) WatchCancel(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{})
	path := run.Path(CancelFile)
	exists := func() bool {
		_, err := os.Stat(path)
		return err == nil
	}
	go func() {
		var events <-chan fsnotify.Event
		if w, err := fsnotify.NewWatcher(); err == nil {
			defer w.Close()
			if w.Add(run.Dir) == nil {
				events = w.Events
			}
		}
		tick := time.NewTicker(cancelPoll)
		defer tick.Stop()
		for !exists() {
			select {
			case <-ctx.Done():
				return // ch stays open: nobody asked to cancel
			case e, ok := <-events:
				if !ok {
					events = nil
				} else if filepath.Base(e.Name) != CancelFile {
					continue
				}
			case <-tick.C:
			}
		}
		close(ch)
	}()
	return ch
}
