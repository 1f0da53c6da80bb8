package server

import (
	"compress/gzip"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"potato-training/lib/events"
	"potato-training/lib/rundir"
)

// A run's metric events: every one, other events and lines that are no
// metric left out; a series over maxSeriesPoints keeps every 2^k-th event
// and its last; a run under way is read on from where the last request
// stopped, a line half written left for the next; its archive, once the
// run is over, read again.
func TestMetricEvents(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	n := 2*maxSeriesPoints + 2
	for i := range n {
		fmt.Fprintf(&b, `{"v":1,"event":"metric","split":"train","name":"s/loss","value":%d,"step":%d}`+"\n", i, i)
		if i < 3 {
			fmt.Fprintf(&b, `{"v":1,"event":"metric","split":"val","name":"s/accuracy","value":0.%d,"step":%d}`+"\n", i+5, i)
		}
	}
	b.WriteString(`{"v":1,"event":"progress","phase":"fit","current":1,"total":2}` + "\n")
	b.WriteString(`{"v":1,"event":"metric","split":"val","name":"s/loss","value":"NaN","step":1}` + "\n")
	b.WriteString("not json\n")
	whole := b.String()
	half := `{"v":1,"event":"metric","split":"val","name":"s/accuracy","value":0.9,"step":9}`
	path := filepath.Join(dir, rundir.EventsFile)
	if err := os.WriteFile(path, []byte(whole+half[:20]), 0o644); err != nil {
		t.Fatal(err)
	}
	var c metricCache
	split := func(got []metricEvent) (train, val []metricEvent) {
		for _, e := range got {
			if e.Split == "train" {
				train = append(train, e)
			} else {
				val = append(val, e)
			}
		}
		return train, val
	}
	check := func(what string, got []metricEvent, nval int) {
		t.Helper()
		train, val := split(got)
		if len(val) != nval || val[0] != (metricEvent{"val", "s/accuracy", 0, 0.5}) || val[2].Value != 0.7 {
			t.Errorf("%s: val series %+v, want %d events", what, val, nval)
		}
		// 4002 events: every 4th (0 to 4000, 1001 of them) and the last.
		if len(train) != 1002 || train[0].Step != 0 || train[len(train)-1].Step != float64(n-1) {
			t.Fatalf("%s: train series of %d events: %d kept, from %v to %v", what, n, len(train), train[0], train[len(train)-1])
		}
		for i := 1; i < len(train)-1; i++ {
			if d := train[i].Step - train[i-1].Step; d != 4 || train[i].Value != train[i].Step {
				t.Fatalf("%s: thinned unevenly at %d: %v after %v", what, i, train[i], train[i-1])
			}
		}
		if got[len(got)-1].Split != "train" && nval == 3 {
			t.Errorf("%s: not in the order written: ends with %v", what, got[len(got)-1])
		}
	}
	got, err := c.metricEvents("r", dir)
	if err != nil {
		t.Fatal(err)
	}
	check("the first read", got, 3)
	offset := c.runs["r"].offset
	if offset != int64(len(whole)) {
		t.Errorf("read to %d, want %d: the half line left", offset, len(whole))
	}

	// The line completed: only it is read.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(half[20:] + "\n")
	f.Close()
	got, err = c.metricEvents("r", dir)
	if err != nil {
		t.Fatal(err)
	}
	check("read on", got, 4)
	if _, val := split(got); val[3] != (metricEvent{"val", "s/accuracy", 9, 0.9}) {
		t.Errorf("the completed line: %v", val[3])
	}

	// The run over: events.jsonl compressed, read from the archive.
	zf, err := os.Create(filepath.Join(dir, rundir.EventsArchive))
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(zf)
	zw.Write([]byte(whole))
	zw.Close()
	zf.Close()
	os.Remove(path)
	got, err = c.metricEvents("r", dir)
	if err != nil {
		t.Fatal(err)
	}
	check("the archive", got, 3)
	if got, err := c.metricEvents("none", t.TempDir()); err != nil || len(got) != 0 {
		t.Errorf("a run without events: %v, %v", got, err)
	}
}

// GET /report before any run published: 404 with the reason; a schema
// not in the config: 400.
func TestAPIReportRefusals(t *testing.T) {
	e := newAPI(t, testKey, "")
	if a := e.do("GET", "/report", ""); a.code != http.StatusNotFound || !strings.Contains(a.errorText(t), "no run has published prelabels") {
		t.Errorf("GET /report without a store: %d %s", a.code, a.body)
	}
	if a := e.do("GET", "/report?schema=nope", ""); a.code != http.StatusBadRequest {
		t.Errorf("GET /report?schema=nope: %d %s", a.code, a.body)
	}
	if a := e.do("POST", "/report", ""); a.code != http.StatusMethodNotAllowed {
		t.Errorf("POST /report: %d", a.code)
	}
}

// A run's events.jsonl with a new metric name in every event (as a
// dispatch before the bound of events.MaxSeries wrote it, or a file put
// there by hand): the reader keeps the first events.MaxSeries series, and
// no series named in more than events.MaxMetricName bytes; a long series
// among many keeps fewer points, evenly, and its last, so that the
// answer stays within maxRunPoints; the memory it holds after the read is
// a fraction of the file's size.
func TestMetricSeriesBounded(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	long := strings.Repeat("n", events.MaxMetricName+1)
	fmt.Fprintf(&b, `{"v":1,"event":"metric","split":"val","name":%q,"value":1,"step":1}`+"\n", long)
	const steps = 3000
	for i := range steps {
		// One long series, and a new name in every other event.
		fmt.Fprintf(&b, `{"v":1,"event":"metric","split":"train","name":"s/loss","value":%d,"step":%d}`+"\n", i, i)
		fmt.Fprintf(&b, `{"v":1,"event":"metric","split":"train","name":"s/at-%d","value":%d,"step":%d}`+"\n", i, i, i)
	}
	for i := range 100000 {
		fmt.Fprintf(&b, `{"v":1,"event":"metric","split":"val","name":"x/%d","value":%d,"step":1}`+"\n", i, i)
	}
	if err := os.WriteFile(filepath.Join(dir, rundir.EventsFile), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	size := b.Len()
	b.Reset()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var c metricCache
	got, err := c.metricEvents("r", dir)
	if err != nil {
		t.Fatal(err)
	}
	series := map[seriesKey][]metricEvent{}
	for _, e := range got {
		k := seriesKey{e.Split, e.Name}
		series[k] = append(series[k], e)
	}
	if len(series) != events.MaxSeries {
		t.Fatalf("%d series kept, want %d", len(series), events.MaxSeries)
	}
	if _, ok := series[seriesKey{"val", long}]; ok {
		t.Errorf("a series named in %d bytes is kept", len(long))
	}
	// The first series in the order they came: s/loss, then s/at-0...
	if _, ok := series[seriesKey{"train", fmt.Sprintf("s/at-%d", events.MaxSeries-2)}]; !ok {
		t.Errorf("the %dth series is not kept", events.MaxSeries)
	}
	if _, ok := series[seriesKey{"train", fmt.Sprintf("s/at-%d", events.MaxSeries-1)}]; ok {
		t.Errorf("a series past the %dth is kept", events.MaxSeries)
	}
	if len(got) > maxRunPoints+events.MaxSeries {
		t.Errorf("%d points answered, over %d", len(got), maxRunPoints+events.MaxSeries)
	}
	loss := series[seriesKey{"train", "s/loss"}]
	limit := maxRunPoints / events.MaxSeries
	if len(loss) > limit+1 || len(loss) < limit/2 || loss[len(loss)-1].Step != steps-1 {
		t.Fatalf("s/loss: %d points kept of %d, last %v; want at most %d and the last", len(loss), steps, loss[len(loss)-1], limit+1)
	}
	gap := loss[1].Step - loss[0].Step
	for i := 1; i < len(loss)-1; i++ {
		if loss[i].Step-loss[i-1].Step != gap || loss[i].Value != loss[i].Step {
			t.Fatalf("s/loss thinned unevenly at %d: %v after %v", i, loss[i], loss[i-1])
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > int64(size)/4 {
		t.Errorf("the read of %d bytes holds %d bytes of heap", size, grew)
	}
	runtime.KeepAlive(&c)
}
