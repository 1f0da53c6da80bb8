package hf_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/backend/local"
	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/probe"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
	"potato-training/lib/trainer/hf"
)

// torchPython is an interpreter that has torch: $POTATO_TRAINING_PYTHON,
// Debian's /usr/bin/python3 (scripts/install-deps installs its
// python3-torch), or python3 on PATH. Without one the test skips, except
// under CI, where a missing torch fails it. The interpreters are tried once
// for the package's tests (findTorch), each asked whether it finds torch,
// not made to import it (seconds of CPU): a torch that is installed but
// does not import fails the tests that use it, as it should.
func torchPython(t *testing.T) string {
	t.Helper()
	path, tried := findTorch()
	if path != "" {
		return path
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("no interpreter with torch (tried %v): scripts/install-deps installs python3-torch", tried)
	}
	t.Skipf("no interpreter with torch (tried %v): the trainer's loop cannot run here", tried)
	return ""
}

var findTorch = sync.OnceValues(func() (string, []string) {
	var tried []string
	for _, p := range []string{os.Getenv("POTATO_TRAINING_PYTHON"), "/usr/bin/python3", "python3"} {
		if p == "" {
			continue
		}
		path, err := exec.LookPath(p)
		if err != nil {
			continue
		}
		tried = append(tried, path)
		if testcli.HasModule(path, "torch") {
			return path, tried
		}
	}
	return "", tried
})

// anyPython is python3 from PATH or /usr/bin/python3, for what needs no
// torch; a machine without either skips, except under CI.
func anyPython(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("python3 is not on PATH")
	}
	t.Skip("python3 is not on PATH: the Python trainer cannot be tested here")
	return ""
}

// TestPythonUnit runs the trainer's own unit tests, the real training loop
// on torch included, and fails when they do: in the whole suite in two
// interpreters side by side (pyUnit), test_loop.py (about half of the
// time) and the other files, beside the package's other parallel tests;
// under -short in one. Debian's interpreter
// has torch and scikit-learn but not transformers, so the files whose
// tests need the real transformers (whole embed-logreg runs, span offsets
// through a fast tokenizer) run once more on the hf-current stack, in the
// whole suite (not under -short: they are real model runs, some 17 s of
// CPU).
func TestPythonUnit(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	run := func(t *testing.T, py, half, mods string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, py, "-c", pyUnit, filepath.Join("python", "tests"), half, mods)
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python3 unittest (%s %s): %v\n%s", half, mods, err, out)
		}
		t.Logf("%s", out)
	}
	if testing.Short() {
		// One interpreter for every file: under make check the other
		// packages keep both cores busy, so a second interpreter gains no
		// time and costs a second import of torch and transformers.
		t.Run("all", func(t *testing.T) {
			t.Parallel()
			run(t, py, "except", "")
		})
	} else {
		for _, half := range []string{"only", "except"} {
			t.Run(half+"_test_loop", func(t *testing.T) {
				t.Parallel()
				run(t, py, half, "test_loop")
			})
		}
	}
	t.Run("hf-current", func(t *testing.T) {
		if testing.Short() {
			t.Skip("whole embed-logreg runs on the packaged all-MiniLM-L6-v2 (test_embed.RunTest), real model runs: without -short")
		}
		t.Parallel()
		py, _ := testcli.Venv(t, "hf-current", "import transformers, sklearn")
		run(t, py, "only", "test_embed,test_spans")
	})
}

// pyUnit runs the tests that python -m unittest discover -s DIR finds,
// those of the modules MODS (comma-separated) only or all but those (argv:
// DIR only|except MODS), and exits 1 when one fails, or none ran. A file
// that does not import is a failed test in the "except" half.
const pyUnit = `import sys, unittest
def cases(s):
    for t in s:
        if isinstance(t, unittest.TestSuite):
            yield from cases(t)
        else:
            yield t
top, only, mods = sys.argv[1], sys.argv[2] == "only", set(sys.argv[3].split(","))
found = unittest.defaultTestLoader.discover(top, pattern="test_*.py")
suite = unittest.TestSuite(t for t in cases(found) if (type(t).__module__ in mods) == only)
r = unittest.TextTestRunner(verbosity=2).run(suite)
sys.exit(0 if r.wasSuccessful() and r.testsRun else 1)
`

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
	tree := filepath.Dir(p1)
	if filepath.Base(p1) != hf.Launcher || filepath.Base(tree) != hf.DirName() || !strings.Contains(hf.DirName(), hf.SHA256()[:16]) {
		t.Fatalf("%s is not the launcher in a tree named by its hash", p1)
	}
	files := hf.Files()
	if len(files) < 5 || files[hf.Launcher] == nil || files["potato_hf/loop.py"] == nil {
		t.Fatalf("files: %d", len(files))
	}
	same := func() {
		t.Helper()
		for n, want := range files {
			p := filepath.Join(tree, filepath.FromSlash(n))
			b, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(b, want) {
				t.Errorf("%s differs from the embedded file: %v", n, err)
			}
			if st, err := os.Stat(p); err == nil && st.Mode().Perm() != 0o644 {
				t.Errorf("%s: mode %v, want 0644", n, st.Mode().Perm())
			}
		}
	}
	same()
	// A damaged or incomplete tree is replaced whole.
	os.WriteFile(filepath.Join(tree, "potato_hf", "loop.py"), []byte("broken"), 0o644)
	os.Remove(filepath.Join(tree, "potato_hf", "spec.py"))
	if p3, err := hf.Write(dir); err != nil || p3 != p1 {
		t.Fatalf("Write over a damaged tree: %q, %v", p3, err)
	}
	same()
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	// The hash covers every file: the trees of two versions differ.
	sum := sha256.Sum256(files[hf.Launcher])
	if hf.SHA256() == fmt.Sprintf("%x", sum) {
		t.Errorf("the hash is the launcher's alone")
	}
}

// TestWriteConcurrent: processes that write the trainer into one
// directory at once all get the same whole tree.
func TestWriteConcurrent(t *testing.T) {
	dir := t.TempDir()
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			p, err := hf.Write(dir)
			if err == nil {
				_, err = os.Stat(p)
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 || entries[0].Name() != hf.DirName() {
		t.Errorf("%s holds %v", dir, entries)
	}
}

// TestWithoutTorch is SPEC F4 on an interpreter without torch: the trainer
// run on a real bundle reports the missing packages with the probe's
// wording and exits 3. The interpreter is run with -S, without its
// site-packages, where torch is installed on a machine that has it.
func TestWithoutTorch(t *testing.T) {
	t.Parallel()
	py := anyPython(t)
	if exec.Command(py, "-S", "-c", "import torch, transformers, peft").Run() == nil {
		t.Skip("torch, transformers and peft are importable without site-packages: no missing dependency to report")
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
	cmd := exec.Command(argv[0], append([]string{"-S"}, argv[1:]...)...)
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
	for _, p := range []string{"torch", "transformers", "peft", "jinja2"} {
		if exec.Command(py, "-S", "-c", "import importlib.util,sys; sys.exit(importlib.util.find_spec('"+p+"') is None)").Run() != nil {
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

func TestMain(m *testing.M) { os.Exit(testcli.Main(m)) }

// spamProject writes the SpamAssassin-like project of
// testdata/spam_project.py into a temporary directory and returns the
// runs of potato-dispatch over it, with py as the local backend's
// interpreter.
func spamProject(t *testing.T, py string, items, labelled int) *testproject.Runs {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command(py, filepath.Join("testdata", "spam_project.py"), dir,
		"--items", fmt.Sprint(items), "--labelled", fmt.Sprint(labelled)).CombinedOutput()
	if err != nil {
		t.Fatalf("spam_project.py: %v\n%s", err, out)
	}
	return &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir, Config: strings.TrimSpace(string(out)),
		Env: []string{local.PythonEnv + "=" + py, "POTATO_TRAINING_STALL_TIMEOUT_S=120"}}
}

// TestDispatchSpam is the trainer's bar on a CPU torch: potato-dispatch
// run --trainer hf-text-classification --param model=builtin:ngram on a
// 3000-email spam project succeeds, scores at least 0.93 on the held-out
// test items, records its precision and writes prelabels.
func TestDispatchSpam(t *testing.T) {
	testcli.Short(t, "a real fine-tune")
	py := torchPython(t)
	r := spamProject(t, py, 3000, 2400)
	res := r.Run("--trainer", hf.Name, "--param", "model=builtin:ngram", "--schemas", "spam", "--backend", "local")
	info := r.Info(res.ID)
	if res.Code != 0 || info.State != rundir.StateSuccess {
		t.Fatalf("exit %d, state %s: %s\n%s\nrun.log:\n%s\nstderr.log:\n%s", res.Code, info.State, info.Error, res.Stderr,
			r.File(res.ID, "run.log"), r.File(res.ID, "stderr.log"))
	}
	if info.Heldout == nil || info.Heldout.N < 300 || info.Heldout.Accuracy < 0.93 {
		t.Errorf("held-out %+v, want accuracy >= 0.93 on 300 or more test items", info.Heldout)
	}
	if info.Precision != "fp32" {
		t.Errorf("run.json precision %q, want fp32", info.Precision)
	}
	if sps, _ := info.Metrics["steps_per_s"].(float64); sps <= 0 {
		t.Errorf("steps_per_s %v", info.Metrics["steps_per_s"])
	}
	if info.Writeback["n_written"] < 300 {
		t.Errorf("write-back %v: want the val, test and unlabeled items written as prelabels", info.Writeback)
	}
	if _, err := os.Stat(filepath.Join(r.Dir, "project.sqlite")); err != nil {
		t.Errorf("no prelabel store: %v", err)
	}
	log := r.File(res.ID, "run.log")
	if !strings.Contains(log, "training process ended: exit status 0") || !strings.Contains(log, "precision fp32") {
		t.Errorf("run.log:\n%s", log)
	}
	card := r.File(res.ID, filepath.Join(rundir.ArtifactsDir, "model-spam", "model_card.json"))
	if !strings.Contains(card, `"precision": "fp32"`) || !strings.Contains(card, `"label2id"`) {
		t.Errorf("model_card.json:\n%s", card)
	}
	t.Logf("held-out accuracy %.3f on %d items, %.1f steps/s, %v s", info.Heldout.Accuracy, info.Heldout.N,
		info.Metrics["steps_per_s"], info.Metrics["fit_seconds"])
}

// cancelAfterFirstStep cancels the run once its trainer has reported a
// step, and fails the test unless the trainer stops (its exit status 4,
// SIGTERM honoured at the next step) and the run ends cancelled, with
// potato-dispatch's own exit code for it, 3.
func cancelAfterFirstStep(t *testing.T, r *testproject.Runs, id string) {
	t.Helper()
	testproject.WaitFor(t, "the trainer's first step", func() bool {
		i := r.Info(id)
		return i.Finished || i.Progress != nil && i.Progress.Current > 0
	})
	if code, out, errb := testproject.Exec(t, r.Command("potato-dispatch", "cancel", r.Config, id)); code != 0 {
		t.Fatalf("cancel: exit %d: %s%s", code, out, errb)
	}
	info := r.Wait(id, 2*time.Minute)
	log := r.File(id, rundir.LogFile)
	if info.State != rundir.StateCancelled || info.ExitCode == nil || *info.ExitCode != 3 {
		t.Fatalf("state %s, exit code %v, want cancelled and 3\nrun.log:\n%s", info.State, info.ExitCode, log)
	}
	if !strings.Contains(log, "training process ended: exit status 4") {
		t.Errorf("the trainer did not exit 4:\nrun.log:\n%s", log)
	}
}

// TestDispatchSpamCancel: a cancel while the model fits stops the trainer
// (its exit status 4, SIGTERM honoured at the next step), the run is
// cancelled (potato-dispatch's own exit code for it, 3), and no
// predictions are left.
func TestDispatchSpamCancel(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	r := spamProject(t, py, 1500, 1200)
	id := r.Detach("--trainer", hf.Name, "--param", "model=builtin:ngram", "--param", "epochs=100000",
		"--param", "patience=-1", "--schemas", "spam", "--backend", "local")
	cancelAfterFirstStep(t, r, id)
	evs := r.File(id, "events.jsonl")
	if !strings.Contains(evs, `"state":"cancelled"`) || strings.Contains(evs, `"event":"result"`) {
		t.Errorf("events.jsonl:\n%s", evs)
	}
	for _, f := range []string{"predictions.jsonl", filepath.Join(rundir.ArtifactsDir, "predictions.jsonl"),
		filepath.Join(rundir.ArtifactsDir, "predictions.jsonl.tmp")} {
		if r.File(id, f) != "" {
			t.Errorf("%s left by a cancelled run", f)
		}
	}
}

// TestDispatchOutOfMemory: a model too large for the machine (2^40 hash
// buckets: more than any address space, a real allocation failure) ends
// the run with out_of_memory and the trainer's exit status 5.
func TestDispatchOutOfMemory(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	r := spamProject(t, py, 200, 150)
	res := r.Run("--trainer", hf.Name, "--param", "model=builtin:ngram", "--param", "buckets=1099511627776",
		"--param", "embed_dim=64", "--schemas", "spam", "--backend", "local")
	info := r.Info(res.ID)
	log := r.File(res.ID, "run.log")
	if res.Code != 1 || info.ErrorCode != "out_of_memory" || !strings.Contains(log, "exit status 5") {
		t.Fatalf("exit %d, %s: %s\nrun.log:\n%s", res.Code, info.ErrorCode, info.Error, log)
	}
	if !strings.Contains(info.Error, "ran out of memory") || !strings.Contains(info.Error, "batch_size") {
		t.Errorf("error %q does not say what to lower", info.Error)
	}
}

// The packages a run imports follow its model and lora parameters, as the
// script decides them, so that a host is not refused for a package the
// run never imports.
func TestPackages(t *testing.T) {
	for _, tc := range []struct {
		params map[string]string
		want   string
	}{
		{nil, "torch transformers peft jinja2"},
		{map[string]string{"model": "distilbert-base-uncased"}, "torch transformers peft jinja2"},
		{map[string]string{"model": "builtin:ngram"}, "torch"},
		{map[string]string{"model": "builtin:ngram", "lora": "true"}, "torch"},
		{map[string]string{"lora": "false"}, "torch transformers"},
		{map[string]string{"lora": "Off"}, "torch transformers"},
		{map[string]string{"lora": "1"}, "torch transformers peft jinja2"},
	} {
		if got := strings.Join(hf.Packages(tc.params), " "); got != tc.want {
			t.Errorf("Packages(%v) = %q, want %q", tc.params, got, tc.want)
		}
	}
}
