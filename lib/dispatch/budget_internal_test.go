package dispatch

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/internal/testproject"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
)

// floodingTrainer sends metrics of 300 series and one whose name is too
// long, then some 16 MB of log events and lines that are no events, then
// a last value of its first metric, its predictions and its result.
const floodingTrainer = `awk 'BEGIN {
  for (i = 1; i <= 300; i++) printf "{\"v\":1,\"event\":\"metric\",\"split\":\"train\",\"name\":\"m/%d\",\"value\":%d,\"step\":1}\n", i, i
  long = sprintf("%300s", ""); gsub(/ /, "n", long)
  printf "{\"v\":1,\"event\":\"metric\",\"split\":\"val\",\"name\":\"%s\",\"value\":1,\"step\":1}\n", long
  pad = sprintf("%1000s", ""); gsub(/ /, "x", pad)
  for (i = 1; i <= 12000; i++) printf "{\"v\":1,\"event\":\"log\",\"level\":\"info\",\"msg\":\"line %d %s\"}\n", i, pad
  for (i = 1; i <= 4000; i++) printf "not an event %d %s\n", i, pad
}'
echo '{"v":1,"event":"metric","split":"train","name":"m/1","value":42,"step":99}'
mkdir -p artifacts
cat bundle/test.jsonl bundle/unlabeled.jsonl | grep -o '"instance_id":"[^"]*"' | sed 's/.*:"//; s/"$//' |
while read id; do
  echo "{\"instance_id\":\"$id\",\"schema_name\":\"sentiment\",\"payload\":{\"label\":\"positive\",\"confidence\":0.9},\"confidence\":0.9}"
done > artifacts/predictions.jsonl
echo '{"v":1,"event":"result","status":"success","predictions_file":"predictions.jsonl"}'`

// TestTrainerOutputBounded: a local trainer that names 300 metric series
// and then floods its standard output with 16 MB of log events and other
// lines, under max_events_mb: 1. The run goes on and succeeds; its
// events.jsonl keeps 256 series and no more, the result and the last
// value of a metric sent after the flood; events.jsonl and run.log
// together stay near 1 MB, where they would hold 32 unbounded; the run
// log says once that the budget is reached, once which series are
// dropped, and at the end how much was.
func TestTrainerOutputBounded(t *testing.T) {
	dir, cfg := testproject.Project(t, 40, 30, "  max_events_mb: 1\n")
	code, err := Run(context.Background(), Options{ConfigPath: cfg, Trainer: testproject.Trainer(t, t.TempDir(), floodingTrainer),
		Schemas: []string{"sentiment"}, Backend: "local"})
	if err != nil {
		t.Fatal(err)
	}
	infos, err := testproject.Root(dir).List()
	if err != nil || len(infos) != 1 {
		t.Fatalf("runs: %v %v", infos, err)
	}
	id := infos[0].RunID
	runDir := testproject.Root(dir).RunDir(id)
	logText, _ := os.ReadFile(filepath.Join(runDir, rundir.LogFile))
	log := string(logText)
	if code != ExitSuccess {
		t.Fatalf("exit %d: %s\n%.3000s", code, infos[0].Error, log)
	}

	f, err := os.Open(filepath.Join(runDir, rundir.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	series := map[string]bool{}
	var result, last bool
	var logEvents int
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, events.MaxLine+1)
	for sc.Scan() {
		e, err := events.Parse(sc.Bytes())
		if err != nil {
			t.Fatalf("events.jsonl: %v: %.200q", err, sc.Text())
		}
		switch e.Kind {
		case events.KindMetric:
			series[e.String("split")+"/"+e.String("name")] = true
			last = last || e.String("name") == "m/1" && e.Number("value") == 42
		case events.KindResult:
			result = true
		case events.KindLog:
			logEvents++
		}
	}
	if len(series) != events.MaxSeries || series["train/m/257"] || !series["train/m/256"] {
		t.Errorf("events.jsonl holds %d series, want the first %d", len(series), events.MaxSeries)
	}
	if !result || !last {
		t.Errorf("events.jsonl lacks the result (%v) or the last value of m/1 (%v)", result, last)
	}
	if logEvents == 0 || logEvents >= 12000 {
		t.Errorf("events.jsonl holds %d of the 12000 log events", logEvents)
	}
	// The budget, and the dispatch's own lines and what the reserve holds
	// (the result, the last value of each series), some kB.
	if total := st.Size() + int64(len(logText)); total > 1<<20+256<<10 {
		t.Errorf("events.jsonl (%d bytes) and run.log (%d) hold %d bytes, over max_events_mb (1 MB)", st.Size(), len(logText), total)
	}
	once := func(what string) {
		t.Helper()
		if n := strings.Count(log, what); n != 1 {
			t.Errorf("the run log says %d times %q, want once:\n%.2000s", n, what, log)
		}
	}
	once(fmt.Sprintf(msgOverBudget, 1))
	once(fmt.Sprintf(msgManySeries, events.MaxSeries, "train", "m/257"))
	once(fmt.Sprintf(msgSeriesDropped, 45, events.MaxSeries, events.MaxMetricName))
	once("such metrics are dropped")
	once("dropped past max_events_mb: ")
	if strings.Contains(log, "not an event 4000 ") || strings.Contains(log, "line 12000 ") {
		t.Errorf("the run log holds lines sent past the budget")
	}
}
