package dispatch

import (
	"strings"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/lib/rundir"
)

func TestProgressText(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := now.Add(-10 * time.Second)
	cases := []struct {
		rec  rundir.Record
		want string
	}{
		{rundir.Record{State: rundir.StateRunning, Progress: &rundir.Progress{Phase: "fit", Current: 49994, Total: 150000, EtaS: 70, At: &at}},
			"fit 33%, ETA 1m00s (49994/150000)"},
		{rundir.Record{State: rundir.StateRunning, Progress: &rundir.Progress{Phase: "fit", Current: 3, Total: 400}},
			"fit 0.7% (3/400)"},
		{rundir.Record{State: rundir.StateFetching, Progress: &rundir.Progress{Phase: "fetch", Current: 12.3e6, Total: 29e6, EtaS: 4000}},
			"fetch 42%, ETA 1h06m (12.3 MB of 29.0 MB)"},
		// A fit that stopped early, then the next step: no stale percent.
		{rundir.Record{State: rundir.StateFetching, Progress: &rundir.Progress{Phase: "fit", Current: 12, Total: 30}}, ""},
		{rundir.Record{State: rundir.StateSuccess, Progress: &rundir.Progress{Phase: "fit", Current: 30, Total: 30}}, ""},
		{rundir.Record{State: rundir.StateRunning}, ""},
	}
	for _, c := range cases {
		if got := ProgressText(c.rec, now); got != c.want {
			t.Errorf("ProgressText(%+v) = %q, want %q", c.rec.Progress, got, c.want)
		}
	}
}

// The terminal line measures the rate over the readings it saw, and
// gives an ETA from it when the trainer sends none.
func TestMeterLine(t *testing.T) {
	start := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	var m meter
	rec := rundir.Record{State: rundir.StateRunning, StartedAt: &start, Step: "fitting s"}
	var line string
	for i := 0; i <= 4; i++ {
		at := start.Add(time.Duration(i) * time.Second)
		rec.Progress = &rundir.Progress{Phase: "fit", Current: float64(100 * i), Total: 1000, At: &at}
		line = m.line(rec, at)
	}
	if want := "0:04  fit  40%  400/1000  100 it/s  ETA 6s"; line != want {
		t.Errorf("line %q, want %q", line, want)
	}
	rec.Progress = nil
	rec.Step = "collecting the predictions"
	if got, want := m.line(rec, start.Add(65*time.Second)), "1:05  collecting the predictions"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	at := start.Add(66 * time.Second)
	rec.State = rundir.StateFetching
	rec.Progress = &rundir.Progress{Phase: "fetch", Current: 5e6, Total: 20e6, At: &at}
	m.line(rec, at)
	at2 := at.Add(time.Second)
	rec.Progress = &rundir.Progress{Phase: "fetch", Current: 7e6, Total: 20e6, At: &at2}
	if got, want := m.line(rec, at2), "1:07  fetch  35%  7.0 MB of 20.0 MB  2.0 MB/s  ETA 7s"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
}

// The line is redrawn in place, cut to the terminal's width, and erased
// when the run is over.
func TestShowProgressDraws(t *testing.T) {
	root, _ := rundir.Open(t.TempDir())
	run, err := root.Create(rundir.Record{Trainer: "t", State: rundir.StateRunning, Step: strings.Repeat("x", 200)})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	var buf testcli.SyncBuffer
	stop := showProgress(root, run.ID, &buf, "potato-dispatch: ", func() int { return 40 })
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(buf.String(), "\x1b[K"); {
		if time.Now().After(deadline) {
			t.Fatal("nothing drawn")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	out := buf.String()
	first, _, _ := strings.Cut(strings.TrimPrefix(out, "\r"), "\x1b[K")
	if !strings.HasPrefix(out, "\rpotato-dispatch: 0:") || len(first) != 39 || !strings.HasSuffix(out, "\r\x1b[K") {
		t.Errorf("drawn %q", out)
	}
}
