package hub

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"potato-training/lib/rundir"
)

// finishedRun records a finished run in root as a dispatch would leave
// it, with more fields set by set and lines in its run log.
func finishedRun(t *testing.T, root *rundir.Root, id string, set func(*rundir.Record), log ...string) {
	t.Helper()
	rec := rundir.Record{RunID: id, Trainer: "hf-text-classification", Schemas: []string{"spam"}, State: rundir.StateSuccess}
	set(&rec)
	run, err := root.Create(rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range log {
		run.Logf("%s", l)
	}
	code := 0
	run.Update(func(r *rundir.Record) { r.ExitCode = &code })
	if err := run.Finish(0); err != nil {
		t.Fatal(err)
	}
	run.Close()
}

// Which runs are refused, and the words: those of the record alone (the
// trainer, the model it trained, where the model is), before the model
// directory is read. The records are written here as the dispatch writes
// them; cmd/potato-dispatch's TestPushRefused refuses real runs (an ssh
// run with fetch_artifacts: false, a tfidf-logreg run).
func TestFindRefuses(t *testing.T) {
	root, err := rundir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		id   string
		set  func(*rundir.Record)
		log  []string
		want string
	}{
		{"20261202T100000-000001", func(r *rundir.Record) {
			r.Backend, r.BackendType, r.ArtifactURI = "lab", "agent", "ws-01:/home/me/.cache/potato-training/jobs/20261202T100000-000001/artifacts"
		}, nil, "run 20261202T100000-000001: its model stayed on ws-01 (an agent backend keeps its model on the agent's machine, in ws-01:/home/me/.cache/potato-training/jobs/20261202T100000-000001/artifacts): " + MsgRemote},
		{"20261202T100000-000002", func(r *rundir.Record) {
			r.BackendType, r.ArtifactURI = "ssh", "ssh://gpu01/srv/jobs/x/artifacts"
		}, []string{"model-spam/model.safetensors is over max_artifact_mb (2048 MB): it stays on gpu01 in ssh://gpu01/srv/jobs/x/artifacts"},
			"its model stayed on gpu01 (a file over max_artifact_mb stayed there; the run log names it, in ssh://gpu01/srv/jobs/x/artifacts): " + MsgRemote},
		{"20261202T100000-000003", func(r *rundir.Record) {
			r.BackendType, r.ArtifactURI = "slurm", "ssh://login1/scratch/jobs/y/artifacts"
		}, []string{"The copy from login1 sent nothing for 180 s: the run's predictions are already kept; only the model files are missing from artifacts/ (they stay on login1)"},
			"(the copy back stalled, in ssh://login1/scratch/jobs/y/artifacts)"},
		{"20261202T100000-000004", func(r *rundir.Record) { r.Trainer = "decision-calibrate" }, nil, "whose model is a set of thresholds"},
		{"20261202T100000-000005", func(r *rundir.Record) { r.Params = map[string]string{"model": "builtin:ngram"} }, nil,
			"trained model=builtin:ngram, the trainer's own n-gram model (model.pt, ngram.json), which transformers cannot load: " + MsgNotTransformers},
		{"20261202T100000-000006", func(r *rundir.Record) { r.State = rundir.StateCancelled }, nil, "ended cancelled: only a successful run has a model to push"},
		{"20261202T100000-000007", func(r *rundir.Record) { r.ArtifactURI = "file:///gone" }, nil, "is not on this machine (removed since, or never written)"},
	}
	for _, c := range cases {
		finishedRun(t, root, c.id, c.set, c.log...)
		_, err := Find(root, c.id, "")
		var np *NotPushable
		if !errors.As(err, &np) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal with %q", c.id, err, c.want)
		}
	}
	// Not refusals but usage errors: no run, a schema the run did not
	// train, none named of several.
	finishedRun(t, root, "20261202T100000-000008", func(r *rundir.Record) { r.Schemas = []string{"spam", "signals"} })
	for _, c := range []struct{ id, schema, want string }{
		{"20261202T100000-999999", "", "no run 20261202T100000-999999"},
		{"../etc", "", `no run "../etc"`},
		{"20261202T100000-000008", "", "trained a model for each of spam, signals: name one with --schema"},
		{"20261202T100000-000008", "topic", `did not train schema "topic"`},
	} {
		_, err := Find(root, c.id, c.schema)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: %v, want a usage error with %q", c.id, c.schema, err, c.want)
		}
	}
}

// A model directory that holds a link is refused: the push would send
// whatever it points at.
func TestFindRefusesLink(t *testing.T) {
	root, _ := rundir.Open(t.TempDir())
	id := "20261202T100000-000010"
	finishedRun(t, root, id, func(r *rundir.Record) {})
	dir := filepath.Join(root.RunDir(id), rundir.ArtifactsDir, "model-spam")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "model_card.json"), []byte(`{"format":"potato-model-card","labels":["a","b"]}`), 0o644)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{}`), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(dir, "vocab.txt"))
	if _, err := Find(root, id, ""); err == nil || !strings.Contains(err.Error(), "vocab.txt is not a regular file") {
		t.Errorf("a link in the model: %v", err)
	}
	os.Remove(filepath.Join(dir, "vocab.txt"))
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("the library's card"), 0o644)
	m, err := Find(root, id, "")
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != KindFull || len(m.Files) != 2 {
		t.Errorf("kind %s, files %+v; want full, config.json and model_card.json (README.md is the push's own)", m.Kind, m.Files)
	}
}

// The model card of hostile names: labels and a schema name that would
// be HTML, a link, a table cell's end or a heading come out escaped, on
// one line each; the front matter stays YAML the Hub reads, with the
// licence of the base model's card; a base model named by a directory
// is not written, in the front matter or elsewhere.
func TestCardEscapes(t *testing.T) {
	base := t.TempDir()
	os.WriteFile(filepath.Join(base, "README.md"), []byte("---\nlicense: other\nlicense_name: lab-licence\nlicense_link: LICENSE\n---\n# x\n"), 0o644)
	thr := 0.5
	m := &Model{Record: rundir.Record{RunID: "20261202T100000-000011", Params: map[string]string{"epochs": "2", "note": "<b>x</b>"},
		Metrics: map[string]any{"heldout": map[string]any{"**s**\n# h": map[string]any{"n": 4, "accuracy": 0.5, "macro_f1": 0.25,
			"labels": []any{map[string]any{"label": "<img src=x onerror=alert(1)>", "support": 2, "precision": 1.0, "recall": 0.5, "f1": 0.667}}}}}},
		Schema: "**s**\n# h", Kind: KindAdapter,
		Card: ModelCard{Labels: []string{"<img src=x onerror=alert(1)>", "a|b", "[x](javascript:alert(1))"}, Kind: "multilabel",
			ProblemType: "multi_label_classification", Threshold: &thr, BaseModel: base, MaxLength: 128, Lora: &Lora{R: 8, Alpha: 16, TargetModules: []string{"q", "v"}}}}
	card := m.README(CardOptions{Repo: "alice/x", Base: ReadBaseCard(base, os.Getenv)})
	meta := frontMatter(card)
	if meta == nil || meta["license"] != "other" || meta["license_name"] != "lab-licence" || meta["library_name"] != "peft" || meta["base_model"] != nil {
		t.Errorf("front matter %v", meta)
	}
	var tags struct{ Tags []string }
	yaml.Unmarshal([]byte(strings.SplitN(card, "\n---\n", 2)[0][4:]), &tags)
	if strings.Join(tags.Tags, ",") != "potato-training,hf-text-classification,text-classification,lora,multi-label-classification" {
		t.Errorf("tags %v", tags.Tags)
	}
	for _, bad := range []string{"](javascript", "\n# h", "**s**", base} {
		if strings.Contains(card, bad) {
			t.Errorf("the card holds %q", bad)
		}
	}
	if regexp.MustCompile(`(^|[^\\])<`).MatchString(card) {
		t.Errorf("the card holds a < that is not escaped")
	}
	for _, want := range []string{`| 0 | \<img src=x onerror=alert\(1\)\> | 2 | 1.000 | 0.500 | 0.667 |`, `| 1 | a\|b | | | | |`,
		`| 2 | \[x\]\(javascript\:alert\(1\)\) | | | | |`, `\*\*s\*\* \# h`, "| note | \\<b\\>x\\</b\\> |", "probs = torch.sigmoid(logits)",
		"p >= 0.5", "max_length=128", `"BASE_MODEL"`, "in place of BASE_MODEL"} {
		if !strings.Contains(card, want) {
			t.Errorf("the card lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("the card:\n%s", card)
	}
}

// The token: --token-file first, then HF_TOKEN, then the Hub's token
// file; a file that group or others may read is refused with the fix, an
// empty one too; none at all says where to put one.
func TestFindToken(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	write := func(name, s string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(s), mode)
		os.Chmod(p, mode)
		return p
	}
	env["HF_HOME"] = filepath.Join(dir, "home")
	if _, err := FindToken("", getenv); !errors.Is(err, ErrNoToken) {
		t.Errorf("no token anywhere: %v", err)
	}
	os.MkdirAll(env["HF_HOME"], 0o700)
	write("home/token", "hf_fromfile\n", 0o644)
	if _, err := FindToken("", getenv); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("the Hub's token file of mode 0644: %v", err)
	}
	os.Chmod(filepath.Join(dir, "home", "token"), 0o600)
	if tok, err := FindToken("", getenv); err != nil || tok.Value != "hf_fromfile" || tok.Source != filepath.Join(dir, "home", "token") {
		t.Errorf("the Hub's token file: %+v %v", tok, err)
	}
	env["HF_TOKEN"] = " hf_fromenv "
	if tok, err := FindToken("", getenv); err != nil || tok.Value != "hf_fromenv" || tok.Source != "$HF_TOKEN" {
		t.Errorf("HF_TOKEN: %+v %v", tok, err)
	}
	f := write("mine", "hf_flag", 0o600)
	if tok, err := FindToken(f, getenv); err != nil || tok.Value != "hf_flag" {
		t.Errorf("--token-file: %+v %v", tok, err)
	}
	for _, c := range []struct {
		name, body string
		mode       os.FileMode
		want       string
	}{
		{"group", "hf_x", 0o640, "readable or writable by group or others (mode 0640): run chmod 600"},
		{"empty", "\n", 0o600, "is empty"},
		{"two", "hf_a hf_b", 0o600, "more than one word"},
	} {
		_, err := FindToken(write(c.name, c.body, c.mode), getenv)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--token-file %s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestChecks(t *testing.T) {
	for _, ok := range []string{"alice/spam-filter", "org.x/m_1"} {
		if CheckRepo(ok) != nil {
			t.Errorf("CheckRepo(%q) refused", ok)
		}
	}
	for _, bad := range []string{"", "spam", "a/b/c", "../x", "a/..", "-a/b", "a/b.git", "a /b", "a/b\n"} {
		if CheckRepo(bad) == nil {
			t.Errorf("CheckRepo(%q) took it", bad)
		}
	}
	for _, bad := range []string{"--all", "refs/pr/1", "a..b", "x/", "a b", "x.lock"} {
		if CheckRevision(bad) == nil {
			t.Errorf("CheckRevision(%q) took it", bad)
		}
	}
	if CheckRevision("v2/eval") != nil || CheckBaseModel("distilbert-base-uncased") != nil || CheckBaseModel("/opt/m") == nil {
		t.Errorf("CheckRevision or CheckBaseModel")
	}
	// The push's environment has no token and no token file, and no
	// switch that turns the push off.
	env := childEnv([]string{"HF_TOKEN=x", "HUGGING_FACE_HUB_TOKEN=y", "HF_TOKEN_PATH=/t", "HF_HUB_OFFLINE=1", "PATH=/bin", "HF_ENDPOINT=http://h"})
	got := strings.Join(env, " ")
	if strings.Contains(got, "TOKEN") || strings.Contains(got, "OFFLINE") || !strings.Contains(got, "HF_ENDPOINT=http://h") || !strings.Contains(got, "HF_HUB_DISABLE_XET=1") {
		t.Errorf("childEnv: %v", env)
	}
}

// A merged model (merge=true) goes whole, its adapter/ with it, and its
// card loads it with transformers alone; the files are listed as the run
// saved them, with their paths in the repo.
func TestFindMerged(t *testing.T) {
	root, _ := rundir.Open(t.TempDir())
	id := "20261202T100000-000012"
	finishedRun(t, root, id, func(r *rundir.Record) {})
	dir := filepath.Join(root.RunDir(id), rundir.ArtifactsDir, "model-spam")
	os.MkdirAll(filepath.Join(dir, "adapter"), 0o755)
	for name, body := range map[string]string{
		"model_card.json":                   `{"format":"potato-model-card","labels":["spam","ham"],"merged":true,"base_model":"distilbert-base-uncased","max_length":64,"lora":{"r":8}}`,
		"config.json":                       "{}",
		"model.safetensors":                 "weights",
		"tokenizer.json":                    "{}",
		"adapter/adapter_config.json":       "{}",
		"adapter/adapter_model.safetensors": "adapter",
	} {
		os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), []byte(body), 0o644)
	}
	m, err := Find(root, id, "spam")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.InRepo)
	}
	if m.Kind != KindMerged || strings.Join(paths, " ") != "adapter/adapter_config.json adapter/adapter_model.safetensors config.json model.safetensors model_card.json tokenizer.json" {
		t.Errorf("kind %s, files %v", m.Kind, paths)
	}
	card := m.README(CardOptions{Repo: "alice/m"})
	for _, want := range []string{"base_model: distilbert-base-uncased\n", "library_name: transformers\n", "the adapter itself is in `adapter/`",
		"model = AutoModelForSequenceClassification.from_pretrained(repo).eval()", "licence could not be read"} {
		if !strings.Contains(card, want) {
			t.Errorf("the card lacks %q", want)
		}
	}
	if strings.Contains(card, "peft") || strings.Contains(card, "\nlicense:") {
		t.Errorf("a merged model's card names peft, or a licence it could not read:\n%s", card)
	}
}
