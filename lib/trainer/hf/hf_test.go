package hf_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"potato-training/internal/testproject"
	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/probe"
	"potato-training/lib/trainer"
	"potato-training/lib/trainer/hf"
)

func python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not on PATH: the Python trainer cannot be tested here")
	}
	return p
}

// TestPythonUnit runs the trainer's own unit tests (the parts that need no
// torch) and fails when they do.
func TestPythonUnit(t *testing.T) {
	py := python(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-s", ".", "-p", "test_*.py", "-v")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "trainers")
	p1, err := hf.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := hf.Write(dir)
	if err != nil || p2 != p1 {
		t.Fatalf("second Write: %q, %v; first %q", p2, err, p1)
	}
	if !strings.Contains(filepath.Base(p1), hf.SHA256()[:16]) {
		t.Errorf("%s is not named by its hash", p1)
	}
	b, err := os.ReadFile(p1)
	if err != nil || !bytes.Equal(b, hf.Script()) {
		t.Fatalf("written script differs: %v", err)
	}
	if sum := sha256.Sum256(b); filepath.Base(p1) != hf.FileName() || len(hf.SHA256()) != 64 || sum == [32]byte{} {
		t.Errorf("name %s", p1)
	}
	st, _ := os.Stat(p1)
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
	// A damaged copy is replaced.
	os.WriteFile(p1, []byte("broken"), 0o644)
	if _, err := hf.Write(dir); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p1); !bytes.Equal(b, hf.Script()) {
		t.Errorf("a damaged script was kept")
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestWithoutTorch is SPEC F4 on a machine without torch: the trainer run
// on a real bundle reports the missing packages with the probe's wording
// and exits 3.
func TestWithoutTorch(t *testing.T) {
	py := python(t)
	if exec.Command(py, "-c", "import torch, transformers, peft").Run() == nil {
		t.Skip("torch, transformers and peft are installed here: no missing dependency to report")
	}
	dir := t.TempDir()
	cfg, err := config.ReadConfigFile(testproject.Write(t, dir, 40, 30, ""))
	if err != nil {
		t.Fatal(err)
	}
	bdir := filepath.Join(dir, "bundle")
	m, err := bundle.Build(cfg, bdir, []string{"sentiment"})
	if err != nil {
		t.Fatal(err)
	}
	spec := trainer.Spec{V: 1, RunID: "r1", Trainer: hf.Name, Schemas: m.Schemas, BundleDir: bdir,
		Workdir: filepath.Join(dir, "artifacts"), Params: map[string]string{"epochs": "1"}}
	specPath := filepath.Join(dir, "spec.json")
	if err := spec.Write(specPath); err != nil {
		t.Fatal(err)
	}
	argv, err := trainer.Argv(spec.Trainer, specPath, trainer.Programs{Python: py, ScriptDir: filepath.Join(dir, "trainers")})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != events.ExitMissingDependency {
		t.Fatalf("exit: %v, want 3\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var last events.Event
	for _, line := range bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n")) {
		e, err := events.Parse(line)
		if err != nil {
			t.Fatalf("a line that is not an event: %q", line)
		}
		last = e
	}
	var missing []string
	for _, p := range []string{"torch", "transformers", "peft"} {
		if exec.Command(py, "-c", "import importlib.util,sys; sys.exit(importlib.util.find_spec('"+p+"') is None)").Run() != nil {
			missing = append(missing, p)
		}
	}
	msg, hint := probe.ImportError(hf.Name, missing)
	if last.Kind != events.KindError || last.String("code") != events.CodeMissingDependency ||
		last.String("message") != msg || last.String("install_hint") != hint {
		t.Errorf("last event %+v, want error %q with hint %q", last, msg, hint)
	}
	if msg != "Trainer 'hf-text-classification' could not be imported" {
		t.Errorf("F4 is worded %q", msg)
	}
	if _, err := os.Stat(filepath.Join(spec.Workdir, "predictions.jsonl")); err == nil {
		t.Errorf("predictions.jsonl written without a model")
	}
}
