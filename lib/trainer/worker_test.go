package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"potato-training/internal/testcli"
	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/trainer/tfidf"
)

var vocab = map[string][]string{
	"pos": {"great", "lovely", "superb", "friendly", "clean", "delicious", "perfect", "recommend"},
	"neg": {"awful", "rude", "dirty", "cold", "broken", "refund", "never", "worst"},
	"mid": {"okay", "average", "fine", "decent", "plain", "ordinary", "standard", "usual"},
}

func text(label string, i int) string {
	w := vocab[label]
	return fmt.Sprintf("the %s food and %s service, %s overall %d", w[i%8], w[(i+3)%8], w[(i+5)%8], i)
}

// writeBundle makes a bundle of n nominal items per split and returns a
// spec for it.
func writeBundle(t *testing.T, kind config.Kind, nTrain int, params map[string]string) Spec {
	t.Helper()
	dir := t.TempDir()
	bdir := filepath.Join(dir, "bundle")
	w, err := bundle.NewWriter(bdir, []string{"train", "val", "test"}, true)
	if err != nil {
		t.Fatal(err)
	}
	labels := []string{"pos", "neg", "mid"}
	add := func(split string, n int) {
		for i := 0; i < n; i++ {
			l := labels[i%3]
			var target any = l
			if kind == config.KindMultilabel {
				target = []string{l}
			}
			id := fmt.Sprintf("%s-%d", split, i)
			if err := w.Add(split, bundle.Row{InstanceID: id, Text: text(l, i), Targets: map[string]any{"s": target}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	add("train", nTrain)
	add("val", 30)
	add("test", 30)
	for i := 0; i < 10; i++ {
		w.Add(bundle.UnlabeledSplit, bundle.Row{InstanceID: fmt.Sprintf("u-%d", i), Text: text(labels[i%3], i)})
	}
	typ := "radio"
	if kind == config.KindMultilabel {
		typ = "multiselect"
	}
	schema := bundle.Schema{Name: "s", AnnotationType: typ, Kind: kind, Labels: labels}
	if _, err := w.Close(bundle.Manifest{Schemas: []bundle.Schema{schema}}); err != nil {
		t.Fatal(err)
	}
	return Spec{V: 1, RunID: "r", Trainer: "tfidf-logreg", Schemas: []bundle.Schema{schema}, BundleDir: bdir,
		Workdir: filepath.Join(dir, "work"), Params: params, Limits: Limits{NumThreads: 2}}
}

func writeSpec(t *testing.T, s Spec) string {
	p := filepath.Join(t.TempDir(), "spec.json")
	if err := s.Write(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func parseEvents(t *testing.T, out []byte) []events.Event {
	var evs []events.Event
	for _, line := range bytes.Split(out, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		e, err := events.Parse(line)
		if err != nil {
			t.Fatalf("worker wrote a line that is not an event: %q", line)
		}
		evs = append(evs, e)
	}
	return evs
}

func TestWorkerNominal(t *testing.T) {
	spec := writeBundle(t, config.KindNominal, 150, nil)
	var out, errb bytes.Buffer
	code := Worker(context.Background(), writeSpec(t, spec), &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	evs := parseEvents(t, out.Bytes())
	kinds := map[string]int{}
	var res events.Result
	for _, e := range evs {
		kinds[e.Kind]++
		if e.Kind == events.KindResult {
			if err := e.Decode(&res); err != nil {
				t.Fatal(err)
			}
		}
		if e.Kind == events.KindLog && !strings.Contains(e.String("msg"), "2 threads") {
			t.Errorf("log event %q does not report limits.num_threads", e.String("msg"))
		}
	}
	if kinds[events.KindProgress] == 0 || kinds[events.KindMetric] == 0 || kinds[events.KindArtifact] != 1 || kinds[events.KindResult] != 1 {
		t.Errorf("events: %v", kinds)
	}
	if evs[len(evs)-1].Kind != events.KindResult {
		t.Errorf("the result is not the last event")
	}
	if res.NPredictions != 70 || res.PredictionsFile != "predictions.jsonl" || res.Metrics["s/val_accuracy"] < 0.9 {
		t.Errorf("result: %+v", res)
	}
	f, err := os.Open(filepath.Join(spec.Workdir, "predictions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	seen := map[string]bool{}
	for sc.Scan() {
		var p struct {
			InstanceID string  `json:"instance_id"`
			SchemaName string  `json:"schema_name"`
			Confidence float64 `json:"confidence"`
			Payload    struct {
				Label      string  `json:"label"`
				Confidence float64 `json:"confidence"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(p.InstanceID, "train-") {
			t.Errorf("prediction for a train item %s", p.InstanceID)
		}
		if p.SchemaName != "s" || p.Confidence < 1.0/3 || p.Confidence > 1 || p.Payload.Confidence != p.Confidence || p.Payload.Label == "" {
			t.Errorf("prediction %+v", p)
		}
		seen[strings.SplitN(p.InstanceID, "-", 2)[0]] = true
	}
	if !seen["val"] || !seen["test"] || !seen["u"] {
		t.Errorf("predicted splits: %v", seen)
	}
	mf, err := os.Open(filepath.Join(spec.Workdir, "model-s.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	m, err := tfidf.Load(mf)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := m.PredictNominal(text("neg", 7)); l != "neg" {
		t.Errorf("saved model predicts %q", l)
	}
}

func TestWorkerMultilabel(t *testing.T) {
	spec := writeBundle(t, config.KindMultilabel, 150, nil)
	var out, errb bytes.Buffer
	if code := Worker(context.Background(), writeSpec(t, spec), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	b, _ := os.ReadFile(filepath.Join(spec.Workdir, "predictions.jsonl"))
	if !strings.Contains(string(b), `"label":"neg"`) {
		t.Errorf("multilabel predictions:\n%.300s", b)
	}
}

func TestWorkerFailures(t *testing.T) {
	few := writeBundle(t, config.KindNominal, 6, nil)
	badParam := writeBundle(t, config.KindNominal, 60, map[string]string{"epochs": "many"})
	cases := []struct {
		name     string
		spec     string
		exit     int
		code     string
		contains string
	}{
		{"too few labels", writeSpec(t, few), 2, events.CodeValidationFailed, "needs at least 10 items"},
		{"bad param", writeSpec(t, badParam), 2, events.CodeBadSpec, `param epochs="many"`},
		{"missing spec", filepath.Join(t.TempDir(), "none.json"), 2, events.CodeBadSpec, "no such file"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := Worker(context.Background(), c.spec, &out, &errb)
		evs := parseEvents(t, out.Bytes())
		last := evs[len(evs)-1]
		if code != c.exit || last.Kind != events.KindError || last.String("code") != c.code || !strings.Contains(last.String("message"), c.contains) {
			t.Errorf("%s: exit %d, last event %v", c.name, code, last)
		}
	}
}

// SIGTERM to a real worker process stops it at its next checkpoint: exit
// 4 and no result.
func TestWorkerSIGTERM(t *testing.T) {
	spec := writeBundle(t, config.KindNominal, 3000, map[string]string{"epochs": "100000", "patience": "-1"})
	bin := testcli.Binaries(t)
	cmd := exec.Command(filepath.Join(bin, "potato-agent"), "worker", "--spec", writeSpec(t, spec))
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var tail []string
	signalled := false
	for sc.Scan() {
		tail = append(tail, sc.Text())
		if !signalled && strings.Contains(sc.Text(), `"event":"progress"`) {
			cmd.Process.Signal(syscall.SIGTERM)
			signalled = true
		}
	}
	err := cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 4 {
		t.Fatalf("worker after SIGTERM: %v", err)
	}
	for _, l := range tail {
		if strings.Contains(l, `"event":"result"`) {
			t.Errorf("a cancelled worker sent a result")
		}
	}
}

func TestMain(m *testing.M) { os.Exit(testcli.Main(m)) }

func TestPredictionsPathStaysInWorkdir(t *testing.T) {
	for in, want := range map[string]string{
		"":                     "/w/predictions.jsonl",
		"p.jsonl":              "/w/p.jsonl",
		"sub/p.jsonl":          "/w/sub/p.jsonl",
		"/w/p.jsonl":           "/w/p.jsonl",
		"/etc/passwd":          "/w/etc/passwd",
		"../../etc/passwd":     "/w/etc/passwd",
		"sub/../../../x.jsonl": "/w/x.jsonl",
	} {
		if got := PredictionsPath("/w", in); got != want {
			t.Errorf("PredictionsPath(/w, %q) = %q, want %q", in, got, want)
		}
	}
}
