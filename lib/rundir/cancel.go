package rundir

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"potato-training/lib/atomicfile"
)

// RequestCancel creates the cancel file of run id. It is what
// potato-dispatch cancel and the server do; the run's dispatch notices.
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
