package events

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"potato-training/internal/testcli"
)

// lines parses what a writer wrote.
func lines(t *testing.T, b []byte) []Event {
	t.Helper()
	var out []Event
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		e, err := Parse(sc.Bytes())
		if err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// A flood of progress and metrics within one interval keeps the first and
// the last of each stream; every other kind passes, after what is held,
// so the last progress comes before the result.
func TestThrottleFlood(t *testing.T) {
	var buf testcli.SyncBuffer
	w := NewThrottledWriter(&buf, time.Hour)
	for i := 1; i <= 10000; i++ {
		w.Emit(Progress("fit", float64(i), 20000, -1))
		w.Emit(Metric("train", "s/loss", 1/float64(i), i))
		w.Emit(Metric("val", "s/loss", 2/float64(i), i))
	}
	w.Emit(Log("info", "fitted"))
	w.Emit(ResultEvent(Result{Status: "success"}))
	w.Emit(Progress("fit", 10001, 20000, -1)) // after the result: held
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Emit(Log("info", "late")); err != ErrClosed {
		t.Errorf("Emit after Close = %v, want ErrClosed", err)
	}
	var got []string
	for _, e := range lines(t, buf.Bytes()) {
		got = append(got, fmt.Sprintf("%s %s%s %g%g", e.Kind, e.String("split"), e.String("name"), e.Number("current"), e.Number("step")))
	}
	want := []string{
		"progress  10", "metric trains/loss 01", "metric vals/loss 01",
		"progress  100000", "metric trains/loss 010000", "metric vals/loss 010000",
		"log  00", "result  00", "progress  100010",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("written:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A new phase and the end of a phase pass at once; the phase before ends
// with its last progress.
func TestThrottlePhases(t *testing.T) {
	var buf testcli.SyncBuffer
	w := NewThrottledWriter(&buf, time.Hour)
	w.Emit(Progress("download", 1, 100, -1))
	w.Emit(Progress("download", 50, 100, -1))
	w.Emit(Progress("fit", 1, 3, -1))
	w.Emit(Progress("fit", 2, 3, -1))
	w.Emit(Progress("fit", 3, 3, -1))
	var got []string
	for _, e := range lines(t, buf.Bytes()) {
		got = append(got, fmt.Sprintf("%s %g", e.String("phase"), e.Number("current")))
	}
	// Nothing is held: no Flush needed.
	if want := "download 1,download 50,fit 1,fit 3"; strings.Join(got, ",") != want {
		t.Errorf("written %s, want %s", strings.Join(got, ","), want)
	}
}

// An event held is written when its interval is over, with no later event
// to push it out: a trainer that goes quiet after a burst still shows its
// last progress.
func TestThrottleWritesHeldLater(t *testing.T) {
	var buf testcli.SyncBuffer
	w := NewThrottledWriter(&buf, 20*time.Millisecond)
	defer w.Close()
	w.Emit(Progress("fit", 1, 10, -1))
	w.Emit(Progress("fit", 2, 10, -1))
	w.Emit(Progress("fit", 3, 10, -1))
	deadline := time.Now().Add(10 * time.Second) // a guard against a hang
	for {
		evs := lines(t, buf.Bytes())
		if len(evs) == 2 {
			if evs[1].Number("current") != 3 {
				t.Errorf("second event written is %g, want the last, 3", evs[1].Number("current"))
			}
			break
		}
		if len(evs) > 2 || time.Now().After(deadline) {
			t.Fatalf("written %d events, want the first and then the last", len(evs))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A plain writer writes everything.
func TestWriterUnthrottled(t *testing.T) {
	var buf testcli.SyncBuffer
	w := NewWriter(&buf)
	for i := 0; i < 50; i++ {
		w.Emit(Progress("fit", float64(i), 100, -1))
	}
	if n := len(lines(t, buf.Bytes())); n != 50 {
		t.Errorf("wrote %d of 50", n)
	}
}
