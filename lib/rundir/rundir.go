// Package rundir implements the run directory described in
// potato-rundir(5): one directory per run under training/runs/, its
// record run.json, its log, the exit_code file written last, and the queue
// that lets one run execute at a time.
package rundir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"potato-training/lib/atomicfile"
)

// States of a run, in the order a run goes through them.
const (
	StateQueued      = "queued"
	StateBuilding    = "building"
	StateDispatching = "dispatching"
	StateRunning     = "running"
	StateFetching    = "fetching"
	StateSuccess     = "success"
	StateError       = "error"
	StateCancelled   = "cancelled"
)

// Finished reports whether a state is final.
func Finished(state string) bool {
	return state == StateSuccess || state == StateError || state == StateCancelled
}

// Names of the files of a run directory.
const (
	RecordFile      = "run.json"
	SpecFile        = "spec.json"
	BundleDir       = "bundle"
	BundleArchive   = "bundle.tar.gz"
	EventsFile      = "events.jsonl"
	LogFile         = "run.log"
	AgentLogFile    = "agent.log"
	StdoutFile      = "stdout.log"
	StderrFile      = "stderr.log"
	PredictionsFile = "predictions.jsonl"
	ArtifactsDir    = "artifacts"
	SocketFile      = "agent.sock"
	CancelFile      = "cancel"
	ExitCodeFile    = "exit_code"
	// DispatchLockFile is held, flock(2), by a run's dispatch while it lives.
	DispatchLockFile = "dispatch.lock"
	// ReserveFile keeps room on the disk for a run's end (Run.Finish).
	ReserveFile = ".reserve"
	queueLock   = "queue.lock"
)

// GoneError is the error of a run whose dispatch died before it finished,
// and CodeLost its error_code.
const (
	GoneError = "the dispatch process for this run is gone"
	CodeLost  = "dispatch_lost"
)

// Root is a project's training/ directory.
type Root struct {
	Dir string
}

// Open makes sure dir/runs exists and returns the root.
func Open(dir string) (*Root, error) {
	if err := os.MkdirAll(filepath.Join(dir, "runs"), 0o755); err != nil {
		return nil, err
	}
	return &Root{Dir: dir}, nil
}

// RunDir is the directory of run id.
func (r *Root) RunDir(id string) string { return filepath.Join(r.Dir, "runs", id) }

// NewID makes a run id in Potato's format, which sorts by time: UTC as
// YYYYMMDDTHHMMSS, "-" and 6 lowercase hex digits, 20260820T031500-a1b2c3.
// Ids made before (20261202-135501-7f3a) remain valid.
func NewID(t time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return t.UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// ValidID reports whether s has the shape of a run id, so that it can be
// joined to a path safely.
func ValidID(s string) bool {
	if len(s) < 8 || len(s) > 64 || strings.HasPrefix(s, ".") {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Run is one run directory, held by its dispatch.
type Run struct {
	ID   string
	Dir  string
	root *Root

	mu     sync.Mutex
	rec    Record
	lock   *os.File // dispatch.lock, held while the dispatch lives
	logF   *os.File
	closed bool
}

// Create makes the run directory of rec (rec.RunID set, or a new id),
// takes its dispatch lock and writes the record, state queued. The lock is
// taken before run.json exists, so a reader that sees the record can tell
// whether its dispatch is alive.
func (r *Root) Create(rec Record) (*Run, error) {
	if rec.RunID == "" {
		rec.RunID = NewID(time.Now())
	}
	if !ValidID(rec.RunID) {
		return nil, fmt.Errorf("run id %q: use letters, digits, - and _", rec.RunID)
	}
	dir := r.RunDir(rec.RunID)
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("run %s exists already", rec.RunID)
		}
		return nil, err
	}
	run, err := r.create(dir, rec)
	if err != nil {
		// A run that could not be recorded leaves nothing behind.
		os.RemoveAll(dir)
		return nil, err
	}
	return run, nil
}

// reserveSize is the room kept for a run's end: its last run.json and
// exit_code, written as .name.tmp and renamed, with a margin for the log.
const reserveSize = 64 << 10

func (r *Root) create(dir string, rec Record) (*Run, error) {
	lock, err := lockFile(filepath.Join(dir, DispatchLockFile), true)
	if err != nil {
		return nil, err
	}
	logF, err := os.OpenFile(filepath.Join(dir, LogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		lock.Close()
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ReserveFile), make([]byte, reserveSize), 0o644); err != nil {
		logF.Close()
		lock.Close()
		return nil, fmt.Errorf("no room for run %s in %s: %w", rec.RunID, r.Dir, err)
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = time.Now().UTC()
	}
	if rec.State == "" {
		rec.State = StateQueued
	}
	if rec.Params == nil {
		rec.Params = map[string]string{}
	}
	rec.PID = os.Getpid()
	run := &Run{ID: rec.RunID, Dir: dir, root: r, rec: rec, lock: lock, logF: logF}
	if err := run.write(); err != nil {
		run.Close()
		return nil, err
	}
	return run, nil
}

// Path is a file of the run directory.
func (run *Run) Path(name string) string { return filepath.Join(run.Dir, name) }

// Record returns a copy of the current record.
func (run *Run) Record() Record {
	run.mu.Lock()
	defer run.mu.Unlock()
	return run.rec
}

// Update changes the record and writes it atomically.
func (run *Run) Update(fn func(*Record)) error {
	run.mu.Lock()
	defer run.mu.Unlock()
	fn(&run.rec)
	return run.write()
}

func (run *Run) write() error {
	write := func() error { return WriteJSONFile(run.Path(RecordFile), run.rec, 0o644) }
	if Finished(run.rec.State) {
		return run.atEnd(write)
	}
	return write()
}

// atEnd does one of the writes of a run's end: on a full disk it gives
// up the room the run kept (ReserveFile) and tries again, so that the
// end, and the full disk that caused it, is recorded.
func (run *Run) atEnd(write func() error) error {
	err := write()
	if errors.Is(err, syscall.ENOSPC) && os.Remove(run.Path(ReserveFile)) == nil {
		err = write()
	}
	return err
}

// Logf appends a line "2026-12-02T13:55:01Z message" to run.log. The
// message's control characters are escaped (CleanText), and each of its
// further lines is indented, so that what a trainer or an agent said can
// neither act on a terminal nor pass for a line of its own.
func (run *Run) Logf(format string, args ...any) {
	run.AppendLog(LogLine(fmt.Sprintf(format, args...)))
}

// LogLine is msg as Logf writes it to run.log, newline included: for a
// writer that weighs the line before it appends it (AppendLog).
func LogLine(msg string) string {
	msg = CleanText(msg)
	msg = strings.ReplaceAll(strings.TrimRight(msg, "\n"), "\n", "\n    ")
	return time.Now().UTC().Format(time.RFC3339) + " " + msg + "\n"
}

// AppendLog appends a line made by LogLine to run.log.
func (run *Run) AppendLog(line string) {
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.logF != nil {
		_, _ = run.logF.WriteString(line)
	}
}

// Finish writes exit_code, the last file of a run, once.
func (run *Run) Finish(code int) error {
	p := run.Path(ExitCodeFile)
	if _, err := os.Stat(p); err == nil {
		return fmt.Errorf("run %s is finished already", run.ID)
	}
	if err := run.atEnd(func() error { return atomicfile.WriteFile(p, []byte(strconv.Itoa(code)+"\n"), 0o644) }); err != nil {
		return err
	}
	os.Remove(run.Path(ReserveFile))
	return nil
}

// Close releases the dispatch lock and the log.
func (run *Run) Close() {
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.closed {
		return
	}
	run.closed = true
	if run.logF != nil {
		run.logF.Close()
	}
	if run.lock != nil {
		run.lock.Close()
	}
}
