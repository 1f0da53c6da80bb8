package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
	trainerpkg "potato-training/lib/trainer"
	"potato-training/lib/trainer/calibrate"
	"potato-training/lib/trainer/hf"
)

// TestLocalDecisionCalibrate calibrates, on the annotation server, the
// predictions a tfidf-logreg run wrote back: the run succeeds with the
// threshold in its metrics, calibration.json in artifacts/, and nothing
// scored or written back.
func TestLocalDecisionCalibrate(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 300, 240, "")
	if r := run(t, "run", cfg, "--trainer", "tfidf-logreg", "--schemas", "sentiment"); r.code != 0 {
		t.Fatalf("tfidf-logreg: exit %d: %s", r.code, r.stderr)
	}
	r := run(t, "run", cfg, "--trainer", "decision-calibrate", "--schemas", "sentiment", "--param", "target_precision=0.8")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("decision-calibrate: exit %d: %s\n%s", r.code, r.stderr, runLog(t, dir, id))
	}
	info := testproject.Read(t, dir, id)
	if info.State != rundir.StateSuccess {
		t.Fatalf("state %s: %s", info.State, info.Error)
	}
	if _, ok := info.Metrics["sentiment/min_confidence"]; !ok || info.Metrics["sentiment/target_reached"] != 1.0 {
		t.Errorf("metrics %v", info.Metrics)
	}
	rd := testproject.Root(dir).RunDir(id)
	if _, err := os.Stat(filepath.Join(rd, "artifacts", calibrate.ArtifactName)); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(rd, "predictions.jsonl")); err == nil {
		t.Errorf("decision-calibrate left a predictions file")
	}
	if !strings.Contains(runLog(t, dir, id), "writes no predictions: nothing to score or write back") {
		t.Errorf("run log:\n%s", runLog(t, dir, id))
	}
	spec, err := trainerpkg.ReadSpec(filepath.Join(rd, "spec.json"))
	if err != nil {
		t.Fatal(err)
	}
	if spec.Params[calibrate.ParamProject] != "Test Project" || filepath.Base(spec.Params[calibrate.ParamStore]) != "project.sqlite" {
		t.Errorf("spec params %v", spec.Params)
	}
	var rec map[string]any
	b, _ := os.ReadFile(filepath.Join(rd, "run.json"))
	json.Unmarshal(b, &rec)
	if p, _ := rec["params"].(map[string]any); p[calibrate.ParamStore] != nil {
		t.Errorf("the local backend's params reached run.json: %v", p)
	}
}

// TestLocalHFWithoutTorch: hf-text-classification on a machine without
// torch fails with F4 and the trainer's own error code (SPEC F4).
func TestLocalHFWithoutTorch(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not on PATH")
	}
	if exec.Command(py, "-c", "import torch, transformers, peft").Run() == nil {
		t.Skip("torch, transformers and peft are installed here")
	}
	dir, cfg := testproject.Project(t, 60, 50, "")
	r := run(t, "run", cfg, "--trainer", "hf-text-classification", "--schemas", "sentiment")
	id := strings.TrimSpace(r.stdout)
	info := testproject.Read(t, dir, id)
	if r.code != 1 || info.ErrorCode != "missing_dependency" || info.Error != "Trainer 'hf-text-classification' could not be imported" {
		t.Errorf("exit %d, %q %q\n%s", r.code, info.ErrorCode, info.Error, runLog(t, dir, id))
	}
	launcher := filepath.Join(testproject.Root(dir).RunDir(id), hf.DirName(), hf.Launcher)
	if _, err := os.Stat(launcher); err != nil {
		t.Errorf("the trainer that ran is not in the run directory: %v", err)
	}
	if !strings.Contains(runLog(t, dir, id), "started python3 "+launcher) {
		t.Errorf("run log:\n%s", runLog(t, dir, id))
	}
}
