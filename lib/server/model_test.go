package server

import (
	"compress/gzip"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/lib/rundir"
)

// A run's metric events: every one, from events.jsonl or its archive,
// other events and lines that are no metric left out, and a series over
// maxSeriesPoints thinned evenly with its first and last kept.
func TestMetricEvents(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	n := 2*maxSeriesPoints + 1
	for i := range n {
		fmt.Fprintf(&b, `{"v":1,"event":"metric","split":"train","name":"s/loss","value":%d,"step":%d}`+"\n", i, i)
		if i < 3 {
			fmt.Fprintf(&b, `{"v":1,"event":"metric","split":"val","name":"s/accuracy","value":0.%d,"step":%d}`+"\n", i+5, i)
		}
	}
	b.WriteString(`{"v":1,"event":"progress","phase":"fit","current":1,"total":2}` + "\n")
	b.WriteString(`{"v":1,"event":"metric","split":"val","name":"s/loss","value":"NaN","step":1}` + "\n")
	b.WriteString("not json\n")
	f, err := os.Create(filepath.Join(dir, rundir.EventsArchive))
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	zw.Write([]byte(b.String()))
	zw.Close()
	f.Close()

	got, err := metricEvents(dir)
	if err != nil {
		t.Fatal(err)
	}
	var train, val []metricEvent
	for _, e := range got {
		if e.Split == "train" {
			train = append(train, e)
		} else {
			val = append(val, e)
		}
	}
	if len(val) != 3 || val[0] != (metricEvent{"val", "s/accuracy", 0, 0.5}) || val[2].Value != 0.7 {
		t.Errorf("val series %+v, want its 3 events", val)
	}
	if len(train) != maxSeriesPoints || train[0].Step != 0 || train[len(train)-1].Step != float64(n-1) {
		t.Fatalf("train series of %d events: %d kept, from %v to %v", n, len(train), train[0], train[len(train)-1])
	}
	gap := float64((n - 1 + maxSeriesPoints - 2) / (maxSeriesPoints - 1))
	for i := 1; i < len(train); i++ {
		if d := train[i].Step - train[i-1].Step; d < gap-1 || d > gap || train[i].Value != train[i].Step {
			t.Fatalf("thinned unevenly at %d: %v after %v", i, train[i], train[i-1])
		}
	}
	if got, err := metricEvents(t.TempDir()); err != nil || len(got) != 0 {
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
