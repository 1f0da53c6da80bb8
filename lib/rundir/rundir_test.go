package rundir

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"potato-training/lib/atomicfile"
)

var potatoID = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}-[0-9a-f]{6}$`)

// Run ids are Potato's: UTC YYYYMMDDTHHMMSS, "-", 6 lowercase hex.
func TestIDIsPotatosAndSortsByTime(t *testing.T) {
	local := time.FixedZone("UTC+2", 2*3600)
	a := NewID(time.Date(2026, 12, 2, 15, 55, 1, 0, local))
	b := NewID(time.Date(2026, 12, 2, 13, 55, 2, 0, time.UTC))
	if !strings.HasPrefix(a, "20261202T135501-") || !potatoID.MatchString(a) || !(a < b) || !ValidID(a) {
		t.Errorf("ids %q %q", a, b)
	}
	if c := NewID(time.Now()); !potatoID.MatchString(c) || c == NewID(time.Now()) {
		t.Errorf("two new ids %q: same, or not Potato's format", c)
	}
	for _, bad := range []string{"", "../etc", ".hidden-run", "a/b", "run id"} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q)", bad)
		}
	}
}

// A run recorded under an id of the old format is read, listed and
// settled as before.
func TestOldIDsStillRead(t *testing.T) {
	root, _ := Open(t.TempDir())
	const old = "20261202-135501-7f3a"
	run, err := root.Create(Record{RunID: old, Trainer: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(0); err != nil {
		t.Fatal(err)
	}
	run.Close()
	next, err := root.Create(Record{Trainer: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	infos, err := root.List()
	if err != nil || len(infos) != 2 || infos[0].RunID != old || infos[1].RunID != next.ID {
		t.Fatalf("List: %v %+v", err, infos)
	}
	if info, err := root.Read(old); err != nil || !info.Finished {
		t.Errorf("Read(%s): %+v %v", old, info, err)
	}
}

func TestRecordAndFinish(t *testing.T) {
	root, _ := Open(t.TempDir())
	run, err := root.Create(Record{Trainer: "t", Schemas: []string{"s"}})
	if err != nil {
		t.Fatal(err)
	}
	run.Logf("hello %d", 1)
	run.Update(func(r *Record) { r.State = StateRunning })
	info, err := root.Read(run.ID)
	if err != nil || info.State != StateRunning || info.Gone || info.Finished {
		t.Fatalf("%+v %v", info, err)
	}
	if err := run.Finish(0); err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(0); err == nil {
		t.Errorf("exit_code written twice")
	}
	run.Close()
	info, _ = root.Read(run.ID)
	if !info.Finished || info.Gone || *info.ExitCode != 0 {
		t.Errorf("finished run: %+v", info)
	}
	b, _ := os.ReadFile(filepath.Join(run.Dir, LogFile))
	if !strings.HasSuffix(string(b), "Z hello 1\n") {
		t.Errorf("run.log %q", b)
	}
	if _, err := root.Create(Record{RunID: run.ID}); err == nil {
		t.Errorf("a run id was reused")
	}
}

// A run whose dispatch let go of its lock without finishing is gone.
func TestGone(t *testing.T) {
	root, _ := Open(t.TempDir())
	run, _ := root.Create(Record{})
	run.Close()
	info, _ := root.Read(run.ID)
	if !info.Gone || info.State != StateError || info.Error != GoneError || info.ErrorCode != CodeLost {
		t.Errorf("%+v", info)
	}
}

// SettleLost writes the end of a run whose dispatch is gone, once, even
// when several callers find it at the same time; it leaves a live run and
// a finished one alone.
func TestSettleLost(t *testing.T) {
	root, _ := Open(t.TempDir())
	live, _ := root.Create(Record{Trainer: "t"})
	defer live.Close()
	if ok, err := root.SettleLost(live.ID, nil); ok || err != nil {
		t.Errorf("SettleLost of a live run: %v %v", ok, err)
	}
	lost, _ := root.Create(Record{Trainer: "t"})
	lost.Update(func(r *Record) { r.State = StateRunning })
	lost.Close() // as a killed dispatch lets go of its lock

	var stored atomic.Int32
	settled := make(chan bool, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := root.SettleLost(lost.ID, func(r Record) error {
				stored.Add(1)
				if r.State != StateError || r.ErrorCode != CodeLost || r.FinishedAt == nil {
					t.Errorf("store got %+v", r)
				}
				return errors.New("disk full")
			})
			if err != nil {
				t.Error(err)
			}
			settled <- ok
		}()
	}
	wg.Wait()
	close(settled)
	n := 0
	for ok := range settled {
		if ok {
			n++
		}
	}
	if n != 1 || stored.Load() != 1 {
		t.Errorf("settled %d times, stored %d times; want once", n, stored.Load())
	}
	b, err := os.ReadFile(filepath.Join(lost.Dir, RecordFile))
	if err != nil {
		t.Fatal(err)
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.State != StateError || rec.ErrorCode != CodeLost || rec.Error != GoneError || rec.FinishedAt == nil ||
		rec.ExitCode == nil || *rec.ExitCode != 1 || rec.StoreError != "disk full" {
		t.Errorf("run.json after SettleLost: %+v", rec)
	}
	if code, _ := os.ReadFile(filepath.Join(lost.Dir, ExitCodeFile)); string(code) != "1\n" {
		t.Errorf("exit_code %q", code)
	}
	info, _ := root.Read(lost.ID)
	if !info.Finished || info.Gone {
		t.Errorf("a settled run reads as %+v", info)
	}
	if ok, _ := root.SettleLost(lost.ID, nil); ok {
		t.Errorf("a settled run was settled again")
	}
}

// A run lost once its predictions.jsonl is in the run directory (which
// it is only whole) is settled pending write-back, whether or not it had
// recorded its artifact_uri (lost copying the model back); one lost
// before is not.
func TestSettleLostAfterCollect(t *testing.T) {
	root, _ := Open(t.TempDir())
	for _, c := range []struct {
		predictions, uri, pending bool
	}{{true, true, true}, {true, false, true}, {false, false, false}} {
		lost, _ := root.Create(Record{Trainer: "t"})
		lost.Update(func(r *Record) { r.State = StateFetching })
		if c.predictions {
			os.WriteFile(lost.Path(PredictionsFile), []byte("{}\n"), 0o644)
		}
		if c.uri {
			lost.Update(func(r *Record) { r.ArtifactURI = "file:///x" })
		}
		lost.Close()
		var pending bool
		if ok, err := root.SettleLost(lost.ID, func(r Record) error { pending = r.WritebackPending; return nil }); !ok || err != nil {
			t.Fatalf("SettleLost: %v %v", ok, err)
		}
		info, _ := root.Read(lost.ID)
		if info.WritebackPending != c.pending || pending != c.pending || info.ErrorCode != CodeLost {
			t.Errorf("%+v: run.json %s pending=%v, the store got pending=%v", c, info.ErrorCode, info.WritebackPending, pending)
		}
	}
}

func TestEditBusyWhileTheDispatchLives(t *testing.T) {
	root, _ := Open(t.TempDir())
	run, _ := root.Create(Record{Trainer: "t"})
	err := root.Edit(run.ID, func(*Record, bool) error { return nil })
	if !errors.Is(err, ErrBusy) {
		t.Errorf("Edit of a live run: %v", err)
	}
	run.Finish(1)
	run.Close()
	err = root.Edit(run.ID, func(r *Record, finished bool) error {
		if !finished {
			t.Errorf("Edit does not see exit_code")
		}
		code := 0
		r.State, r.ExitCode = StateSuccess, &code
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := os.ReadFile(filepath.Join(run.Dir, ExitCodeFile)); string(code) != "0\n" {
		t.Errorf("exit_code after Edit %q, want 0", code)
	}
}

func TestQueueOrder(t *testing.T) {
	root, _ := Open(t.TempDir())
	first, _ := root.Create(Record{})
	second, _ := root.Create(Record{})
	defer first.Close()
	defer second.Close()
	rel1, err := root.Acquire(context.Background(), first, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var ahead string
	if _, err := root.Acquire(ctx, second, func(a string) { ahead = a }); err == nil || ahead != first.ID {
		t.Fatalf("second got the queue while the first held it: %v, ahead %q", err, ahead)
	}
	first.Update(func(r *Record) { r.State = StateSuccess })
	first.Finish(0)
	rel1()
	rel2, err := root.Acquire(context.Background(), second, nil)
	if err != nil {
		t.Fatal(err)
	}
	rel2()
}

func TestTailLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	for i := 0; i < 5000; i++ {
		b.WriteString(strings.Repeat("x", 20) + "\n")
	}
	b.WriteString("last\n")
	os.WriteFile(p, []byte(b.String()), 0o644)
	lines, err := TailLines(p, 3)
	if err != nil || len(lines) != 3 || lines[2] != "last" {
		t.Errorf("%q %v", lines, err)
	}
}

// The cache lists what Root.List lists, and sees a finished run's record
// change, a running run's progress, and a run removed.
func TestCacheList(t *testing.T) {
	root, _ := Open(t.TempDir())
	done, err := root.Create(Record{Trainer: "done"})
	if err != nil {
		t.Fatal(err)
	}
	done.Update(func(r *Record) { r.State = StateSuccess })
	if err := done.Finish(0); err != nil {
		t.Fatal(err)
	}
	done.Close()
	running, err := root.Create(Record{Trainer: "running", CreatedAt: time.Now().Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	running.Update(func(r *Record) { r.State = StateRunning; r.Step = "one" })

	var c Cache
	list := func() []Info {
		t.Helper()
		got, err := c.List(root)
		want, werr := root.List()
		if err != nil || werr != nil || len(got) != len(want) {
			t.Fatalf("cache %d runs (%v), List %d (%v)", len(got), err, len(want), werr)
		}
		for i := range got {
			if got[i].RunID != want[i].RunID || got[i].State != want[i].State || got[i].Step != want[i].Step || got[i].Trainer != want[i].Trainer {
				t.Errorf("run %d: cache %+v, List %+v", i, got[i].Record, want[i].Record)
			}
		}
		return got
	}
	if got := list(); len(got) != 2 || got[0].Trainer != "done" || !got[0].Finished || got[1].Step != "one" {
		t.Fatalf("%+v", got)
	}
	if len(c.runs) != 1 {
		t.Errorf("%d runs cached, want the finished one", len(c.runs))
	}
	running.Update(func(r *Record) { r.Step = "two" })
	// A finished run's record rewritten (a longer trainer name changes
	// its size whatever the clock's resolution).
	rec := done.Record()
	rec.Trainer = "done, then changed"
	b, _ := json.Marshal(rec)
	if err := atomicfile.WriteFile(filepath.Join(done.Dir, RecordFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := list(); got[0].Trainer != "done, then changed" || got[1].Step != "two" {
		t.Errorf("after changes: %+v", got)
	}
	if err := os.RemoveAll(done.Dir); err != nil {
		t.Fatal(err)
	}
	if got := list(); len(got) != 1 || len(c.runs) != 0 {
		t.Errorf("after removal: %d runs, %d cached", len(got), len(c.runs))
	}
}

// A run keeps room for its end (ReserveFile) from its creation until its
// exit_code is written, or until a lost run is settled.
func TestReserveKeptUntilTheEnd(t *testing.T) {
	root, _ := Open(t.TempDir())
	exists := func(run *Run) bool {
		_, err := os.Stat(run.Path(ReserveFile))
		return err == nil
	}
	run, _ := root.Create(Record{Trainer: "t"})
	if !exists(run) {
		t.Fatalf("a new run keeps no room for its end")
	}
	run.Update(func(r *Record) { r.State = StateSuccess })
	if err := run.Finish(0); err != nil {
		t.Fatal(err)
	}
	run.Close()
	if exists(run) {
		t.Errorf("a finished run still keeps its room")
	}
	lost, _ := root.Create(Record{Trainer: "t"})
	lost.Close()
	if ok, err := root.SettleLost(lost.ID, nil); !ok || err != nil {
		t.Fatalf("SettleLost: %v %v", ok, err)
	}
	if exists(lost) {
		t.Errorf("a settled run still keeps its room")
	}
}

// A reader racing a dispatch that ends its run sees either the run going
// on or its final record: never exit_code with the record of before, nor
// a run that just ended reported lost.
func TestReadRacingTheEnd(t *testing.T) {
	root := &Root{Dir: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(root.Dir, "runs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		run, err := root.Create(Record{RunID: NewID(time.Now()), State: StateRunning})
		if err != nil {
			t.Fatal(err)
		}
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			run.Update(func(r *Record) { r.State, r.Error, r.ErrorCode = StateError, "the end", "backend" })
			run.Finish(1)
			run.Close()
		}()
		for done := false; !done; {
			select {
			case <-ended:
				done = true
			default:
			}
			info, err := root.Read(run.ID)
			if err != nil {
				t.Fatal(err)
			}
			if info.Gone || info.Finished && info.Error != "the end" {
				t.Fatalf("run %s read as finished %v, gone %v, %s %q", run.ID, info.Finished, info.Gone, info.State, info.Error)
			}
		}
	}
}

// Cancel asks a live run to stop, and refuses a run that is over: one
// whose run.json holds its final state while its dispatch has yet to write
// exit_code (the order it writes them in), one finished, one gone; none of
// those gets a cancel file.
func TestCancel(t *testing.T) {
	root, _ := Open(t.TempDir())
	cancelled := func(run *Run) bool {
		_, err := os.Stat(run.Path(CancelFile))
		return err == nil
	}
	live, _ := root.Create(Record{})
	defer live.Close()
	live.Update(func(r *Record) { r.State = StateRunning })
	if err := root.Cancel(live.ID); err != nil || !cancelled(live) {
		t.Errorf("live run: %v, cancel file %v", err, cancelled(live))
	}

	ending, _ := root.Create(Record{})
	defer ending.Close()
	ending.Update(func(r *Record) { r.State = StateCancelled })
	if err := root.Cancel(ending.ID); !errors.Is(err, ErrFinished) || cancelled(ending) {
		t.Errorf("final state, no exit_code: %v, cancel file %v", err, cancelled(ending))
	}
	ending.Finish(3)
	if err := root.Cancel(ending.ID); err == nil || err.Error() != "run "+ending.ID+" is finished already (cancelled)" {
		t.Errorf("finished run: %v", err)
	}

	gone, _ := root.Create(Record{})
	gone.Close()
	if err := root.Cancel(gone.ID); !errors.Is(err, ErrGone) || err.Error() != "run "+gone.ID+": "+GoneError || cancelled(gone) {
		t.Errorf("gone run: %v, cancel file %v", err, cancelled(gone))
	}
}
