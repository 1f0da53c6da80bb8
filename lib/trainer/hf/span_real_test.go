package hf_test

// hf-span on real transformers, peft and the packaged all-MiniLM-L6-v2,
// offline, on a part of testdata/span-project (WNUT-16 tweets and their
// entities, the long item of 40 tweets among them), on each backend: two
// epochs of short windows, where what is checked is that the spans come
// back in the item's characters and are scored, not how good they are.

import (
	"bufio"
	"encoding/json"
	"html"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/backend/local"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer/hf"
)

// spanRuns copies testdata/span-project with its first labelled tweets
// (the long item among them) and its first 5 unlabelled ones, block
// appended to its model_training block; its local runs use the stack's
// interpreter, offline.
func spanRuns(t *testing.T, s stack, labelled int, block string) *testproject.Runs {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(testcli.Root(), "testdata", "span-project"))); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data", "tweets.jsonl")
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	nu, nt := 0, 0
	for line := range strings.Lines(string(b)) {
		var it struct{ ID string }
		json.Unmarshal([]byte(line), &it)
		switch {
		case strings.HasPrefix(it.ID, "u") && nu < 5:
			nu++
		case strings.HasPrefix(it.ID, "t") && nt < labelled:
			nt++
		case it.ID == "long000":
		default:
			continue
		}
		keep = append(keep, line)
	}
	if err := os.WriteFile(data, []byte(strings.Join(keep, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	if block != "" {
		f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(block)
		f.Close()
	}
	return &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir, Config: cfg,
		Env: []string{local.PythonEnv + "=" + s.python, "HF_HUB_OFFLINE=1", "HF_HOME=" + t.TempDir()}}
}

// spanRun runs hf-span on backend for a short fit and checks the
// run: a success, a span score in the run log and run.json, and every
// prediction a list of spans inside its item's text.
func spanRun(t *testing.T, s stack, r *testproject.Runs, backend string) rundir.Info {
	t.Helper()
	start := time.Now()
	res := r.Run("--trainer", hf.SpanName, "--schemas", "entities", "--backend", backend, "--param", "model="+s.model,
		"--param", "epochs=2", "--param", "max_length=32", "--param", "batch_size=8", "--param", "learning_rate=0.003")
	info := r.Info(res.ID)
	log := r.File(res.ID, rundir.LogFile)
	if res.Code != 0 || info.State != rundir.StateSuccess {
		t.Fatalf("exit %d, state %s: %s\n%s\nrun.log:\n%s\nstderr.log:\n%s", res.Code, info.State, info.Error, res.Stderr,
			log, r.File(res.ID, "stderr.log"))
	}
	line := heldoutLine.FindString(log)
	if !strings.Contains(line, "exact-match precision") || !strings.Contains(line, "overlap precision") {
		t.Errorf("the run log's held-out line has no span figures: %q\n%s", line, log)
	}
	if info.Heldout == nil || info.Heldout.N == 0 {
		t.Errorf("no held-out score in run.json: %+v", info.Heldout)
	}
	texts := map[string][]rune{}
	for _, split := range []string{"val", "test", "unlabeled"} {
		f, err := os.Open(filepath.Join(r.Root().RunDir(res.ID), rundir.BundleDir, split+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var row struct {
				ID   string `json:"instance_id"`
				Text string `json:"text"`
			}
			json.Unmarshal(sc.Bytes(), &row)
			// The text as Potato displays it, which the spans count: these
			// tweets have no tags or runs of spaces.
			texts[row.ID] = []rune(html.UnescapeString(row.Text))
		}
		f.Close()
	}
	n := 0
	for id, spans := range runSpans(t, filepath.Join(r.Root().RunDir(res.ID), rundir.PredictionsFile)) {
		text, ok := texts[id]
		if !ok {
			t.Errorf("a prediction of %s, which is not an item of the bundle", id)
		}
		for _, s := range spans {
			if s.Start < 0 || s.End <= s.Start || s.End > len(text) || strings.TrimSpace(string(text[s.Start:s.End])) != string(text[s.Start:s.End]) {
				t.Errorf("%s: span %+v is not a span of words of its text %q", id, s, string(text))
			}
		}
		n++
	}
	if n != len(texts) {
		t.Errorf("%d items predicted, the bundle has %d to predict", n, len(texts))
	}
	t.Logf("hf-span on %s: %s (%s)", backend, line, time.Since(start).Round(time.Second))
	return info
}

type span struct {
	Start      int     `json:"start"`
	End        int     `json:"end"`
	Label      string  `json:"label"`
	Confidence float64 `json:"confidence"`
}

// runSpans reads the spans of a run's predictions file (payload) or of
// use_span_model.py's output (spans), by item.
func runSpans(t *testing.T, path string) map[string][]span {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]span{}
	for line := range strings.Lines(string(b)) {
		var p struct {
			ID      string `json:"instance_id"`
			Payload []span `json:"payload"`
			Spans   []span `json:"spans"`
		}
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatalf("%s: %v: %s", path, err, line)
		}
		out[p.ID] = append(p.Payload, p.Spans...)
	}
	return out
}

// TestRealSpanLocal: hf-span on the local backend; the model it saved,
// loaded in plain transformers and peft as potato-rundir(5) shows
// (testdata/use_span_model.py), predicts the run's spans on every test
// item, their confidences within 1e-4.
func TestRealSpanLocal(t *testing.T) {
	s := hfStack(t, "hf-current")
	r := spanRuns(t, s, 60, "")
	info := spanRun(t, s, r, "local")
	run := r.Root().RunDir(info.RunID)
	out := filepath.Join(t.TempDir(), "recipe.jsonl")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(s.python, filepath.Join("testdata", "use_span_model.py"),
		filepath.Join(run, rundir.ArtifactsDir, "model-entities"), filepath.Join(run, rundir.BundleDir, "test.jsonl"))
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "HF_HOME="+t.TempDir())
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = f, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("use_span_model.py: %v\n%s", err, stderr.String())
	}
	f.Close()
	mine, theirs := runSpans(t, out), runSpans(t, filepath.Join(run, rundir.PredictionsFile))
	spans := 0
	for _, m := range theirs {
		spans += len(m)
	}
	if len(mine) == 0 || spans == 0 {
		t.Fatalf("the recipe predicted %d items; the run predicted %d spans: nothing to compare", len(mine), spans)
	}
	for id, m := range mine {
		th := theirs[id]
		if len(m) != len(th) {
			t.Errorf("%s: the recipe finds %v, the run %v", id, m, th)
			continue
		}
		for k := range m {
			if m[k].Start != th[k].Start || m[k].End != th[k].End || m[k].Label != th[k].Label || math.Abs(m[k].Confidence-th[k].Confidence) > 1e-4 {
				t.Errorf("%s: the recipe finds %+v, the run %+v", id, m[k], th[k])
			}
		}
	}
}

// TestRealSpanSSH: hf-span over ssh, on the test sshd on loopback.
func TestRealSpanSSH(t *testing.T) {
	s := hfStack(t, "hf-current")
	sd := testcli.SSHD(t)
	block := testcli.SSHBackend("potato-test", sd+"/ssh_config", testcli.SharedDir(t, 0o777), 30,
		"      gpus: none\n      python: "+s.python+"\n      env: {HF_HUB_OFFLINE: \"1\"}\n")
	if info := spanRun(t, s, spanRuns(t, s, 40, block), "gpu"); info.BackendType != "ssh" {
		t.Errorf("backend type %q, want ssh", info.BackendType)
	}
}

// TestRealSpanSLURM: hf-span through the single-node SLURM of
// scripts/test-slurm.
func TestRealSpanSLURM(t *testing.T) {
	s := hfStack(t, "hf-current")
	conf := filepath.Join(testcli.SLURM(t), "slurm.conf")
	env := `PATH: "/usr/local/bin:/usr/bin:/bin", SLURM_CONF: "` + conf + `", HF_HUB_OFFLINE: "1"`
	block := testcli.SLURMBackend(t, testcli.UserDir(t, "/home/potatotest"), 60, env,
		"      time: \"20:00\"\n      python: "+s.python+"\n      job_python: "+s.python+"\n")
	r := spanRuns(t, s, 40, block)
	info := spanRun(t, s, r, "cluster")
	if info.BackendType != "slurm" || !strings.Contains(r.File(info.RunID, rundir.LogFile), "Submitted SLURM job ") {
		t.Errorf("backend type %q; the run log does not name its SLURM job", info.BackendType)
	}
}

// TestRealSpanAgent: hf-span through a polling agent on loopback.
func TestRealSpanAgent(t *testing.T) {
	s := hfStack(t, "hf-current")
	r := spanRuns(t, s, 40, "  backend: lab\n  backends:\n    lab:\n      type: agent\n      heartbeat_timeout_s: 60\n")
	token, err := r.Root().IssueToken("lab", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	addr := r.StartServer()
	agent := exec.Command(filepath.Join(r.Bin, "potato-agent"), "--server", "http://"+addr, "--backend", "lab",
		"--workdir", t.TempDir(), "--python", s.python, "--once")
	agent.Env = append(os.Environ(), "POTATO_TRAINING_TOKEN="+token, "HF_HUB_OFFLINE=1", "HF_HOME="+t.TempDir())
	var alog testcli.SyncBuffer
	agent.Stderr = &alog
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	if info := spanRun(t, s, r, "lab"); info.BackendType != "agent" {
		t.Errorf("backend type %q, want agent\nagent:\n%s", info.BackendType, alog.String())
	}
}
