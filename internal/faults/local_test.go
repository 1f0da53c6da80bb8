//go:build faults

package faults

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"potato-training/internal/testproject"
	"potato-training/internal/teststore"
	"potato-training/lib/bundle"
	"potato-training/lib/rundir"
)

// The faults of a run on the local backend: the dispatch or the training
// process killed, the disk under annotation_output full, Potato's store
// locked by another writer.

// localIntegrity is PRAGMA integrity_check of Potato's store: "ok" when SQLite
// finds nothing wrong.
func (p *project) localIntegrity() string {
	p.t.Helper()
	var res string
	if err := teststore.OpenDB(p.t, p.store).QueryRow(`PRAGMA integrity_check`).Scan(&res); err != nil {
		p.t.Fatalf("integrity_check: %v", err)
	}
	if res != "ok" {
		p.t.Errorf("Potato's store is damaged: integrity_check says %q", res)
	}
	return res
}

// localLogHas reports whether the run's run.log has a line containing s.
func (p *project) localLogHas(id, s string) bool {
	return strings.Contains(p.File(id, rundir.LogFile), s)
}

// localWriteback is potato-dispatch writeback CONFIG ID; it fails the
// test unless it succeeds.
func (p *project) localWriteback(id string) string {
	p.t.Helper()
	code, out, errb := testproject.Exec(p.t, p.Command("potato-dispatch", "writeback", p.Config, id))
	if code != 0 {
		p.t.Fatalf("potato-dispatch writeback: exit %d: %s%s", code, out, errb)
	}
	return strings.TrimSpace(out + errb)
}

// The fault: kill -9 of the dispatch while it builds the bundle. The
// window is made with a named pipe: the project's data file is a FIFO the
// test feeds, as a data file on a stalled network mount reads, and the
// kill comes once the dispatch has read half of it (a write to a pipe
// returns when all but the pipe's buffer is read) and waits for the rest.
// Expected: error (dispatch_lost) in run.json, the store and the page; no
// prediction was produced; the half-built bundle blocks nothing, and the
// next run succeeds.
func testLocalKillDispatchMidBuild(t *testing.T) {
	p := newProject(t, "", 4000, 200, "")
	data := filepath.Join(p.Dir, "data", "items.jsonl")
	items, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(data); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Read-write, so that the open does not wait for a reader.
	fifo, err := os.OpenFile(data, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fifo.Close()
	half := items[:bytes.IndexByte(items[len(items)/2:], '\n')+len(items)/2+1]
	id := p.Detach("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	fed := make(chan error, 1)
	go func() { _, err := fifo.Write(half); fed <- err }()
	testproject.WaitFor(t, "the dispatch to read half the data file", func() bool {
		select {
		case err := <-fed:
			if err != nil {
				t.Fatal(err)
			}
			return true
		default:
			return false
		}
	})
	if st := p.Info(id).State; st != rundir.StateBuilding {
		t.Fatalf("the run is %s, want %s while the data file is half read", st, rundir.StateBuilding)
	}
	p.killDispatch(id)
	fifo.Close()
	// The data file becomes a plain file again, for the page and the next run.
	tmp := data + ".tmp"
	if err := os.WriteFile(tmp, items, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, data); err != nil {
		t.Fatal(err)
	}

	f := p.settled(id, rundir.StateError, rundir.CodeLost, 30*time.Second)
	_, merr := bundle.ReadManifest(filepath.Join(p.Root().RunDir(id), rundir.BundleDir))
	if merr == nil {
		t.Errorf("the bundle has a manifest: the kill came after the build")
	}
	stored, kept := p.predictions(id)
	record(t, "kill -9 of the dispatch mid-build", "error/dispatch_lost; next run succeeds",
		fmt.Sprintf("%s; bundle without manifest: %t; %d predictions produced; %s", f, merr != nil, stored+kept, p.nextRunSucceeds()))
}

// The fault: kill -9 of the dispatch while it writes the predictions into
// Potato's store. The window is the write-back of 200,000 predictions
// (include_unlabeled predicts every unlabelled item), a few seconds long;
// the kill comes when the log says the held-out score, the step just
// before. Expected: the store intact (integrity_check ok) with none of the
// run's predictions half-written; error (dispatch_lost) in run.json, the
// store and the page, writeback_pending in run.json; predictions.jsonl
// still in the run directory, and potato-dispatch writeback then writes
// every one of its predictions and makes the run a success; the next run
// succeeds.
func testLocalKillDispatchMidWriteback(t *testing.T) {
	p := newProject(t, "", 200000, 200, "")
	id := p.Detach("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	testproject.WaitFor(t, "the write-back", func() bool { return p.localLogHas(id, "held-out score of sentiment") })
	p.killDispatch(id)
	if p.localLogHas(id, "write-back to ") {
		t.Fatalf("the write-back was over before the kill: make the project larger\n%s", p.File(id, rundir.LogFile))
	}
	ok := p.localIntegrity()
	f := p.settled(id, rundir.StateError, rundir.CodeLost, 30*time.Second)
	storedAtKill, kept := p.predictions(id)
	if kept == 0 {
		t.Fatalf("no %s in the run directory after the kill", rundir.PredictionsFile)
	}
	pending := p.Info(id).WritebackPending
	if !pending {
		t.Errorf("run.json of the lost run lacks writeback_pending")
	}
	wb := p.localWriteback(id)
	stored, _ := p.predictions(id)
	if stored != kept {
		t.Errorf("potato-dispatch writeback: %d predictions in the store, want the %d of %s: %s", stored, kept, rundir.PredictionsFile, wb)
	}
	after := p.settled(id, rundir.StateSuccess, "", 30*time.Second)
	record(t, "kill -9 of the dispatch mid-write-back",
		"store ok; error/dispatch_lost; predictions.jsonl kept; writeback writes them all; next run succeeds",
		fmt.Sprintf("integrity %s; %s, writeback_pending %t; %d of %d in the store at the kill; after writeback %d of %d, %s; %s",
			ok, f, pending, storedAtKill, kept, stored, kept, after.file, p.nextRunSucceeds()))
}

// The fault: kill -9 of the training process (the pid the run log
// names) while it fits, as the kernel's OOM killer does. Expected: error (out_of_memory) in run.json, the store
// and the page, with the message that the process was killed (SIGKILL);
// it had produced no prediction; the next run succeeds.
func testLocalKillTrainer(t *testing.T) {
	p := newProject(t, "", 120, 100, "")
	id := p.Detach(p.localEndless().Args()...)
	p.fitting(t, id)
	if err := syscall.Kill(p.trainer(id).pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	f := p.settled(id, rundir.StateError, "out_of_memory", 60*time.Second)
	msg := p.Info(id).Error
	if !strings.Contains(msg, "killed (SIGKILL)") {
		t.Errorf("run.json error %q does not say the process was killed (SIGKILL)", msg)
	}
	stored, kept := p.predictions(id)
	record(t, "kill -9 of the training process", `error/out_of_memory, "killed (SIGKILL)"; next run succeeds`,
		fmt.Sprintf("%s; %q; %d predictions produced; %s", f, msg, stored+kept, p.nextRunSucceeds()))
}

// localFill writes the file path until the file system holding it has
// only free bytes left (0: until it is full).
func localFill(t *testing.T, path string, free int64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	left := int64(st.Bavail)*st.Bsize - free
	buf := make([]byte, 64<<10)
	for free == 0 || left > 0 {
		n := min(left, int64(len(buf)))
		if free == 0 {
			n = int64(len(buf))
		}
		if _, err := f.Write(buf[:n]); err != nil {
			if free == 0 && errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
		left -= n
	}
}

// The fault: the disk under annotation_output/training is full: a tmpfs
// of 8 MiB mounted there, filled by another file after a first run
// succeeded. First it has 128 KiB left, room for the run's record but
// not for its bundle; then it fills while the trainer fits, so that its
// model and predictions do not fit; then it has no room at all.
// Expected: with room for the record, error (bad_bundle) in run.json, the
// store and the page, its message saying "no space left on device"; when
// it fills during the fit, error (fit_failed) alike, written with the room
// the run kept for its end (.reserve); with none, potato-dispatch run exits
// 1 with an error on stderr that says so, and leaves no run behind.
// Potato's store stays intact (integrity_check ok) and keeps the first
// run's prelabels; once the file is removed, the next run succeeds.
func testLocalDiskFull(t *testing.T) {
	p := newProject(t, "", 2000, 200, "")
	dir := p.Root().Dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	first := p.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	if first.Code != 0 {
		t.Fatalf("the first run: exit %d: %s", first.Code, first.Stderr)
	}
	prelabels, _ := p.predictions(first.ID)
	filler := filepath.Join(dir, "filler")

	localFill(t, filler, 128<<10)
	r := p.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	if r.Code != 1 || r.ID == "" {
		t.Fatalf("with 128 KiB left: exit %d, id %q, want 1 and a run: %s", r.Code, r.ID, r.Stderr)
	}
	f := p.settled(r.ID, rundir.StateError, "bad_bundle", 30*time.Second)
	msg := p.Info(r.ID).Error
	if !strings.Contains(msg, "no space left on device") || !strings.Contains(r.Stderr, "no space left on device") {
		t.Errorf("run.json error %q and stderr %q should say no space left on device", msg, r.Stderr)
	}
	record(t, "disk full: room for run.json, not the bundle", `error/bad_bundle, "no space left on device"`,
		fmt.Sprintf("exit %d; %s; %q", r.Code, f, msg))

	// The disk fills while the trainer fits: it fits until released, and
	// is stopped (SIGSTOP) while the disk is filled, so that it reports
	// nothing to a disk half full; released, the built-in trainer ends
	// the fit and writes its model and predictions.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	fit := p.localEndless()
	id := p.Detach(fit.Args()...)
	p.fitting(t, id)
	worker := p.trainer(id).pid
	if err := syscall.Kill(worker, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	localFill(t, filler, 0)
	fit.Release(t)
	if err := syscall.Kill(worker, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	f = p.settled(id, rundir.StateError, "fit_failed", 60*time.Second)
	msg = p.Info(id).Error
	if !strings.Contains(msg, "no space left on device") {
		t.Errorf("run.json error %q should say no space left on device", msg)
	}
	record(t, "disk full: fills during the fit", `error/fit_failed, "no space left on device"`, fmt.Sprintf("%s; %q", f, msg))

	localFill(t, filler, 0)
	runs, _ := os.ReadDir(filepath.Join(dir, "runs"))
	full := p.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	after, _ := os.ReadDir(filepath.Join(dir, "runs"))
	if full.Code != 1 || full.ID != "" || !strings.Contains(full.Stderr, "no space left on device") {
		t.Errorf("on a full disk: exit %d, stdout %q, stderr %q; want 1, nothing, no space left on device", full.Code, full.ID, full.Stderr)
	}
	if len(after) != len(runs) {
		t.Errorf("on a full disk the run left a directory behind: %d runs, %d before", len(after), len(runs))
	}
	ok := p.localIntegrity()
	kept, _ := p.predictions(first.ID)
	if kept != prelabels {
		t.Errorf("the first run's prelabels: %d, were %d", kept, prelabels)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	record(t, "disk full: no room at all", `exit 1, "no space left on device" on stderr, no run left; store ok, old prelabels kept; next run succeeds`,
		fmt.Sprintf("exit %d, %q; %d runs left behind; integrity %s; %d of %d prelabels of the first run; %s",
			full.Code, strings.TrimSpace(full.Stderr), len(after)-len(runs), ok, kept, prelabels, p.nextRunSucceeds()))
}

// localLock takes the write lock of Potato's store (BEGIN EXCLUSIVE), as
// another writer holding a long transaction does, until release.
func (p *project) localLock() (release func()) {
	p.t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", p.store)
	if err != nil {
		p.t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		p.t.Fatalf("BEGIN EXCLUSIVE: %v", err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			conn.ExecContext(ctx, "ROLLBACK")
			conn.Close()
			db.Close()
		}
	}
	p.t.Cleanup(release)
	return release
}

// localRow is the status of the run's row in Potato's store.
func (p *project) localRow(id string) string {
	p.t.Helper()
	var status string
	if err := teststore.OpenDB(p.t, p.store).QueryRow(`SELECT status FROM training_runs WHERE run_id = ?`, id).Scan(&status); err != nil {
		p.t.Fatalf("the run's row: %v", err)
	}
	return status
}

// localLockedFit starts a run and takes the store's write lock while its
// trainer fits, then releases the fit: the built-in trainer ends it and
// the run reaches its write-back under the lock.
func (p *project) localLockedFit() (id string, release func()) {
	p.t.Helper()
	fit := p.localEndless()
	id = p.Detach(fit.Args()...)
	p.fitting(p.t, id)
	release = p.localLock()
	fit.Release(p.t)
	return id, release
}

// The fault: Potato's store locked by another writer (BEGIN EXCLUSIVE)
// when the run reaches its write-back. The dispatch waits for the lock
// with SQLite's busy timeout, 5 s (lib/writeback's OpenStore). Expected:
// a lock released within it (1 s after the run reaches its write-back)
// costs nothing: success, every prediction in the store; a lock held 30 s
// outlasts it: error (store_failed) in run.json, naming the lock
// ("database is locked"), writeback_pending, predictions.jsonl kept and
// none half-written; once the lock is gone, the next command records the
// run's end, and run.json, the store and the page say error
// (store_failed); potato-dispatch writeback then writes them all and the
// three say success.
func testLocalStoreLocked(t *testing.T) {
	p := newProject(t, "", 2000, 200, "")

	id, release := p.localLockedFit()
	testproject.WaitFor(t, "the write-back", func() bool { return p.Info(id).State == rundir.StateFetching })
	time.Sleep(time.Second) // the dispatch waits for the lock meanwhile
	waited := p.localRow(id)
	release()
	if waited != "running" {
		t.Errorf("the store's row under the lock says %q: the dispatch did not wait for the lock", waited)
	}
	f := p.settled(id, rundir.StateSuccess, "", 60*time.Second)
	stored, kept := p.predictions(id)
	if stored == 0 || stored != kept {
		t.Errorf("%d predictions in the store, %d in %s", stored, kept, rundir.PredictionsFile)
	}
	if p.localLogHas(id, "database is locked") {
		t.Errorf("a lock released within the busy timeout failed a write:\n%s", p.File(id, rundir.LogFile))
	}
	record(t, "store locked 1 s at the write-back", "success; all predictions stored",
		fmt.Sprintf("the store's row %s while locked; %s; %d of %d predictions stored", waited, f, stored, kept))

	id, release = p.localLockedFit()
	locked := time.Now()
	p.Wait(id, 120*time.Second)
	if held := time.Since(locked); held < 30*time.Second {
		time.Sleep(30*time.Second - held)
	}
	info := p.Info(id)
	storedLocked, kept := p.predictions(id)
	ok := p.localIntegrity()
	row := p.localRow(id)
	release()
	// Once the lock is gone, the next command records the run's end.
	end := p.settled(id, rundir.StateError, "store_failed", 30*time.Second)
	if info.State != rundir.StateError || info.ErrorCode != "store_failed" || !info.WritebackPending ||
		!strings.Contains(info.Error, "database is locked") {
		t.Errorf("run.json under the lock: %s/%s pending=%v %q", info.State, info.ErrorCode, info.WritebackPending, info.Error)
	}
	if kept == 0 || storedLocked != 0 {
		t.Errorf("under the lock: %d predictions in the store, %d in %s; want none and all", storedLocked, kept, rundir.PredictionsFile)
	}
	wb := p.localWriteback(id)
	stored, _ = p.predictions(id)
	if stored != kept {
		t.Errorf("potato-dispatch writeback: %d predictions in the store, want %d: %s", stored, kept, wb)
	}
	f = p.settled(id, rundir.StateSuccess, "", 30*time.Second)
	record(t, "store locked 30 s at the write-back",
		`error/store_failed "database is locked", writeback_pending, predictions.jsonl kept; writeback applies them`,
		fmt.Sprintf("run.json %s/%s %q, writeback_pending %t; integrity %s; %d in the store, %d kept; the store's row %s under the lock, then %s; after writeback %d stored, %s",
			info.State, info.ErrorCode, info.Error, info.WritebackPending, ok, storedLocked, kept, row, end, stored, f))
}
