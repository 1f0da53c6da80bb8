package server

// An agent token's floods of events, sent through potato-server's agent
// route on loopback to a real potato-dispatch, as docs/reliability.md
// ("Hostile input") lists them: metric events each of a new name, and
// more log events than a run may keep.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/agentproto"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
)

// agentRun starts a run on the agent backend lab with the real
// potato-dispatch and claims it as an agent would, with the backend's
// token; it returns the run's id and a client with the run's token.
func (l *liveServer) agentRun(t *testing.T) (string, *agentproto.Client) {
	t.Helper()
	bin := testcli.Binaries(t)
	out, err := exec.Command(filepath.Join(bin, "potato-dispatch"), "run", l.cfg, "--trainer", "tfidf-logreg",
		"--schemas", "sentiment", "--backend", "lab", "--detach").Output()
	id := strings.TrimSpace(string(out))
	if err != nil || !rundir.ValidID(id) {
		t.Fatalf("potato-dispatch run: %v, stdout %q", err, out)
	}
	t.Cleanup(func() {
		if i, err := l.root.Read(id); err == nil && !i.Finished {
			exec.Command(filepath.Join(bin, "potato-dispatch"), "cancel", l.cfg, id).Run()
			for n := 0; n < 600; n++ {
				if i, err := l.root.Read(id); err != nil || i.Finished {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
	c, err := agentproto.NewClient("http://"+l.addr, l.tok, agentproto.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var claim *agentproto.Claim
	testproject.WaitFor(t, "the run to be handed out", func() bool {
		claim, err = c.Claim(context.Background(), agentproto.ClaimRequest{Backend: "lab", Host: "flood", Workdir: "/w", Version: "1"})
		return err == nil && claim != nil
	})
	if claim.RunID != id {
		t.Fatalf("claimed run %s, want %s", claim.RunID, id)
	}
	rc, err := c.WithToken(claim.RunToken)
	if err != nil {
		t.Fatal(err)
	}
	return id, rc
}

// post sends raw event lines as the agent's posts of events; each must
// be answered 200.
func post(t *testing.T, c *agentproto.Client, id string, lines [][]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := c.PostEvents(ctx, id, nil, lines); err != nil {
		t.Fatalf("posting %d lines: %v", len(lines), err)
	}
}

// apiBody is GET of an API path with the test key: the answer's body.
func (l *liveServer) apiBody(t *testing.T, path string) []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+l.addr+apiPrefix+path, nil)
	req.Header.Set("X-API-Key", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v %.300s", path, resp.StatusCode, err, b)
	}
	return b
}

// diskUsage is what du counts for dir: the blocks of its files.
func diskUsage(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAgentMetricNamesFlood: an agent token sends 16 MB of metric events,
// each of a new name (a step in the name). The run keeps
// events.MaxSeries series; the run page's poll (GET runs/<id>) answers
// with that many and a few kB, and what the server holds after it is a
// fraction of what was sent; the run log says once what is dropped, and
// the run goes on.
func TestAgentMetricNamesFlood(t *testing.T) {
	l := newLiveServerWith(t, nil, "", nil)
	id, c := l.agentRun(t)

	const volume = 16 << 20
	var lines [][]byte
	for sent, i := 0, 0; sent < volume; i++ {
		line := fmt.Appendf(nil, `{"v":1,"event":"metric","split":"train","name":"loss@step-%07d","value":%d,"step":%d}`+"\n", i, i, i)
		lines = append(lines, line)
		sent += len(line)
	}
	n := len(lines)
	post(t, c, id, lines)
	lines = nil

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	body := l.apiBody(t, "/runs/"+id)
	var d apiRunDetail
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatal(err)
	}
	size := len(body)
	body = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	series := map[seriesKey]bool{}
	for _, e := range d.MetricEvents {
		series[seriesKey{e.Split, e.Name}] = true
	}
	t.Logf("%d metric events sent; the answer: %d bytes, %d series; the server's heap grew by %d bytes",
		n, size, len(series), int64(after.HeapAlloc)-int64(before.HeapAlloc))
	if len(series) != events.MaxSeries || !series[seriesKey{"train", "loss@step-0000000"}] {
		t.Errorf("the answer has %d series, want the first %d", len(series), events.MaxSeries)
	}
	if size > 256<<10 {
		t.Errorf("the run's answer is %d bytes", size)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4<<20 {
		t.Errorf("the server holds %d bytes more after the poll", grew)
	}
	if d.State != rundir.StateRunning {
		t.Errorf("the run is %s, want running", d.State)
	}
	log, _ := os.ReadFile(filepath.Join(l.root.RunDir(id), rundir.LogFile))
	want := fmt.Sprintf("metrics of more than %d series (a split and a name): those of the others are dropped, from split \"train\" name \"loss@step-%07d\" on", events.MaxSeries, events.MaxSeries)
	if got := strings.Count(string(log), "metrics of more than"); got != 1 || !strings.Contains(string(log), want) {
		t.Errorf("the run log says %d times what is dropped, want once %q:\n%.3000s", got, want, log)
	}
}

// TestAgentLogFlood: an agent token sends 122 MiB of log events (12 MiB
// under -short, with max_events_mb: 4), each post answered 200. What the
// run directory holds stays within the budget, under 150 MiB with the
// default max_events_mb of 128, where each log event unbounded would take
// twice its size (events.jsonl and run.log): 244 MiB. The run goes on:
// the run log says once that the rest is dropped, a metric and the
// result sent after the flood are kept, and the run succeeds, its run log
// saying at the end how much was dropped.
func TestAgentLogFlood(t *testing.T) {
	extra, volume, within := "", 122<<20, int64(150<<20)
	if testing.Short() {
		extra, volume, within = "  max_events_mb: 4\n", 12<<20, 5<<20
	}
	l := newLiveServerWith(t, nil, extra, nil)
	id, c := l.agentRun(t)
	runDir := l.root.RunDir(id)
	post(t, c, id, [][]byte{[]byte(`{"v":1,"event":"metric","split":"val","name":"loss","value":1,"step":1}` + "\n")})

	msg := strings.Repeat("x", 16<<10)
	var batch [][]byte
	size := 0
	for sent, i := 0, 0; sent < volume; i++ {
		line := fmt.Appendf(nil, `{"v":1,"event":"log","level":"info","msg":"%d %s"}`+"\n", i, msg)
		batch = append(batch, line)
		sent += len(line)
		size += len(line)
		if size >= agentproto.MaxEventsBody-len(line) || sent >= volume {
			post(t, c, id, batch)
			batch, size = nil, 0
		}
	}
	if info, _ := l.root.Read(id); info.State != rundir.StateRunning {
		t.Fatalf("after the flood the run is %s (%s), want running", info.State, info.Error)
	}
	du := diskUsage(t, runDir)
	t.Logf("%d MiB of log events sent; the run directory takes %.1f MiB", volume>>20, float64(du)/(1<<20))
	if du > within {
		t.Errorf("the run directory takes %d bytes, over %d", du, within)
	}

	// What comes after: the last value of a metric, the predictions and
	// the result.
	post(t, c, id, [][]byte{
		[]byte(`{"v":1,"event":"metric","split":"val","name":"loss","value":0.25,"step":9}` + "\n"),
		[]byte(`{"v":1,"event":"result","status":"success","predictions_file":"predictions.jsonl"}` + "\n"),
	})
	preds := filepath.Join(t.TempDir(), "predictions.jsonl")
	var pb strings.Builder
	for _, split := range []string{"test.jsonl", "unlabeled.jsonl"} {
		b, err := os.ReadFile(filepath.Join(runDir, rundir.BundleDir, split))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var item struct {
				ID string `json:"instance_id"`
			}
			if json.Unmarshal([]byte(line), &item) == nil && item.ID != "" {
				fmt.Fprintf(&pb, `{"instance_id":%q,"schema_name":"sentiment","payload":{"label":"positive","confidence":0.9},"confidence":0.9}`+"\n", item.ID)
			}
		}
	}
	if err := os.WriteFile(preds, []byte(pb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.UploadPredictions(ctx, id, preds); err != nil {
		t.Fatal(err)
	}
	if err := c.PostResult(ctx, id, agentproto.Result{ExitCode: 0, ArtifactURI: "file:///w/model"}); err != nil {
		t.Fatal(err)
	}
	var info rundir.Info
	testproject.WaitFor(t, "the run's end", func() bool {
		info, _ = l.root.Read(id)
		return info.Finished
	})
	logText, _ := os.ReadFile(filepath.Join(runDir, rundir.LogFile))
	log := string(logText)
	if info.State != rundir.StateSuccess {
		t.Fatalf("the run is %s (%s), want success\n%.3000s", info.State, info.Error, log[max(0, len(log)-3000):])
	}
	mb := 128
	if testing.Short() {
		mb = 4
	}
	for _, want := range []string{fmt.Sprintf("the training process has written max_events_mb (%d MB) of events and run log lines: its further ones are dropped", mb),
		"dropped past max_events_mb: "} {
		if n := strings.Count(log, want); n != 1 {
			t.Errorf("the run log says %d times %q, want once", n, want)
		}
	}
	f, err := os.Open(filepath.Join(runDir, rundir.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var result, last bool
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, events.MaxLine+1)
	for sc.Scan() {
		e, err := events.Parse(sc.Bytes())
		switch {
		case err != nil:
			t.Fatalf("events.jsonl: %v", err)
		case e.Kind == events.KindResult:
			result = true
		case e.Kind == events.KindMetric && e.Number("value") == 0.25:
			last = true
		}
	}
	if !result || !last {
		t.Errorf("events.jsonl lacks the result (%v) or the last value of the metric (%v)", result, last)
	}
	if du := diskUsage(t, runDir); du > within {
		t.Errorf("at its end the run directory takes %d bytes, over %d", du, within)
	}
}
