package dispatch_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"potato-training/internal/testproject"
	"potato-training/lib/dispatch"
	"potato-training/lib/rundir"
)

func plan(t *testing.T, cfg string, now time.Time) *dispatch.AutoPlan {
	t.Helper()
	p, err := dispatch.PlanAuto(cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestAutoReasons(t *testing.T) {
	now := time.Now()

	// Not enabled.
	_, cfg := testproject.AutoProject(t, "    enabled: false\n")
	if p := plan(t, cfg, now); p.Start || !p.Problem || p.Reason != "model_training.auto_retrain.enabled is not true in "+cfg {
		t.Errorf("disabled: %+v", p)
	}

	// Enabled, 40 annotations, none counted before: a run, on the default
	// backend, with the params as --param.
	dir, cfg := testproject.AutoProject(t, "    enabled: true\n    update_frequency: 40\n    params: {max_features: 5000, patience: \"2\"}\n")
	p := plan(t, cfg, now)
	if !p.Start || p.Problem || p.Annotations != 40 || p.New != 40 || p.Backend != "local" {
		t.Fatalf("first: %+v", p)
	}
	want := []string{"run", cfg, "--trainer", "tfidf-logreg", "--schemas", "sentiment", "--backend", "local", "--trigger", "auto",
		"--param", "max_features=5000", "--param", "patience=2"}
	if !slices.Equal(p.Args(), want) {
		t.Errorf("args %q, want %q", p.Args(), want)
	}

	// A second check while the first holds the lock starts nothing.
	if q := plan(t, cfg, now); q.Start || !strings.Contains(q.Reason, "another potato-dispatch auto") {
		t.Errorf("locked: %+v", q)
	}
	if err := p.Started("20261202-135501-7f3a", now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	p.Close()

	// 40 counted at the last automatic run, 40 now: too few.
	if q := plan(t, cfg, now); q.Start || q.Problem || q.Reason != "0 new annotation(s) since the last automatic run: update_frequency is 40" {
		t.Errorf("few: %+v", q)
	}
	// One short of update_frequency, then enough.
	if err := dispatch.WriteAutoState(testproject.Root(dir), dispatch.AutoState{RunID: "20261202-135501-7f3a", StartedAt: now.Add(-time.Hour), Annotations: 1}); err != nil {
		t.Fatal(err)
	}
	if q := plan(t, cfg, now); q.Start || q.New != 39 || q.Reason != "39 new annotation(s) since the last automatic run: update_frequency is 40" {
		t.Errorf("39 new: %+v", q)
	}
	if err := dispatch.WriteAutoState(testproject.Root(dir), dispatch.AutoState{RunID: "20261202-135501-7f3a", StartedAt: now.Add(-time.Hour), Annotations: 0}); err != nil {
		t.Fatal(err)
	}
	if q := plan(t, cfg, now); !q.Start || q.New != 40 {
		t.Errorf("40 new: %+v", q)
	}
}

func TestAutoInterval(t *testing.T) {
	now := time.Now()
	dir, cfg := testproject.AutoProject(t, "    enabled: true\n    update_frequency: 5\n    min_interval_s: 600\n")
	if err := dispatch.WriteAutoState(testproject.Root(dir), dispatch.AutoState{RunID: "20261202-135501-7f3a", StartedAt: now.Add(-5 * time.Minute), Annotations: 0}); err != nil {
		t.Fatal(err)
	}
	p := plan(t, cfg, now)
	if p.Start || p.Reason != "the last automatic run, 20261202-135501-7f3a, started 5m0s ago: min_interval_s is 600" {
		t.Errorf("interval: %+v", p)
	}
	p.Close()
	if p := plan(t, cfg, now.Add(6*time.Minute)); !p.Start {
		t.Errorf("after the interval: %+v", p)
	}
}

func TestAutoBusyAndBackend(t *testing.T) {
	dir, cfg := testproject.AutoProject(t, "    enabled: true\n    update_frequency: 1\n    backend: lab\n  backends:\n    lab: {type: agent}\n")
	r, err := rundir.Open(testproject.Root(dir).Dir)
	if err != nil {
		t.Fatal(err)
	}
	run, err := r.Create(rundir.Record{Trainer: "tfidf-logreg", Backend: "local", BackendType: "local"})
	if err != nil {
		t.Fatal(err)
	}
	p := plan(t, cfg, time.Now())
	if p.Start || p.Reason != fmt.Sprintf("run %s is queued: an automatic run waits until no run is queued or running", run.ID) {
		t.Errorf("busy: %+v", p)
	}
	p.Close()
	// A run whose dispatch is gone holds nothing.
	run.Close()
	if p := plan(t, cfg, time.Now()); !p.Start || p.Backend != "lab" {
		t.Errorf("after the dispatch went: %+v", p)
	}
}

// Every annotator's labels count, each (item, schema) pair once per
// annotator; model_training.enabled off starts nothing either.
func TestAutoCountAndTrainingOff(t *testing.T) {
	dir, cfg := testproject.AutoProject(t, "    enabled: true\n    update_frequency: 45\n")
	state := `{"user_id": "second", "instance_id_to_label_to_value": {
		"r1": [[{"schema": "sentiment", "name": "positive"}, "true"]],
		"r2": [[{"schema": "sentiment", "name": "negative"}, "true"]],
		"r3": [[{"schema": "sentiment", "name": "positive"}, "true"]],
		"r4": [[{"schema": "sentiment", "name": "negative"}, "true"]],
		"r50": [[{"schema": "sentiment", "name": "negative"}, "true"]]}}`
	os.MkdirAll(filepath.Join(dir, "annotation_output", "second"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "annotation_output", "second", "user_state.json"), []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
	if p := plan(t, cfg, time.Now()); !p.Start || p.Annotations != 45 {
		t.Errorf("two annotators: %+v", p)
	}

	off := filepath.Join(dir, "off.yaml")
	text, _ := os.ReadFile(cfg)
	os.WriteFile(off, []byte(strings.Replace(string(text), "  enabled: true\n  grace", "  enabled: false\n  grace", 1)), 0o644)
	if p := plan(t, off, time.Now()); p.Start || p.Reason != "model_training.enabled is not true in "+off {
		t.Errorf("training off: %+v", p)
	}
}
