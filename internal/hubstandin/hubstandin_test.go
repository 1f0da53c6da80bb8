package hubstandin_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/internal/hubstandin"
	"potato-training/internal/testcli"
)

// python is the interpreter of the hf-current stack, which has the pinned
// huggingface_hub; without it the test skips, except under CI.
func python(t *testing.T) string {
	t.Helper()
	py, _ := testcli.Venv(t, "hf-current", "import huggingface_hub")
	return py
}

// push runs potato_hf/push.py with req on its standard input, against
// the stand-in.
func push(t *testing.T, py string, h *hubstandin.Hub, req map[string]any) (code int, stdout, stderr string) {
	t.Helper()
	script := filepath.Join(testcli.Root(), "lib", "trainer", "hf", "python", "potato_hf", "push.py")
	b, _ := json.Marshal(req)
	cmd := exec.Command(py, script)
	cmd.Env = append(os.Environ(), "HF_ENDPOINT="+h.URL, "HF_HOME="+t.TempDir(), "HF_TOKEN=")
	cmd.Stdin = bytes.NewReader(append(b, '\n'))
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// The pinned huggingface_hub, as push.py drives it, creates a private
// repo on the stand-in and commits a small file inline and a large one
// (and a .safetensors) by the LFS batch API, with the token in the
// Authorization header of every request but the upload's PUT; the
// stand-in refuses a wrong token with 401, and a commit naming an LFS
// object it never received.
func TestStandInSpeaksHuggingfaceHub(t *testing.T) {
	py := python(t)
	h := hubstandin.New(t, "hf_secret_token_1234", "alice")
	dir := t.TempDir()
	big := make([]byte, 11<<20)
	rand.Read(big)
	files := map[string][]byte{"config.json": []byte(`{"a": 1}`), "weights.safetensors": []byte("not really safetensors"), "sub/big.dat": big}
	var list []map[string]string
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		list = append(list, map[string]string{"path": p, "path_in_repo": name})
	}
	req := map[string]any{"token": "hf_secret_token_1234", "repo": "alice/model", "private": true, "revision": "",
		"files": list, "readme": "---\nlicense: apache-2.0\ntags:\n- x\n---\n# Model\n", "commit_message": "Upload"}
	code, out, errs := push(t, py, h, req)
	if code != 0 {
		t.Fatalf("push.py: exit %d\n%s", code, errs)
	}
	var res struct {
		CommitOID string `json:"commit_oid"`
		Private   bool   `json:"private"`
		Created   bool   `json:"created"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || !res.Private || !res.Created || res.CommitOID == "" {
		t.Fatalf("push.py printed %q (%v)", out, err)
	}
	repo := h.Repo("alice/model")
	if repo == nil || !repo.Private {
		t.Fatalf("the repo is %+v, want private", repo)
	}
	head := repo.Head("main")
	for name, b := range files {
		if f, ok := head[name]; !ok || !bytes.Equal(f.Data, b) {
			t.Errorf("%s: not in the commit, or other bytes", name)
		}
	}
	if !head["sub/big.dat"].LFS || !head["weights.safetensors"].LFS || head["config.json"].LFS {
		t.Errorf("LFS: big %v, safetensors %v, config %v; want true, true, false", head["sub/big.dat"].LFS, head["weights.safetensors"].LFS, head["config.json"].LFS)
	}
	if !strings.HasPrefix(string(head["README.md"].Data), "---\nlicense: apache-2.0") {
		t.Errorf("README.md: %q", head["README.md"].Data)
	}
	var routes []string
	for _, r := range h.Requests() {
		routes = append(routes, r.Method+" "+r.Path+" "+r.Auth)
		if r.Auth != "valid" && !strings.HasPrefix(r.Path, "/standin-lfs/") {
			t.Errorf("%s %s: token %s", r.Method, r.Path, r.Auth)
		}
	}
	t.Logf("routes:\n%s", strings.Join(routes, "\n"))

	// A second push to a branch: the branch is made, unchanged files are
	// left out of the commit.
	req["revision"] = "v2"
	if code, _, errs := push(t, py, h, req); code != 0 {
		t.Fatalf("second push: exit %d\n%s", code, errs)
	}
	if h.Repo("alice/model").Head("v2")["sub/big.dat"].Data == nil {
		t.Errorf("branch v2 lacks the files")
	}

	// A wrong token: 401, nothing made.
	req["token"], req["repo"] = "hf_wrong", "alice/other"
	code, _, errs = push(t, py, h, req)
	if code != 1 || !strings.Contains(errs, "401") || strings.Contains(errs, "hf_wrong") {
		t.Errorf("wrong token: exit %d, stderr %q; want 1 naming 401, without the token", code, errs)
	}
	t.Logf("wrong token: %s", errs)
	if h.Repo("alice/other") != nil {
		t.Errorf("a repo was made with a wrong token")
	}

	// A public repo that exists is refused to a private push.
	h.AddRepo("alice/public", false)
	req["token"], req["repo"], req["revision"] = "hf_secret_token_1234", "alice/public", ""
	code, _, errs = push(t, py, h, req)
	if code != 1 || !strings.Contains(errs, "exists and is public") {
		t.Errorf("private push to a public repo: exit %d, stderr %q", code, errs)
	}
	if len(h.Repo("alice/public").Branches["main"]) != 1 {
		t.Errorf("the public repo got a commit")
	}

	// A commit that names an LFS object the stand-in never received (the
	// client skipped the batch and the upload) is refused, as the Hub
	// refuses it; so is one whose README.md's front matter is not YAML.
	for _, c := range []struct{ what, body, want string }{
		{"an object never uploaded", `{"key":"lfsFile","value":{"path":"w.bin","algo":"sha256","oid":"` + strings.Repeat("ab", 32) + `","size":5}}`, "LFS pointer pointed to a file that does not exist"},
		{"a README.md that is not YAML", `{"key":"file","value":{"path":"README.md","encoding":"base64","content":"LS0tCmE6IFsKLS0tCg=="}}`, "Invalid metadata in README.md"},
	} {
		body := `{"key":"header","value":{"summary":"s","description":""}}` + "\n" + c.body + "\n"
		r, _ := http.NewRequest("POST", h.URL+"/api/models/alice/model/commit/main", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer hf_secret_token_1234")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), c.want) {
			t.Errorf("a commit with %s: %d %s, want 400 %q", c.what, resp.StatusCode, b, c.want)
		}
	}
	if n := len(h.Repo("alice/model").Branches["main"]); n != 2 {
		t.Errorf("main has %d commits, want 2 (the first and the push's)", n)
	}
}
