// Package rundir implements the run directory described in
// potato-rundir(5): one directory per run under training/runs/, its
// record run.json, its log, the exit_code file written last, and the queue
// that lets one run execute at a time.
package rundir

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"potato-training/lib/atomicfile"
	"potato-training/lib/curve"
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

// Progress is the last progress event's content.
type Progress struct {
	Phase   string  `json:"phase"`
	Current float64 `json:"current"`
	Total   float64 `json:"total"`
	EtaS    float64 `json:"eta_s,omitempty"`
	// At is when the dispatch wrote it: eta_s counts from then.
	At *time.Time `json:"at,omitempty"`
}

// Heldout is the score of the test split's predictions (SPEC B8).
type Heldout struct {
	Schema   string  `json:"schema,omitempty"`
	N        int     `json:"n"`
	Accuracy float64 `json:"accuracy"`
	MacroF1  float64 `json:"macro_f1"`
}

// Record is run.json. New fields may be added; readers ignore unknown ones.
type Record struct {
	RunID       string            `json:"run_id"`
	Project     string            `json:"project,omitempty"`
	Trainer     string            `json:"trainer"`
	Schemas     []string          `json:"schemas"`
	Params      map[string]string `json:"params"`
	Backend     string            `json:"backend"`
	BackendType string            `json:"backend_type"`
	RanOn       string            `json:"ran_on"`
	State       string            `json:"state"`
	Step        string            `json:"step"`
	Progress    *Progress         `json:"progress,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	StartedAt   *time.Time        `json:"started_at,omitempty"`
	FinishedAt  *time.Time        `json:"finished_at,omitempty"`
	ExitCode    *int              `json:"exit_code,omitempty"`
	Error       string            `json:"error,omitempty"`
	ErrorCode   string            `json:"error_code,omitempty"`
	Metrics     map[string]any    `json:"metrics,omitempty"`
	Heldout     *Heldout          `json:"heldout,omitempty"`
	ArtifactURI string            `json:"artifact_uri,omitempty"`
	Writeback   map[string]int    `json:"writeback,omitempty"`
	Trigger     string            `json:"trigger"`
	Device      string            `json:"device,omitempty"`
	// Precision is the precision a torch trainer reported training in.
	Precision   string `json:"precision,omitempty"`
	PID         int    `json:"pid,omitempty"`
	Host        string `json:"host,omitempty"`
	AgentSocket string `json:"agent_socket,omitempty"`
	// ModelVersion is the result event's model_version.
	ModelVersion string `json:"model_version,omitempty"`
	// StoreError is the last failed write to Potato's store, with the
	// store's path; empty when the store holds what run.json says.
	StoreError string `json:"store_error,omitempty"`
	// WritebackPending is set when the run trained but its predictions or
	// its run row are not in Potato's store: potato-dispatch writeback
	// applies them.
	WritebackPending bool `json:"writeback_pending,omitempty"`
	// RetractedAt is when potato-dispatch retract first deleted the run's
	// prelabels from Potato's store; Writeback's n_retracted counts them.
	RetractedAt *time.Time `json:"retracted_at,omitempty"`
	// Curve is a learning curve run's: its points, then, once scored, each
	// schema's curve (potato-rundir(5)).
	Curve *curve.Curve `json:"curve,omitempty"`
	// Promotion is, under writeback.promote: if_better, the decision of
	// each writeback schema of the run, by schema.
	Promotion map[string]Promotion `json:"promotion,omitempty"`
	// Calibration is, by schema, how the dispatch calibrated the
	// confidences of the run's predictions (Calibration).
	Calibration map[string]Calibration `json:"calibration,omitempty"`
}

// Promotion is the promotion gate's decision for one schema of a run:
// whether its prelabels were published, its macro-F1 and that of the run
// published before (Against), both on the same N test items and today's
// labels, and the sentence the log, status and page show.
type Promotion struct {
	Published      bool    `json:"published"`
	MacroF1        float64 `json:"macro_f1"`
	Against        string  `json:"against,omitempty"`
	AgainstMacroF1 float64 `json:"against_macro_f1,omitempty"`
	N              int     `json:"n"`
	Reason         string  `json:"reason"`
	// Bootstrap is the paired bootstrap of the two runs' macro-F1s on
	// the N common test items; absent when there was nothing to compare.
	Bootstrap *Bootstrap `json:"bootstrap,omitempty"`
}

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

// WriteJSON writes v as the toolkit writes every JSON record and --json
// report: indented two spaces, with a final newline.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteJSONFile writes v to path as WriteJSON words it, by atomicfile.WriteFile.
func WriteJSONFile(path string, v any, perm os.FileMode) error {
	var b bytes.Buffer
	if err := WriteJSON(&b, v); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, b.Bytes(), perm)
}

// Info is what a reader knows of a run: its record, as run.json has it,
// corrected for a dispatch that is gone.
type Info struct {
	Record
	// ExitCodeFile is the content of exit_code, when the run is over.
	Finished bool `json:"-"`
	Gone     bool `json:"-"`
}

// Read returns a run's record. A run with no exit_code whose dispatch lock
// is free lost its dispatch: it is reported failed with GoneError.
func (r *Root) Read(id string) (Info, error) {
	if !ValidID(id) {
		return Info{}, fmt.Errorf("no run %q", id)
	}
	dir := r.RunDir(id)
	// exit_code is written after the final run.json, so it is read first:
	// a run found finished then has its final record.
	code, codeErr := os.ReadFile(filepath.Join(dir, ExitCodeFile))
	b, err := os.ReadFile(filepath.Join(dir, RecordFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Info{}, fmt.Errorf("no run %s", id)
		}
		return Info{}, err
	}
	var info Info
	if err := json.Unmarshal(b, &info.Record); err != nil {
		return Info{}, fmt.Errorf("run %s: run.json: %w", id, err)
	}
	if codeErr == nil {
		info.Finished = true
		if n, err := strconv.Atoi(strings.TrimSpace(string(code))); err == nil && info.ExitCode == nil {
			info.ExitCode = &n
		}
		return info, nil
	}
	if !lockHeld(filepath.Join(dir, DispatchLockFile)) {
		// The dispatch may have finished since exit_code was looked for.
		if _, err := os.Stat(filepath.Join(dir, ExitCodeFile)); err == nil {
			return r.Read(id)
		}
		info.Gone = true
		info.State = StateError
		info.Error = GoneError
		info.ErrorCode = CodeLost
	}
	return info, nil
}

// List returns every run, oldest first.
func (r *Root) List() ([]Info, error) { return r.list(r.Read) }

// Cache keeps the records of finished runs between listings, for a
// reader that lists often, such as the page's polls: a finished run is
// read again only when its run.json changes (modification time or
// size). The zero Cache is ready to use. The Infos it returns share their
// maps between listings: a caller does not change them.
type Cache struct {
	mu   sync.Mutex
	runs map[string]cached
}

type cached struct {
	info Info
	mod  time.Time
	size int64
}

// List is Root.List through the cache.
func (c *Cache) List(r *Root) ([]Info, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[string]cached{}
	}
	seen := map[string]bool{}
	out, err := r.list(func(id string) (Info, error) {
		seen[id] = true
		st, err := os.Stat(filepath.Join(r.RunDir(id), RecordFile))
		if err != nil {
			return Info{}, err
		}
		if e, ok := c.runs[id]; ok && e.mod.Equal(st.ModTime()) && e.size == st.Size() {
			return e.info, nil
		}
		info, err := r.Read(id)
		if err == nil && info.Finished {
			c.runs[id] = cached{info: info, mod: st.ModTime(), size: st.Size()}
		}
		return info, err
	})
	for id := range c.runs {
		if !seen[id] {
			delete(c.runs, id)
		}
	}
	return out, err
}

func (r *Root) list(read func(id string) (Info, error)) ([]Info, error) {
	entries, err := os.ReadDir(filepath.Join(r.Dir, "runs"))
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, e := range entries {
		if !e.IsDir() || !ValidID(e.Name()) {
			continue
		}
		info, err := read(e.Name())
		if err != nil {
			continue // a run being created has no run.json yet
		}
		out = append(out, info)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].RunID < out[j].RunID
	})
	return out, nil
}

// tailWindow bounds what TailLines reads: the last lines that fit in it.
const tailWindow = 64 << 10

// TailLines returns the last n lines of a file, for status and the page.
// For a run's events.jsonl that was compressed (CompressEvents), it reads
// events.jsonl.gz.
func TailLines(path string, n int) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && filepath.Base(path) == EventsFile {
		return tailEvents(filepath.Dir(path), n)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(st.Size()-tailWindow, 0)
	if _, err := f.Seek(off, 0); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), tailWindow+1)
	var lines []string
	first := off > 0
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return lines, sc.Err()
}

// ErrBusy is returned by Edit and SettleLost when a live dispatch, or
// another editor, holds the run.
var ErrBusy = errors.New("the run is held by its dispatch")

// Edit changes the record of a run that no dispatch holds: it takes the
// run's dispatch lock (failing with ErrBusy when it is held), reads
// run.json, calls fn, and writes run.json atomically when fn returns nil,
// then exit_code when the record is finished and exit_code does not say
// its exit_code. fn sees whether exit_code exists. Holding the lock, no
// dispatch, other Edit or SettleLost changes the run meanwhile.
func (r *Root) Edit(id string, fn func(rec *Record, finished bool) error) error {
	if !ValidID(id) {
		return fmt.Errorf("no run %q", id)
	}
	dir := r.RunDir(id)
	if _, err := os.Stat(filepath.Join(dir, RecordFile)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("no run %s", id)
		}
		return err
	}
	lock, err := lockIdle(dir, id)
	if err != nil {
		return err
	}
	defer lock.Close()
	b, err := os.ReadFile(filepath.Join(dir, RecordFile))
	if err != nil {
		return err
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("run %s: run.json: %w", id, err)
	}
	_, err = os.Stat(filepath.Join(dir, ExitCodeFile))
	if err := fn(&rec, err == nil); err != nil {
		return err
	}
	if Finished(rec.State) {
		// The room a dead dispatch kept for the run's end.
		os.Remove(filepath.Join(dir, ReserveFile))
	}
	if err := WriteJSONFile(filepath.Join(dir, RecordFile), rec, 0o644); err != nil {
		return err
	}
	// exit_code, last, says what run.json says.
	if !Finished(rec.State) || rec.ExitCode == nil {
		return nil
	}
	want := strconv.Itoa(*rec.ExitCode) + "\n"
	if have, err := os.ReadFile(filepath.Join(dir, ExitCodeFile)); err == nil && string(have) == want {
		return nil
	}
	return atomicfile.WriteFile(filepath.Join(dir, ExitCodeFile), []byte(want), 0o644)
}

// SettleLost ends a run whose dispatch is gone (no exit_code, nobody holds
// dispatch.lock): it sets the terminal state error, error_code
// dispatch_lost, the time and exit code 1 (and writeback_pending when the
// run had collected its predictions), calls store with that record
// (to write Potato's store; its error is kept as store_error), writes
// run.json atomically and then exit_code, all under the run's lock. It
// does this once: the lock
// keeps two callers apart and exit_code tells the later one it is done.
// It reports whether it settled the run; a run that is alive or finished
// is left alone.
func (r *Root) SettleLost(id string, store func(Record) error) (bool, error) {
	settled := false
	err := r.Edit(id, func(rec *Record, finished bool) error {
		if finished {
			return errUnchanged
		}
		now := time.Now().UTC()
		code := 1
		rec.State, rec.Error, rec.ErrorCode = StateError, GoneError, CodeLost
		rec.Step = "failed: " + GoneError
		rec.FinishedAt, rec.ExitCode = &now, &code
		rec.StoreError = ""
		// predictions.jsonl is in the run directory only whole: a local
		// run's is renamed there in the collection, a remote run's is
		// stored by rename once its upload ended, after the trainer's
		// result. A dispatch lost after that (copying the model back,
		// writing back) leaves them for potato-dispatch writeback.
		if _, err := os.Stat(filepath.Join(r.RunDir(id), PredictionsFile)); err == nil {
			rec.WritebackPending = true
		}
		if store != nil {
			if err := store(*rec); err != nil {
				rec.StoreError = err.Error()
			}
		}
		settled = true
		return nil
	})
	switch {
	case errors.Is(err, errUnchanged), errors.Is(err, ErrBusy):
		return false, nil
	case err != nil:
		return false, err
	}
	return settled, nil
}

var errUnchanged = errors.New("unchanged")

func tailEvents(dir string, n int) ([]string, error) {
	rc, err := OpenEvents(dir)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 0, 64<<10), 2<<20)
	var lines []string
	size := 0
	for sc.Scan() {
		lines = append(lines, sc.Text())
		size += len(sc.Text()) + 1
		// The same bound as a plain file's tail: its last tailWindow
		// bytes, so that a few long lines cannot make the answer large.
		for len(lines) > n || (size > tailWindow && len(lines) > 0) {
			size -= len(lines[0]) + 1
			lines = lines[1:]
		}
	}
	return lines, sc.Err()
}
