package rundir

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestIDSortsByTime(t *testing.T) {
	a := NewID(time.Date(2026, 12, 2, 13, 55, 1, 0, time.UTC))
	b := NewID(time.Date(2026, 12, 2, 13, 55, 2, 0, time.UTC))
	if !strings.HasPrefix(a, "20261202-135501-") || len(a) != 20 || !(a < b) || !ValidID(a) {
		t.Errorf("ids %q %q", a, b)
	}
	for _, bad := range []string{"", "../etc", ".hidden-run", "a/b", "run id"} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q)", bad)
		}
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
	if !info.Gone || info.State != StateError || info.Error != GoneError {
		t.Errorf("%+v", info)
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
	if err := WriteFileAtomic(filepath.Join(done.Dir, RecordFile), b, 0o644); err != nil {
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
