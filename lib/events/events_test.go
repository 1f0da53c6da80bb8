package events

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	e, err := Parse([]byte(`{"v":1,"event":"progress","t":1.5,"phase":"fit","current":2,"total":10}` + "\n"))
	if err != nil || e.Kind != KindProgress || e.T != 1.5 || e.String("phase") != "fit" || e.Number("total") != 10 {
		t.Fatalf("%+v %v", e, err)
	}
	if _, ok := e.Fields["v"]; ok {
		t.Errorf("v kept among the fields")
	}
	bad := []string{"", "plain text", "[1,2]", `{"v":1,"event":`, `{"v":2,"event":"log"}`, `{"event":"log"}`,
		`{"v":1,"event":"teleport"}`, `{"v":"1","event":"log"}`, "{" + strings.Repeat(" ", MaxLine) + "}"}
	for _, line := range bad {
		if _, err := Parse([]byte(line)); !errors.Is(err, ErrNotEvent) {
			t.Errorf("Parse(%.40q) = %v, want ErrNotEvent", line, err)
		}
	}
}

func TestLineRoundTrip(t *testing.T) {
	now = func() time.Time { return time.UnixMilli(1764683701250) }
	defer func() { now = time.Now }()
	line := Metric("val", "s/accuracy", 0.75, 3).Line()
	want := `{"v":1,"event":"metric","t":1764683701.250,"name":"s/accuracy","split":"val","step":3,"value":0.75}` + "\n"
	if string(line) != want {
		t.Fatalf("got  %s\nwant %s", line, want)
	}
	e, err := Parse(line)
	if err != nil || e.Number("value") != 0.75 || e.Number("step") != 3 {
		t.Fatalf("%+v %v", e, err)
	}
	var r Result
	if err := ResultEvent(Result{Status: "success", NPredictions: 4, PredictionsFile: "p.jsonl"}).Decode(&r); err != nil || r.NPredictions != 4 || r.PredictionsFile != "p.jsonl" {
		t.Errorf("result round trip: %+v %v", r, err)
	}
	if e := Progress("fit", 1, 2, -1); e.Fields["eta_s"] != nil {
		t.Errorf("negative eta kept")
	}
}

func TestWriterWholeLines(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	done := make(chan bool)
	for i := 0; i < 4; i++ {
		go func() {
			for j := 0; j < 50; j++ {
				w.Emit(Log("info", strings.Repeat("x", 100)))
			}
			done <- true
		}()
	}
	for i := 0; i < 4; i++ {
		<-done
	}
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if _, err := Parse([]byte(l)); err != nil {
			t.Fatalf("interleaved line %q", l)
		}
	}
}
