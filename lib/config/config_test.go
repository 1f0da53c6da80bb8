package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func parse(t *testing.T, text string) *Config {
	t.Helper()
	return ParseConfig([]byte(text), "/proj")
}

func TestDefaults(t *testing.T) {
	c := parse(t, "annotation_task_name: x\n")
	if len(c.Problems) != 0 {
		t.Fatalf("problems: %v", c.Problems)
	}
	tr := c.Training
	checks := []struct {
		name      string
		got, want any
	}{
		{"enabled", tr.Enabled, false},
		{"backend", tr.Backend, "local"},
		{"device", tr.Device, "auto"},
		{"grace_seconds", tr.GraceSeconds, 20},
		{"retain_runs", tr.RetainRuns, 5},
		{"split_seed", tr.SplitSeed, 0},
		{"aggregation", tr.Aggregation, "consensus"},
		{"max_predictions_mb", tr.MaxPredictionsMB, 512},
		{"max_events_mb", tr.MaxEventsMB, 128},
		{"max_wall_seconds", tr.MaxWallSeconds, 0},
		{"writeback.min_confidence", tr.Writeback.MinConfidence, 0.0},
		{"writeback.include_unlabeled", tr.Writeback.IncludeUnlabeled, false},
		{"auto_retrain.update_frequency", tr.AutoRetrain.UpdateFrequency, 25},
		{"auto_retrain.min_interval_s", tr.AutoRetrain.MinIntervalS, 600},
		{"splits", tr.Splits, []Split{{"train", 0.7}, {"val", 0.15}, {"test", 0.15}}},
		{"task_dir", c.TaskDir, "/proj"},
		{"annotation dir", c.AnnotationDir, "/proj/annotation_output"},
		{"id_key", c.IDKey, "id"},
		{"text_key", c.TextKey, "text"},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %#v, want %#v", ch.name, ch.got, ch.want)
		}
	}
}

func TestBackendDefaults(t *testing.T) {
	c := parse(t, `
model_training:
  backends:
    gpu: {type: ssh, host: g}
    cluster: {type: slurm, host: l, remote_dir: /shared/x}
    lab: {type: agent}
`)
	if len(c.Problems) != 0 {
		t.Fatalf("problems: %v", c.Problems)
	}
	gpu, _ := c.Backend("gpu")
	if !gpu.GPUs.Auto || gpu.MinFreeGPUMB != 2000 || gpu.RemoteDir != DefaultRemoteDir ||
		!gpu.FetchArtifacts || gpu.KeepRemote || gpu.MaxArtifactMB != 2048 ||
		gpu.HeartbeatTimeoutS != 120 || gpu.Python != "python3" {
		t.Errorf("ssh defaults: %+v", gpu)
	}
	cl, _ := c.Backend("cluster")
	if cl.RemoteDir != "/shared/x" || cl.PollIntervalS != 10 || cl.GPUs.Auto || cl.HeartbeatTimeoutS != 120 {
		t.Errorf("slurm defaults: %+v", cl)
	}
	lab, _ := c.Backend("lab")
	if lab.HeartbeatTimeoutS != 120 || lab.QueueTimeoutS != 0 {
		t.Errorf("agent defaults: %+v", lab)
	}
	if l, ok := c.Backend(""); !ok || l != LocalBackend {
		t.Errorf("empty name should be local")
	}
	if got, want := c.BackendNames(), []string{"local", "gpu", "cluster", "lab"}; !reflect.DeepEqual(got, want) {
		t.Errorf("BackendNames = %q, want %q", got, want)
	}
	names := []string{}
	for _, b := range c.Training.Backends {
		names = append(names, b.Name)
	}
	if !reflect.DeepEqual(names, []string{"gpu", "cluster", "lab"}) {
		t.Errorf("backends not in config order: %v", names)
	}
}

func TestPathsResolveAgainstTaskDir(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cfg", "config.yaml")
	os.MkdirAll(filepath.Dir(p), 0o755)
	os.WriteFile(p, []byte(`
task_dir: ../task
data_files: [data/a.json, {path: /abs/b.jsonl}]
output_annotation_dir: out/
annotation_schemes:
  - {annotation_type: multiselect, name: topics, labels: [a, {name: b}]}
model_training:
  splits: {train: 8, test: 2}
`), 0o644)
	c, err := ReadConfigFile(p)
	if err != nil {
		t.Fatal(err)
	}
	task := filepath.Join(dir, "task")
	if c.TaskDir != task {
		t.Errorf("task_dir %q", c.TaskDir)
	}
	if want := []string{filepath.Join(task, "data/a.json"), "/abs/b.jsonl"}; !reflect.DeepEqual(c.DataFiles, want) {
		t.Errorf("data_files %q", c.DataFiles)
	}
	if c.AnnotationDir != filepath.Join(task, "out") || c.TrainingDir() != filepath.Join(task, "out", "training") {
		t.Errorf("annotation dir %q", c.AnnotationDir)
	}
	s, ok := c.Scheme("topics")
	if !ok || s.Kind != KindMultilabel || !reflect.DeepEqual(s.Labels, []string{"a", "b"}) {
		t.Errorf("scheme %+v", s)
	}
	if want := []Split{{"train", 8}, {"test", 2}}; !reflect.DeepEqual(c.Training.Splits, want) {
		t.Errorf("splits kept out of order: %v", c.Training.Splits)
	}
}

func TestReadErrors(t *testing.T) {
	_, err := ReadConfigFile(filepath.Join(t.TempDir(), "none.yaml"))
	if _, ok := err.(*ReadError); !ok || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: %v", err)
	}
	_, err = ReadConfigFile(t.TempDir())
	if _, ok := err.(*ReadError); !ok {
		t.Errorf("directory: %v", err)
	}
}

func TestSLURMTime(t *testing.T) {
	cases := []struct {
		in        string
		want      time.Duration
		unlimited bool
		bad       bool
	}{
		{"30", 30 * time.Minute, false, false},
		{"30:15", 30*time.Minute + 15*time.Second, false, false},
		{"4:00:00", 4 * time.Hour, false, false},
		{"2-3", 51 * time.Hour, false, false},
		{"1-2:30", 26*time.Hour + 30*time.Minute, false, false},
		{"1-0:0:1", 24*time.Hour + time.Second, false, false},
		{"UNLIMITED", 0, true, false},
		{"infinite", 0, true, false},
		{"0", 0, true, false},
		{"", 0, false, true},
		{"1:2:3:4", 0, false, true},
		{"a-1", 0, false, true},
		{"1h", 0, false, true},
		{"1-", 0, false, true},
		{"1-1:1:1:1", 0, false, true},
	}
	for _, c := range cases {
		d, u, err := ParseSLURMTime(c.in)
		if (err != nil) != c.bad || d != c.want || u != c.unlimited {
			t.Errorf("ParseSLURMTime(%q) = %v, %v, %v", c.in, d, u, err)
		}
	}
}

func TestEditDistance(t *testing.T) {
	if d := editDistance("pyhton", "python"); d != 1 {
		t.Errorf("swap counts %d", d)
	}
	if got := suggest("pyhton", SSHKeys); got != ` (did you mean "python"?)` {
		t.Errorf("suggest %q", got)
	}
	if got := suggest("zzzz", SSHKeys); got != "" {
		t.Errorf("far-off key got a suggestion %q", got)
	}
}

func TestKindOf(t *testing.T) {
	for typ, want := range map[string]Kind{"radio": KindNominal, "select": KindNominal, "multiselect": KindMultilabel,
		"likert": KindOrdinal, "slider": KindContinuous, "number": KindContinuous, "span": KindSpan, "text": KindOther} {
		if got := KindOf(typ); got != want {
			t.Errorf("KindOf(%q) = %q", typ, got)
		}
	}
}

// The decoder tags each problem of a backend's entry with the backend,
// even one whose type it cannot read, so that the errors of one backend
// can be told from the rest; BackendError says them for that backend only.
func TestBackendErrors(t *testing.T) {
	c := parse(t, `model_training:
  backends:
    gpu: {type: ssh, host: h, pyhton: python3}
    typo: {type: shh}
    fine: {type: agent}
`)
	c.Path = "config.yaml"
	by := map[string][]Problem{}
	for _, p := range c.Problems {
		if p.Backend == "" {
			t.Errorf("problem without its backend: %+v", p)
		}
		by[p.Backend] = append(by[p.Backend], p)
	}
	if len(by["gpu"]) != 1 || len(by["typo"]) != 1 || len(by["fine"]) != 0 {
		t.Fatalf("problems by backend: %+v", by)
	}
	c.BackendErrors = by
	err := c.BackendError("gpu")
	want := "backend gpu has 1 error(s) in config.yaml; run potato validate config.yaml\n" +
		`  config.yaml:3: model_training.backends.gpu: unknown key "pyhton" for an ssh backend (did you mean "python"?)`
	if err == nil || err.Error() != want {
		t.Errorf("BackendError(gpu) = %v, want %s", err, want)
	}
	if err := c.BackendError("typo"); err == nil || !strings.Contains(err.Error(), `model_training.backends.typo.type is "shh"`) {
		t.Errorf("BackendError(typo) = %v", err)
	}
	for _, name := range []string{"fine", "local", "nowhere"} {
		if err := c.BackendError(name); err != nil {
			t.Errorf("BackendError(%s) = %v, want nil", name, err)
		}
	}
}
