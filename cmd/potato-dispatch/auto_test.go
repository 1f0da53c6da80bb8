package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"potato-training/internal/testproject"
	"potato-training/lib/dispatch"
	"potato-training/lib/rundir"
)

// potato-dispatch auto end to end: a run started with trigger auto, its id
// alone on stdout, waited for, auto.json written; then nothing to do, said
// on stderr (or not, with --quiet), exit 0.
func TestAutoCommand(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.AutoProject(t, "    enabled: true\n    update_frequency: 10\n    min_interval_s: 0\n")
	r := run(t, "auto", cfg)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	if !rundir.ValidID(id) || !strings.HasPrefix(r.stderr, "potato-dispatch: run "+id+": success") {
		t.Fatalf("stdout %q, stderr %q", r.stdout, r.stderr)
	}
	info := testproject.Read(t, dir, id)
	if !info.Finished {
		t.Fatalf("auto returned before its run ended (%s)", info.State)
	}
	if info.Trigger != "auto" || info.State != rundir.StateSuccess || info.Backend != "local" {
		t.Errorf("record: %+v", info.Record)
	}
	b, err := os.ReadFile(filepath.Join(testproject.Root(dir).Dir, dispatch.AutoStateFile))
	if err != nil {
		t.Fatal(err)
	}
	var st dispatch.AutoState
	if err := json.Unmarshal(b, &st); err != nil || st.RunID != id || st.Annotations != 40 {
		t.Errorf("auto.json: %s (%v)", b, err)
	}

	r = run(t, "auto", cfg)
	if r.code != 0 || r.stdout != "" || r.stderr != "potato-dispatch: no run: 0 new annotation(s) since the last automatic run: update_frequency is 10\n" {
		t.Errorf("nothing to do: %+v", r)
	}
	r = run(t, "auto", cfg, "--quiet")
	if r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Errorf("--quiet: %+v", r)
	}

	// A config with errors is a usage error.
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("model_training:\n  auto_retrain: {enabled: true, update_frequency: 0}\n"), 0o644)
	r = run(t, "auto", bad)
	if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "bad.yaml has") {
		t.Errorf("bad config: %+v", r)
	}
}

// autoLog is training/auto.log's lines.
func autoLog(t *testing.T, dir string) []string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(testproject.Root(dir).Dir, dispatch.AutoLogFile))
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

var autoLine = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z (start|skip|config|error|success|cancelled)( [0-9A-Za-z_-]+)?: [^\n]+$`)

// A run that auto starts and that fails makes auto exit with the run's
// exit code, with --quiet too, and says so; auto.log has the start and
// the end.
func TestAutoFailedRunExitsNonZero(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tr := testproject.Trainer(t, dir, `echo '{"v":1,"event":"error","code":"trainer_crashed","message":"out of luck"}'
exit 1`)
	cfg := testproject.Write(t, dir, 60, 40, "  auto_retrain:\n    enabled: true\n    trainer: "+tr+"\n    schemas: [sentiment]\n    update_frequency: 10\n    min_interval_s: 0\n")
	r := run(t, "auto", cfg, "--quiet")
	id := strings.TrimSpace(r.stdout)
	if r.code != 1 || !rundir.ValidID(id) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and the run id", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "run "+id+": error: out of luck") || !strings.Contains(r.stderr, "automatic run "+id+" failed; see potato-dispatch status") {
		t.Errorf("stderr %q", r.stderr)
	}
	if info := testproject.Read(t, dir, id); info.Trigger != "auto" || info.State != rundir.StateError {
		t.Errorf("record: %+v", info.Record)
	}
	lines := autoLog(t, dir)
	if len(lines) != 2 || !strings.Contains(lines[0], " start "+id+": 40 new annotation(s), update_frequency 10; trainer "+tr) ||
		!strings.Contains(lines[1], " error "+id+": exit 1: out of luck") {
		t.Errorf("auto.log:\n%s", strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if !autoLine.MatchString(l) {
			t.Errorf("auto.log line %q is not TIME WORD [RUN]: MESSAGE", l)
		}
	}

	// --detach returns at once; the run's end still reaches auto.log.
	if err := dispatch.WriteAutoState(testproject.Root(dir), dispatch.AutoState{}); err != nil {
		t.Fatal(err)
	}
	r = run(t, "auto", cfg, "--detach")
	id = strings.TrimSpace(r.stdout)
	if r.code != 0 || !rundir.ValidID(id) {
		t.Fatalf("--detach: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	testproject.WaitFor(t, "the detached run's end", func() bool { return testproject.Read(t, dir, id).Finished })
	if lines := autoLog(t, dir); len(lines) != 4 || !strings.Contains(lines[3], " error "+id+": exit 1") {
		t.Errorf("auto.log after --detach:\n%s", strings.Join(lines, "\n"))
	}
}

// Why no run started: a configuration problem is said even with --quiet
// and exits 2; nothing to do now is silent with --quiet and exits 0. Each
// decision is a line of auto.log.
func TestAutoConfigProblemsAreSaid(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, extra, want string }{
		{"disabled", "    enabled: false\n", "model_training.auto_retrain.enabled is not true in "},
		{"unknown trainer", "    enabled: true\n    trainer: nosuch\n", `model_training.auto_retrain.trainer is "nosuch": the trainers are`},
		{"broken backend", "    enabled: true\n    backend: gpu\n  backends:\n    gpu: {type: ssh, host: gpu.example.org, hots: x}\n", "model_training.auto_retrain: backend gpu has 1 error(s) in "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			trainer := "    trainer: tfidf-logreg\n"
			if strings.Contains(c.extra, "trainer:") {
				trainer = ""
			}
			dir, cfg := testproject.Project(t, 60, 40, "  auto_retrain:\n    schemas: [sentiment]\n    update_frequency: 1\n"+trainer+c.extra)
			r := run(t, "auto", cfg, "--quiet")
			if r.code != 2 || r.stdout != "" || !strings.HasPrefix(r.stderr, "potato-dispatch: error: ") || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and %q", r.code, r.stdout, r.stderr, c.want)
			}
			lines := autoLog(t, dir)
			if len(lines) != 1 || !strings.Contains(lines[0], " config: ") || !strings.Contains(lines[0], c.want) || !autoLine.MatchString(lines[0]) {
				t.Errorf("auto.log:\n%s", strings.Join(lines, "\n"))
			}
			if entries, _ := os.ReadDir(filepath.Join(testproject.Root(dir).Dir, "runs")); len(entries) != 0 {
				t.Errorf("%d run directories made", len(entries))
			}
		})
	}

	// Too few new labels: nothing to do, silent with --quiet, logged.
	dir, cfg := testproject.AutoProject(t, "    enabled: true\n    update_frequency: 100\n")
	if r := run(t, "auto", cfg, "--quiet"); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Errorf("too few labels with --quiet: %+v", r)
	}
	if lines := autoLog(t, dir); len(lines) != 1 || !strings.HasSuffix(lines[0], " skip: 40 new annotation(s) since the last automatic run: update_frequency is 100") {
		t.Errorf("auto.log:\n%s", strings.Join(lines, "\n"))
	}
}
