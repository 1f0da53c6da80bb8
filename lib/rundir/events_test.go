package rundir

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A finished run's events.jsonl becomes events.jsonl.gz, which zcat reads
// back byte for byte and OpenEvents and TailLines read in its place; a
// second call finds nothing to do.
func TestCompressEvents(t *testing.T) {
	root, _ := Open(t.TempDir())
	run, err := root.Create(Record{Trainer: "t"})
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= 500; i++ {
		fmt.Fprintf(&want, `{"v":1,"event":"progress","t":%d.5,"phase":"fit","current":%d,"total":500}`+"\n", i, i)
	}
	if err := os.WriteFile(run.Path(EventsFile), []byte(want.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := root.CompressEvents(run.ID); err == nil || !strings.Contains(err.Error(), "not finished") {
		t.Errorf("a running run's events were compressed (err %v)", err)
	}
	if err := run.Finish(0); err != nil {
		t.Fatal(err)
	}
	run.Close()
	done, err := root.CompressEvents(run.ID)
	if err != nil || !done {
		t.Fatalf("CompressEvents = %v, %v", done, err)
	}
	if _, err := os.Stat(run.Path(EventsFile)); !os.IsNotExist(err) {
		t.Errorf("events.jsonl is still there (%v)", err)
	}
	st, err := os.Stat(run.Path(EventsArchive))
	if err != nil || st.Size() >= int64(want.Len())/4 {
		t.Errorf("events.jsonl.gz: %v, %d bytes of %d", err, st.Size(), want.Len())
	}
	out, err := exec.Command("zcat", run.Path(EventsArchive)).Output()
	if err != nil || string(out) != want.String() {
		t.Errorf("zcat: %v; %d bytes, want the %d of events.jsonl", err, len(out), want.Len())
	}
	rc, err := OpenEvents(run.Dir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != want.String() {
		t.Errorf("OpenEvents read %d bytes, want %d", len(b), want.Len())
	}
	tail, err := TailLines(run.Path(EventsFile), 2)
	if err != nil || len(tail) != 2 || !strings.Contains(tail[1], `"current":500`) {
		t.Errorf("TailLines of the compressed events: %v %q", err, tail)
	}
	if again, err := root.CompressEvents(run.ID); again || err != nil {
		t.Errorf("second CompressEvents = %v, %v; want nothing to do", again, err)
	}
	if _, err := os.Stat(filepath.Join(run.Dir, "."+EventsArchive+".tmp")); !os.IsNotExist(err) {
		t.Errorf("a temporary file is left: %v", err)
	}
}

// A run whose predictions wait for writeback keeps its events.jsonl, and
// a run with no events at all opens as not existing.
func TestCompressEventsRefusesPending(t *testing.T) {
	root, _ := Open(t.TempDir())
	run, err := root.Create(Record{Trainer: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenEvents(run.Dir); !os.IsNotExist(err) {
		t.Errorf("OpenEvents of a run without events: %v, want not exist", err)
	}
	os.WriteFile(run.Path(EventsFile), []byte("{}\n"), 0o644)
	run.Update(func(r *Record) { r.WritebackPending = true })
	run.Finish(1)
	run.Close()
	if done, err := root.CompressEvents(run.ID); done || err == nil {
		t.Errorf("CompressEvents of a run pending writeback = %v, %v", done, err)
	}
	if _, err := os.Stat(run.Path(EventsFile)); err != nil {
		t.Errorf("events.jsonl: %v", err)
	}
}

// The tail of a compressed events.jsonl is bounded as a plain file's is,
// by bytes as well as by lines: a finished run whose last events are
// long lines gives the page its last 64 KiB, not 50 lines of 1 MiB.
func TestTailEventsArchiveBounded(t *testing.T) {
	root, _ := Open(t.TempDir())
	run, err := root.Create(Record{Trainer: "t"})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&b, `{"v":1,"event":"log","t":%d,"level":"info","message":"%s"}`+"\n", i, strings.Repeat("x", 1<<20))
	}
	b.WriteString(`{"v":1,"event":"progress","t":41,"phase":"fit","current":1,"total":1}` + "\n")
	if err := os.WriteFile(run.Path(EventsFile), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(0); err != nil {
		t.Fatal(err)
	}
	run.Close()
	if done, err := root.CompressEvents(run.ID); err != nil || !done {
		t.Fatalf("CompressEvents = %v, %v", done, err)
	}
	tail, err := TailLines(run.Path(EventsFile), 50)
	size := 0
	for _, l := range tail {
		size += len(l) + 1
	}
	if err != nil || len(tail) != 1 || !strings.Contains(tail[0], `"progress"`) || size > tailWindow {
		t.Errorf("TailLines of the archive: %v, %d lines, %d bytes; want the last line alone, at most %d bytes", err, len(tail), size, tailWindow)
	}
}
