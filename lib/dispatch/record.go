package dispatch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	// The SQLite driver of Potato's store, which lib/writeback opens for
	// the dispatch (lib/writeback, "the driver").
	_ "modernc.org/sqlite"

	"potato-training/lib/config"
	"potato-training/lib/rundir"
	"potato-training/lib/writeback"
)

// CodeStoreFailed is the error_code of a run whose rows could not be
// written to Potato's store.
const CodeStoreFailed = "store_failed"

// StoreError is a failed write to Potato's store: the SQLite error and the
// store's path.
type StoreError struct {
	Path string
	Err  error
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("cannot write Potato's store %s: %v", e.Path, e.Err)
}

func (e *StoreError) Unwrap() error { return e.Err }

// withStore opens Potato's store of cfg for fn; any error is a StoreError.
func withStore(cfg *config.Config, fn func(*writeback.Store) error) error {
	path := writeback.StorePath(cfg)
	s, err := writeback.OpenStore(path)
	if err != nil {
		return &StoreError{Path: path, Err: err}
	}
	defer s.Close()
	if err := fn(s); err != nil {
		return &StoreError{Path: path, Err: err}
	}
	return nil
}

// potatoStatus is writeback.PotatoStatus.
func potatoStatus(state string) string { return writeback.PotatoStatus(state) }

// recordRun upserts the run row of rec into Potato's store.
func recordRun(cfg *config.Config, root *rundir.Root, rec rundir.Record) error {
	row := writeback.RunRowOf(cfg, root.RunDir(rec.RunID), rec)
	return withStore(cfg, func(s *writeback.Store) error { return s.RecordRun(row) })
}

// settleLost ends the runs whose dispatch is gone (killed with SIGKILL, or
// its machine restarted): run.json and Potato's store get the terminal
// state error, error_code dispatch_lost, once (rundir.SettleLost). A store
// that cannot be written is noted in the run's store_error. It also writes
// the end of a finished run that the store refused (recordEnd).
func settleLost(cfg *config.Config, root *rundir.Root) {
	infos, err := root.List()
	if err != nil {
		return
	}
	for _, info := range infos {
		if info.Finished && info.StoreError != "" {
			recordEnd(cfg, root, info.RunID)
			continue
		}
		if !info.Gone {
			continue
		}
		id := info.RunID
		pending := false
		ok, err := root.SettleLost(id, func(rec rundir.Record) error {
			pending = rec.WritebackPending
			return recordRun(cfg, root, rec)
		})
		if ok || err != nil {
			msg := "the dispatch of this run is gone: recorded as error (" + rundir.CodeLost + ")"
			if pending {
				msg += fmt.Sprintf("; its predictions stay in %s: potato-dispatch writeback CONFIG %s applies them to Potato's store", rundir.PredictionsFile, id)
			}
			if err != nil {
				msg = "the dispatch of this run is gone, and its end could not be recorded: " + err.Error()
			}
			appendLog(root, id, msg)
		}
	}
}

// recordEnd writes the end of a finished run into Potato's store, which
// refused it when the run ended (store_error: locked longer than the busy
// timeout, read-only), so that the store stops showing as running a run
// that has ended. A pending run's predictions still wait for
// potato-dispatch writeback.
func recordEnd(cfg *config.Config, root *rundir.Root, id string) {
	end := ""
	err := root.Edit(id, func(rec *rundir.Record, finished bool) error {
		if !finished || rec.StoreError == "" {
			return errNoChange
		}
		if err := recordRun(cfg, root, *rec); err != nil {
			return err
		}
		rec.StoreError, end = "", rec.State+" ("+rec.ErrorCode+")"
		return nil
	})
	if err == nil {
		appendLog(root, id, fmt.Sprintf("the run's end, %s, is now in %s", end, writeback.StorePath(cfg)))
	}
}

var errNoChange = errors.New("no change")

// appendLog adds a line to a run's run.log as Run.Logf does, for a run
// that no dispatch holds.
func appendLog(root *rundir.Root, id, msg string) {
	f, err := os.OpenFile(filepath.Join(root.RunDir(id), rundir.LogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339), strings.ReplaceAll(rundir.CleanText(msg), "\n", "\n    "))
}
