package main

import (
	"strings"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
)

// floodBody names 300 metric series, floods standard output with some
// 16 MB of log events and other lines, then sends a last value of its
// first metric and its result.
const floodBody = `awk 'BEGIN {
  for (i = 1; i <= 300; i++) printf "{\"v\":1,\"event\":\"metric\",\"split\":\"train\",\"name\":\"m/%d\",\"value\":%d,\"step\":1}\n", i, i
  pad = sprintf("%1000s", ""); gsub(/ /, "x", pad)
  for (i = 1; i <= 12000; i++) printf "{\"v\":1,\"event\":\"log\",\"level\":\"info\",\"msg\":\"line %d %s\"}\n", i, pad
  for (i = 1; i <= 4000; i++) printf "not an event %d %s\n", i, pad
}'
echo '{"v":1,"event":"metric","split":"train","name":"m/1","value":42,"step":99}'
`

// checkBounded checks a run of floodBody under max_events_mb: 1: it
// succeeded; events.jsonl keeps 256 series, the last value of m/1 and
// the result; it and run.log hold about 1 MB; the run log says once that
// the budget was reached, once which series were dropped, and at the end
// how much was.
func checkBounded(t *testing.T, r *testproject.Runs, res testproject.Result) {
	t.Helper()
	log := r.File(res.ID, rundir.LogFile)
	if res.Code != 0 {
		t.Fatalf("exit %d: %s\n%.3000s", res.Code, res.Stderr, log[max(0, len(log)-3000):])
	}
	evs, size := runEvents(t, r.Dir, res.ID)
	series := map[string]bool{}
	var result, last bool
	for _, ev := range evs {
		switch ev.Kind {
		case events.KindMetric:
			series[ev.String("name")] = true
			last = last || ev.String("name") == "m/1" && ev.Number("value") == 42
		case events.KindResult:
			result = true
		}
	}
	if len(series) != events.MaxSeries || series["m/257"] {
		t.Errorf("events.jsonl holds %d series, want the first %d", len(series), events.MaxSeries)
	}
	if !result || !last {
		t.Errorf("events.jsonl lacks the result (%v) or the last value of m/1 (%v)", result, last)
	}
	if total := size + len(log); total > 1<<20+256<<10 {
		t.Errorf("events.jsonl (%d bytes) and run.log (%d) hold %d bytes, over max_events_mb (1 MB)", size, len(log), total)
	}
	for _, want := range []string{"the training process has written max_events_mb (1 MB) of events and run log lines",
		"dropped past max_events_mb: ", `those of the others are dropped, from split "train" name "m/257" on`} {
		if n := strings.Count(log, want); n != 1 {
			t.Errorf("the run log says %d times %q, want once", n, want)
		}
	}
}

// TestSSHRelayBounded: floodBody on the ssh backend (the test sshd on
// loopback), under max_events_mb: 1. The agent relays all of it through
// ssh's forwarded socket; the dispatch keeps what checkBounded says.
func TestSSHRelayBounded(t *testing.T) {
	e := sshSetup(t, "", "", "  max_events_mb: 1\n")
	tr := testproject.Trainer(t, testcli.SharedDir(t, 0o755), floodBody+resultLines)
	checkBounded(t, e.Runs, e.Run("--trainer", tr, "--schemas", "sentiment"))
}

// TestSLURMRelayBounded: floodBody as a job of the real single-node
// SLURM of scripts/test-slurm, under max_events_mb: 1: the job writes its
// events to a file on the host, the agent there tails and relays them
// through ssh's forwarded socket, and the dispatch keeps what
// checkBounded says.
func TestSLURMRelayBounded(t *testing.T) {
	c := realSLURM(t)
	e := slurmSetup(t, c, "  max_events_mb: 1\n")
	tr := testproject.Trainer(t, testcli.UserDir(t, "/tmp"), floodBody+testproject.ResultLines)
	id := e.Detach("--trainer", tr, "--schemas", "sentiment")
	info := e.Wait(id, 240*time.Second)
	code := 1
	if info.ExitCode != nil {
		code = *info.ExitCode
	}
	checkBounded(t, e.Runs, testproject.Result{Code: code, ID: id, Stderr: info.Error})
	if !e.logHas(id, "Submitted SLURM job ") {
		t.Errorf("the run was not a SLURM job:\n%s", e.dump(id))
	}
}
