package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"potato-training/internal/testproject"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
)

// runEvents parses a run's events.jsonl.
func runEvents(t *testing.T, dir, id string) (evs []events.Event, size int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(id), rundir.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		e, err := events.Parse(sc.Bytes())
		if err != nil {
			t.Fatalf("events.jsonl: %q: %v", sc.Text(), err)
		}
		evs = append(evs, e)
	}
	return evs, len(b)
}

// A program that floods its standard output with progress and metrics
// (20000 of each, as fast as awk prints them) does not fill the disk: the
// dispatch writes a few of them, and the last progress and the last value
// of the metric are there, before the result. stdout.log holds the
// program's own line, not a second copy of the events.
func TestFloodingTrainerIsThrottled(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	tr := trainerProgram(t, dir, `echo 'a line of the trainer'
awk 'BEGIN { for (i = 1; i <= 20000; i++) {
  printf "{\"v\":1,\"event\":\"progress\",\"phase\":\"fit\",\"current\":%d,\"total\":30000}\n", i
  printf "{\"v\":1,\"event\":\"metric\",\"split\":\"train\",\"name\":\"loss\",\"value\":%d,\"step\":%d}\n", i, i } }'
`+resultLines)
	r := run(t, "run", cfg, "--trainer", tr, "--schemas", "sentiment")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	evs, size := runEvents(t, dir, id)
	var progress, metrics int
	var lastProgress, lastMetric events.Event
	for i, e := range evs {
		switch e.Kind {
		case events.KindProgress:
			progress++
			lastProgress = e
		case events.KindMetric:
			metrics++
			lastMetric = e
		case events.KindResult:
			if i != len(evs)-1 {
				t.Errorf("the result is event %d of %d, want the last", i+1, len(evs))
			}
		}
	}
	// At 4 a second each, a run of any speed on this machine writes far
	// fewer than the 20000 sent.
	if progress == 0 || progress > 2000 || metrics == 0 || metrics > 2000 {
		t.Errorf("events.jsonl (%d bytes) holds %d progress and %d metric events of 20000 each", size, progress, metrics)
	}
	if lastProgress.Number("current") != 20000 || lastMetric.Number("value") != 20000 {
		t.Errorf("last progress %v, last metric %v: want the last ones sent (20000)", lastProgress.Fields, lastMetric.Fields)
	}
	if p := testproject.Read(t, dir, id).Progress; p == nil || p.Phase != "fit" || p.Total != 30000 {
		t.Errorf("run.json progress %+v", p)
	}
	b, _ := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(id), rundir.StdoutFile))
	if stdout := string(b); stdout != "a line of the trainer\n" {
		t.Errorf("stdout.log is %d bytes, want the trainer's own line alone: %.200q", len(b), stdout)
	}
}

// status shows a running run's progress as its percent and ETA.
func TestStatusShowsPercentAndETA(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	gate := filepath.Join(dir, "go")
	tr := trainerProgram(t, dir, `echo '{"v":1,"event":"progress","phase":"fit","current":49994,"total":150000,"eta_s":600}'
while [ ! -e '`+gate+`' ]; do sleep 0.05; done
`+resultLines)
	id := detachRun(t, cfg, tr)
	defer os.WriteFile(gate, nil, 0o644)
	testproject.WaitFor(t, "the run's progress", func() bool {
		p := testproject.Read(t, dir, id).Progress
		return p != nil && p.Current == 49994
	})
	r := run(t, "status", cfg, id)
	if !regexp.MustCompile(`(?m)^progress: +fit 33%, ETA (10m00s|9m[0-9]{2}s) \(49994/150000\)$`).MatchString(r.stdout) {
		t.Errorf("status %s:\n%s", id, r.stdout)
	}
	r = run(t, "status", cfg)
	if !regexp.MustCompile(id + `.*\[fit 33%, ETA (10m00s|9m[0-9]{2}s) \(49994/150000\)\]`).MatchString(r.stdout) {
		t.Errorf("status:\n%s", r.stdout)
	}
	os.WriteFile(gate, nil, 0o644)
	testproject.WaitFor(t, "the run's end", func() bool { return testproject.Read(t, dir, id).Finished })
	if r := run(t, "status", cfg, id); strings.Contains(r.stdout, "progress:") {
		t.Errorf("a finished run shows progress:\n%s", r.stdout)
	}
}
