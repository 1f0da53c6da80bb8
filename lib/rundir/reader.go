// Reading runs: a run's record as readers know it, the listing and its cache, a file's last lines, and the edits of a run no dispatch holds.

package rundir

import (
	"bufio"
	"bytes"
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
	"time"

	"potato-training/lib/atomicfile"
)

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
