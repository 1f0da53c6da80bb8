package trainer

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"potato-training/lib/events"
)

// relayAllocBound is the most the relay of one hostile line may allocate
// (docs/reliability.md): what is held of a line stops near events.MaxLine
// (1 MiB) however long the line is.
const relayAllocBound = 8 << 20

// TestRelayLongLine runs a real process that prints a 10 MB line between
// two events: both events are relayed, the long line goes on as one log
// line cut near MaxLine, and the relay allocates within relayAllocBound.
func TestRelayLongLine(t *testing.T) {
	script := `printf '%s\n' '{"v":1,"event":"log","t":1,"level":"info","msg":"before"}'
head -c 10485760 /dev/zero | tr '\0' x
printf '\n%s\n' '{"v":1,"event":"log","t":2,"level":"info","msg":"after"}'`
	p, err := Start(Command{Path: "/bin/sh", Args: []string{"-c", script}, Env: os.Environ(), Stderr: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	var got []events.Event
	var lines []string
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p.Relay(func(e events.Event) { got = append(got, e) }, func(s string) { lines = append(lines, s) })
	runtime.ReadMemStats(&after)
	if len(got) != 2 || got[0].String("msg") != "before" || got[1].String("msg") != "after" {
		t.Errorf("events %+v, want before and after", got)
	}
	if len(lines) != 1 || len(lines[0]) < events.MaxLine || len(lines[0]) > events.MaxLine+128<<10 || strings.Trim(lines[0], "x") != "" {
		t.Errorf("%d log lines, want one of x cut near %d bytes", len(lines), events.MaxLine)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > relayAllocBound {
		t.Errorf("relaying a 10 MB line allocated %d MB, bound %d MB", n>>20, relayAllocBound>>20)
	}
}
