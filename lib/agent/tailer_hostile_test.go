package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/internal/memtest"
	"potato-training/lib/events"
)

// lineAllocBound is the most the relay of one hostile line may allocate
// (docs/reliability.md): what is held of a line stops at events.MaxLine
// (1 MiB) and a 64 KiB buffer, however long the line is, so a 10 MB line
// stays far below it; reading that line whole, as the tailer once did
// (ReadBytes and the join of its parts), allocated 27 MB.
const lineAllocBound = 8 << 20

// TestTailerLongLine writes a SLURM job's events file the way a job does,
// in pieces, with a 10 MB line between two events: the events before and
// after it arrive, the long line goes on as one log line of at most 4096
// bytes, and the tailer allocates within lineAllocBound.
func TestTailerLongLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []events.Event
	var raw []string
	tl := &tailer{path: path, emit: func(e events.Event) { got = append(got, e) }, raw: func(s string) { raw = append(raw, s) }}
	write := func(b []byte) {
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	write(events.Log("info", "before").Line())
	long := bytes.Repeat([]byte("x"), 10<<20)
	n := memtest.Allocated(func() {
		// The long line arrives in three reads, the last with its end.
		write(long[:3<<20])
		tl.read()
		write(long[3<<20 : 7<<20])
		tl.read()
		write(long[7<<20:])
		write([]byte("\n"))
		write(events.Log("info", "after").Line())
		tl.read()
		tl.flush()
	})
	if len(got) != 2 || got[0].String("msg") != "before" || got[1].String("msg") != "after" {
		t.Errorf("events %+v, want before and after", got)
	}
	if len(raw) != 1 || len(raw[0]) != 4096 || strings.Trim(raw[0], "x") != "" {
		t.Errorf("%d log lines (first %.40q), want one of 4096 x", len(raw), raw)
	}
	if n > lineAllocBound {
		t.Errorf("tailing a 10 MB line allocated %d MB, bound %d MB", n>>20, lineAllocBound>>20)
	}
}

// TestTailerPartialLine checks that a line without its newline yet waits
// for the next read, and that flush hands on a last line without one.
func TestTailerPartialLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	line := events.Log("info", "split").Line()
	var got []events.Event
	tl := &tailer{path: path, emit: func(e events.Event) { got = append(got, e) }, raw: func(string) {}}
	if err := os.WriteFile(path, line[:10], 0o644); err != nil {
		t.Fatal(err)
	}
	tl.read()
	if len(got) != 0 {
		t.Fatalf("an event from half a line: %+v", got)
	}
	if err := os.WriteFile(path, append(line, line[:len(line)-1]...), 0o644); err != nil {
		t.Fatal(err)
	}
	tl.read()
	if len(got) != 1 || got[0].String("msg") != "split" {
		t.Fatalf("events %+v, want the split line", got)
	}
	tl.flush()
	if len(got) != 2 {
		t.Fatalf("flush: events %+v, want the last line too", got)
	}
}
