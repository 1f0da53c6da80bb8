// Package hubstandin is a stand-in for the Hugging Face Hub's HTTP API, for
// the tests of potato-dispatch push: no machine of the tests reaches the
// Hub, so they point huggingface_hub at this server (HF_ENDPOINT) on
// loopback. It serves the routes huggingface_hub 2.4 (requirements/
// hf-current.txt) calls for create_repo, model_info, create_branch and
// create_commit when its uploads take the Git LFS path (Xet off):
//
//	POST /api/repos/create                              create_repo
//	GET  /api/models/NS/NAME[/revision/REV]             model_info
//	POST /api/models/NS/NAME/branch/BRANCH              create_branch
//	POST /api/validate-yaml                             README.md's front matter
//	POST /api/models/NS/NAME/preupload/REV              regular or lfs, per file
//	POST /NS/NAME.git/info/lfs/objects/batch            where to PUT each LFS object
//	PUT  /standin-lfs/SECRET                            the object (no token: the URL is the secret)
//	POST /standin-lfs-verify/OID                        the upload's check
//	POST /api/models/NS/NAME/commit/REV                 the commit, as NDJSON
//
// and refuses what the Hub refuses: a request without the token or with
// another (401), a namespace not the token's user's (403), a repo or
// revision that does not exist (404 with the Hub's X-Error-Code), an LFS
// object whose bytes do not hash to its oid, and a commit that names an
// LFS object it never received and verified, or holds a README.md whose
// front matter is not YAML (400). Xet's token route answers 404 with a
// message saying so, so that a client that tries Xet fails clearly.
package hubstandin

import (
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"sync"
	"testing"

	"gopkg.in/yaml.v3"
)

// Hub is the stand-in. Its fields are read through its methods while it
// serves.
type Hub struct {
	// URL is where it listens: http://127.0.0.1:PORT.
	URL string
	// Token is the one token it accepts, of user User.
	Token, User string
	// OnRequest, when set before the first request, is called with each
	// request before it is served (a test looks at the processes then).
	OnRequest func(r *http.Request)

	mu       sync.Mutex
	repos    map[string]*Repo
	objects  map[string]*object // by oid (sha256 hex)
	pending  map[string]string  // upload secret -> oid
	requests []Request
	srv      *http.Server
}

// Repo is a model repo as the stand-in holds it.
type Repo struct {
	ID      string
	Private bool
	// Branches maps a branch to its commits, oldest first.
	Branches map[string][]Commit
}

// Commit is one commit: its message and the whole tree after it.
type Commit struct {
	OID, Summary string
	Files        map[string]File
}

// File is a file of a tree: its bytes, and whether it came as an LFS
// object.
type File struct {
	Data []byte
	LFS  bool
}

// Request is one request the stand-in received: Auth is "none", "valid"
// or "wrong", after the Authorization header.
type Request struct {
	Method, Path, Auth string
}

type object struct {
	size     int64
	data     []byte
	verified bool
}

// New starts a stand-in on 127.0.0.1 that accepts token, of user; it
// stops when the test ends.
func New(t testing.TB, token, user string) *Hub {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &Hub{URL: "http://" + ln.Addr().String(), Token: token, User: user,
		repos: map[string]*Repo{}, objects: map[string]*object{}, pending: map[string]string{}}
	h.srv = &http.Server{Handler: h}
	go h.srv.Serve(ln)
	t.Cleanup(func() { h.srv.Close() })
	return h
}

// Repo returns a copy of repo id's state, or nil.
func (h *Hub) Repo(id string) *Repo {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repos[id]
	if r == nil {
		return nil
	}
	c := &Repo{ID: r.ID, Private: r.Private, Branches: map[string][]Commit{}}
	for b, cs := range r.Branches {
		c.Branches[b] = append([]Commit(nil), cs...)
	}
	return c
}

// Head is the tree of the last commit of branch, or nil.
func (r *Repo) Head(branch string) map[string]File {
	cs := r.Branches[branch]
	if len(cs) == 0 {
		return nil
	}
	return cs[len(cs)-1].Files
}

// Requests are the requests received so far, in order.
func (h *Hub) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.requests...)
}

// AddRepo makes a repo as if its owner had made it on the Hub: a first
// commit holding .gitattributes on main.
func (h *Hub) AddRepo(id string, private bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.addRepo(id, private)
}

func (h *Hub) addRepo(id string, private bool) *Repo {
	r := &Repo{ID: id, Private: private, Branches: map[string][]Commit{
		"main": {{OID: newOID(), Summary: "initial commit", Files: map[string]File{".gitattributes": {Data: []byte(gitattributes)}}}},
	}}
	h.repos[id] = r
	return r
}

// gitattributes is the start of the file the Hub puts in a new repo, and
// lfsPatterns the patterns of it the stand-in applies.
const gitattributes = "*.bin filter=lfs diff=lfs merge=lfs -text\n*.pt filter=lfs diff=lfs merge=lfs -text\n" +
	"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.h5 filter=lfs diff=lfs merge=lfs -text\n" +
	"*.onnx filter=lfs diff=lfs merge=lfs -text\n*.npz filter=lfs diff=lfs merge=lfs -text\n"

var lfsPatterns = []string{"*.bin", "*.pt", "*.pth", "*.safetensors", "*.h5", "*.onnx", "*.npz", "*.npy", "*.pkl", "*.ckpt", "*.msgpack", "*.model"}

// regularMax is the largest file the Hub takes inline in a commit.
const regularMax = 10 << 20

var repoPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)

func newOID() string {
	var b [20]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// fail answers as the Hub does: the status, X-Error-Code when given,
// X-Error-Message and {"error": msg}.
func fail(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	writeJSON(w, status, map[string]any{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// auth is what the Authorization header holds: "none", "valid", "wrong".
func (h *Hub) auth(r *http.Request) string {
	a := r.Header.Get("Authorization")
	switch {
	case a == "":
		return "none"
	case a == "Bearer "+h.Token && h.Token != "":
		return "valid"
	}
	return "wrong"
}

// ServeHTTP routes a request.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.OnRequest != nil {
		h.OnRequest(r)
	}
	auth := h.auth(r)
	h.mu.Lock()
	h.requests = append(h.requests, Request{r.Method, r.URL.Path, auth})
	h.mu.Unlock()
	// Segments of the escaped path, each unescaped: a revision is sent
	// with its "/" escaped.
	var parts []string
	for _, p := range strings.Split(strings.Trim(r.URL.EscapedPath(), "/"), "/") {
		u, err := url.PathUnescape(p)
		if err != nil {
			fail(w, http.StatusBadRequest, "", "bad path")
			return
		}
		parts = append(parts, u)
	}
	// The upload of an LFS object carries no token: its URL is the
	// secret, as a presigned storage URL is.
	if r.Method == http.MethodPut && len(parts) == 2 && parts[0] == "standin-lfs" {
		h.lfsPut(w, r, parts[1])
		return
	}
	switch auth {
	case "none":
		fail(w, http.StatusUnauthorized, "", "Invalid username or password.")
		return
	case "wrong":
		fail(w, http.StatusUnauthorized, "", "Invalid credentials in Authorization header")
		return
	}
	n := len(parts)
	switch {
	case r.Method == http.MethodPost && n == 3 && parts[0] == "api" && parts[1] == "repos" && parts[2] == "create":
		h.create(w, r)
	case r.Method == http.MethodPost && n == 2 && parts[0] == "api" && parts[1] == "validate-yaml":
		h.validateYAML(w, r)
	case r.Method == http.MethodGet && n >= 4 && parts[0] == "api" && parts[1] == "models" && (n == 4 || n == 6 && parts[4] == "revision"):
		rev := ""
		if n == 6 {
			rev = parts[5]
		}
		h.info(w, parts[2]+"/"+parts[3], rev)
	case n >= 5 && parts[0] == "api" && parts[1] == "models" && strings.HasPrefix(parts[4], "xet-"):
		fail(w, http.StatusNotFound, "", "the stand-in for the Hub speaks Git LFS, not Xet: set HF_HUB_DISABLE_XET=1")
	case r.Method == http.MethodPost && n == 6 && parts[0] == "api" && parts[1] == "models" && parts[4] == "branch":
		h.branch(w, r, parts[2]+"/"+parts[3], parts[5])
	case r.Method == http.MethodPost && n == 6 && parts[0] == "api" && parts[1] == "models" && parts[4] == "preupload":
		h.preupload(w, r, parts[2]+"/"+parts[3], parts[5])
	case r.Method == http.MethodPost && n == 6 && parts[0] == "api" && parts[1] == "models" && parts[4] == "commit":
		h.commit(w, r, parts[2]+"/"+parts[3], parts[5])
	case r.Method == http.MethodPost && n == 6 && strings.HasSuffix(parts[1], ".git") && parts[2] == "info" && parts[3] == "lfs" && parts[4] == "objects" && parts[5] == "batch":
		h.batch(w, r, parts[0]+"/"+strings.TrimSuffix(parts[1], ".git"))
	case r.Method == http.MethodPost && n == 2 && parts[0] == "standin-lfs-verify":
		h.verify(w, r, parts[1])
	default:
		fail(w, http.StatusNotFound, "", "no route "+r.Method+" "+r.URL.Path+" in the stand-in for the Hub")
	}
}

// repo finds a repo the token's user may see, or answers 404 as the Hub
// does, for a private repo of another user too.
func (h *Hub) repo(w http.ResponseWriter, id string) *Repo {
	r := h.repos[id]
	if r == nil || r.Private && !strings.HasPrefix(id, h.User+"/") {
		fail(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return nil
	}
	return r
}

// writable is repo for a change: only the user's own.
func (h *Hub) writable(w http.ResponseWriter, id string) *Repo {
	r := h.repo(w, id)
	if r != nil && !strings.HasPrefix(id, h.User+"/") {
		fail(w, http.StatusForbidden, "", "You don't have the rights to write to "+id)
		return nil
	}
	return r
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(v); err != nil {
		fail(w, http.StatusBadRequest, "", "the body is not JSON: "+err.Error())
		return false
	}
	return true
}

func (h *Hub) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name         string  `json:"name"`
		Organization *string `json:"organization"`
		Visibility   string  `json:"visibility"`
		Type         string  `json:"type"`
	}
	if !decode(w, r, &req) {
		return
	}
	ns := h.User
	if req.Organization != nil {
		ns = *req.Organization
	}
	if !repoPart.MatchString(req.Name) || !repoPart.MatchString(ns) || strings.Contains(req.Name, "..") {
		fail(w, http.StatusBadRequest, "", "invalid repo name")
		return
	}
	if req.Type != "" && req.Type != "model" {
		fail(w, http.StatusBadRequest, "", "the stand-in holds model repos only")
		return
	}
	if ns != h.User {
		fail(w, http.StatusForbidden, "", "You don't have the rights to create a model under the namespace \""+ns+"\"")
		return
	}
	id := ns + "/" + req.Name
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.repos[id] != nil {
		fail(w, http.StatusConflict, "", "You already created this model repo")
		return
	}
	// The Hub makes a repo public unless asked otherwise.
	h.addRepo(id, req.Visibility == "private")
	writeJSON(w, http.StatusOK, map[string]string{"url": h.URL + "/" + id, "name": id, "id": id})
}

func (h *Hub) info(w http.ResponseWriter, id, rev string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	repo := h.repo(w, id)
	if repo == nil {
		return
	}
	if rev == "" {
		rev = "main"
	}
	cs := repo.Branches[rev]
	if len(cs) == 0 {
		fail(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	head := cs[len(cs)-1]
	var sib []map[string]string
	for p := range head.Files {
		sib = append(sib, map[string]string{"rfilename": p})
	}
	writeJSON(w, http.StatusOK, map[string]any{"_id": id, "id": id, "modelId": id, "author": strings.Split(id, "/")[0],
		"private": repo.Private, "sha": head.OID, "siblings": sib, "tags": []string{}})
}

func (h *Hub) branch(w http.ResponseWriter, r *http.Request, id, branch string) {
	var req struct {
		StartingPoint string `json:"startingPoint"`
	}
	if !decode(w, r, &req) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	repo := h.writable(w, id)
	if repo == nil {
		return
	}
	if branch == "" || strings.HasPrefix(branch, "refs/") || strings.Contains(branch, "..") {
		fail(w, http.StatusBadRequest, "", "Invalid reference for a branch: "+branch)
		return
	}
	if len(repo.Branches[branch]) > 0 {
		fail(w, http.StatusConflict, "", "Reference already exists")
		return
	}
	from := req.StartingPoint
	if from == "" {
		from = "main"
	}
	cs := repo.Branches[from]
	if len(cs) == 0 {
		fail(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+from)
		return
	}
	repo.Branches[branch] = []Commit{cs[len(cs)-1]}
	writeJSON(w, http.StatusOK, map[string]any{})
}

// frontMatter checks a README.md's front matter as the Hub's validator
// does what the tests need: YAML, a mapping, and its license, base_model,
// library_name, pipeline_tag and tags of the right types.
func frontMatter(readme string) error {
	rest, ok := strings.CutPrefix(readme, "---\n")
	if !ok {
		return nil // no front matter: the Hub warns, and takes it
	}
	meta, _, ok := strings.Cut(rest, "\n---\n")
	if !ok {
		return fmt.Errorf("the front matter has no closing ---")
	}
	var m map[string]any
	if err := yaml.Unmarshal([]byte(meta), &m); err != nil {
		return fmt.Errorf("the front matter is not YAML: %v", err)
	}
	for _, k := range []string{"license", "library_name", "pipeline_tag"} {
		if v, ok := m[k]; ok {
			if _, isStr := v.(string); !isStr {
				return fmt.Errorf("%q must be a string", k)
			}
		}
	}
	if v, ok := m["base_model"]; ok {
		s, isStr := v.(string)
		if !isStr || !strings.Contains(s, "/") && !repoPart.MatchString(s) || strings.HasPrefix(s, "/") || strings.Count(s, "/") > 1 {
			return fmt.Errorf("\"base_model\" must be a model id on the Hub, not %v", v)
		}
	}
	if v, ok := m["tags"]; ok {
		l, isList := v.([]any)
		if !isList {
			return fmt.Errorf("\"tags\" must be a list")
		}
		for _, t := range l {
			if _, isStr := t.(string); !isStr {
				return fmt.Errorf("a tag must be a string")
			}
		}
	}
	return nil
}

func (h *Hub) validateYAML(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Content  string `json:"content"`
		RepoType string `json:"repoType"`
	}
	if !decode(w, r, &req) {
		return
	}
	if err := frontMatter(req.Content); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"errors": []map[string]string{{"message": err.Error()}}, "warnings": []any{}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"errors": []any{}, "warnings": []any{}})
}

// lfs tells whether a file goes by LFS: its name matches the repo's
// .gitattributes, it is large, or its first bytes are binary.
func lfs(p string, size int64, sample []byte) bool {
	for _, pat := range lfsPatterns {
		if ok, _ := path.Match(pat, path.Base(p)); ok {
			return true
		}
	}
	return size > regularMax || bytes.IndexByte(sample, 0) >= 0
}

// gitOID is git's id of a blob.
func gitOID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func (h *Hub) preupload(w http.ResponseWriter, r *http.Request, id, rev string) {
	var req struct {
		Files []struct {
			Path   string `json:"path"`
			Sample string `json:"sample"`
			Size   int64  `json:"size"`
		} `json:"files"`
	}
	if !decode(w, r, &req) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	repo := h.writable(w, id)
	if repo == nil {
		return
	}
	cs := repo.Branches[rev]
	if len(cs) == 0 {
		fail(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	head := cs[len(cs)-1].Files
	var out []map[string]any
	for _, f := range req.Files {
		sample, err := base64.StdEncoding.DecodeString(f.Sample)
		if err != nil {
			fail(w, http.StatusBadRequest, "", "sample of "+f.Path+" is not base64")
			return
		}
		mode := "regular"
		if lfs(f.Path, f.Size, sample) {
			mode = "lfs"
		}
		e := map[string]any{"path": f.Path, "uploadMode": mode, "shouldIgnore": false}
		if old, ok := head[f.Path]; ok {
			if old.LFS {
				s := sha256.Sum256(old.Data)
				e["oid"] = hex.EncodeToString(s[:])
			} else {
				e["oid"] = gitOID(old.Data)
			}
		}
		out = append(out, e)
	}
	writeJSON(w, http.StatusOK, map[string]any{"files": out, "commitOid": cs[len(cs)-1].OID})
}

func (h *Hub) batch(w http.ResponseWriter, r *http.Request, id string) {
	var req struct {
		Operation string `json:"operation"`
		Objects   []struct {
			OID  string `json:"oid"`
			Size int64  `json:"size"`
		} `json:"objects"`
	}
	if !decode(w, r, &req) {
		return
	}
	if req.Operation != "upload" {
		fail(w, http.StatusBadRequest, "", "the stand-in takes uploads only")
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.writable(w, id) == nil {
		return
	}
	var out []map[string]any
	for _, o := range req.Objects {
		if b, err := hex.DecodeString(o.OID); err != nil || len(b) != sha256.Size || o.Size < 0 {
			out = append(out, map[string]any{"oid": o.OID, "size": o.Size, "error": map[string]any{"code": 422, "message": "bad oid or size"}})
			continue
		}
		if obj := h.objects[o.OID]; obj != nil && obj.verified {
			out = append(out, map[string]any{"oid": o.OID, "size": o.Size}) // present: nothing to do
			continue
		}
		h.objects[o.OID] = &object{size: o.Size}
		secret := newOID()
		h.pending[secret] = o.OID
		out = append(out, map[string]any{"oid": o.OID, "size": o.Size, "authenticated": true, "actions": map[string]any{
			"upload": map[string]any{"href": h.URL + "/standin-lfs/" + secret},
			"verify": map[string]any{"href": h.URL + "/standin-lfs-verify/" + o.OID},
		}})
	}
	w.Header().Set("Content-Type", "application/vnd.git-lfs+json")
	writeJSON(w, http.StatusOK, map[string]any{"transfer": "basic", "objects": out})
}

func (h *Hub) lfsPut(w http.ResponseWriter, r *http.Request, secret string) {
	h.mu.Lock()
	oid, ok := h.pending[secret]
	obj := h.objects[oid]
	h.mu.Unlock()
	if !ok || obj == nil {
		fail(w, http.StatusForbidden, "", "no upload at this URL")
		return
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, obj.size+1))
	if err != nil {
		fail(w, http.StatusBadRequest, "", err.Error())
		return
	}
	sum := sha256.Sum256(b)
	if int64(len(b)) != obj.size || hex.EncodeToString(sum[:]) != oid {
		fail(w, http.StatusBadRequest, "", fmt.Sprintf("the object's %d bytes do not hash to oid %s of size %d", len(b), oid, obj.size))
		return
	}
	h.mu.Lock()
	obj.data = b
	delete(h.pending, secret)
	h.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (h *Hub) verify(w http.ResponseWriter, r *http.Request, oid string) {
	var req struct {
		OID  string `json:"oid"`
		Size int64  `json:"size"`
	}
	if !decode(w, r, &req) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	obj := h.objects[oid]
	if obj == nil || obj.data == nil || req.OID != oid || req.Size != obj.size {
		fail(w, http.StatusNotFound, "", "object "+oid+" was not uploaded")
		return
	}
	obj.verified = true
	writeJSON(w, http.StatusOK, map[string]any{})
}

// validPath is a path a commit may add: relative, clean, not in .git.
func validPath(p string) bool {
	return p != "" && !strings.HasPrefix(p, "/") && path.Clean(p) == p && p != "." && !strings.HasPrefix(p, "../") && p != ".." &&
		!strings.HasPrefix(p, ".git/") && p != ".git"
}

func (h *Hub) commit(w http.ResponseWriter, r *http.Request, id, rev string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 256<<20))
	if err != nil {
		fail(w, http.StatusBadRequest, "", err.Error())
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	repo := h.writable(w, id)
	if repo == nil {
		return
	}
	cs := repo.Branches[rev]
	if len(cs) == 0 {
		fail(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	tree := map[string]File{}
	for p, f := range cs[len(cs)-1].Files {
		tree[p] = f
	}
	summary, header := "", false
	for _, line := range bytes.Split(bytes.TrimSpace(body), []byte("\n")) {
		var op struct {
			Key   string `json:"key"`
			Value struct {
				Summary  string `json:"summary"`
				Path     string `json:"path"`
				Content  string `json:"content"`
				Encoding string `json:"encoding"`
				Algo     string `json:"algo"`
				OID      string `json:"oid"`
				Size     *int64 `json:"size"`
			} `json:"value"`
		}
		if err := json.Unmarshal(line, &op); err != nil {
			fail(w, http.StatusBadRequest, "", "a line of the commit is not JSON: "+err.Error())
			return
		}
		v := op.Value
		if op.Key != "header" && !validPath(v.Path) {
			fail(w, http.StatusBadRequest, "", fmt.Sprintf("invalid path %q", v.Path))
			return
		}
		switch op.Key {
		case "header":
			summary, header = v.Summary, true
		case "file":
			if v.Encoding != "base64" {
				fail(w, http.StatusBadRequest, "", "unknown encoding "+v.Encoding)
				return
			}
			b, err := base64.StdEncoding.DecodeString(v.Content)
			if err != nil {
				fail(w, http.StatusBadRequest, "", "the content of "+v.Path+" is not base64")
				return
			}
			tree[v.Path] = File{Data: b}
		case "lfsFile":
			obj := h.objects[v.OID]
			if v.Algo != "sha256" || obj == nil || !obj.verified || v.Size != nil && *v.Size != obj.size {
				fail(w, http.StatusBadRequest, "", "Your push was rejected because an LFS pointer pointed to a file that does not exist. Offending file: - "+v.Path)
				return
			}
			tree[v.Path] = File{Data: obj.data, LFS: true}
		case "deletedFile":
			delete(tree, v.Path)
		case "deletedFolder":
			for p := range tree {
				if strings.HasPrefix(p, v.Path+"/") {
					delete(tree, p)
				}
			}
		default:
			fail(w, http.StatusBadRequest, "", "unknown key "+op.Key)
			return
		}
	}
	if !header || summary == "" {
		fail(w, http.StatusBadRequest, "", "the commit has no header or no summary")
		return
	}
	if f, ok := tree["README.md"]; ok {
		if err := frontMatter(string(f.Data)); err != nil {
			fail(w, http.StatusBadRequest, "", "Invalid metadata in README.md: "+err.Error())
			return
		}
	}
	c := Commit{OID: newOID(), Summary: summary, Files: tree}
	repo.Branches[rev] = append(cs, c)
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "commitOid": c.OID,
		"commitUrl": h.URL + "/" + id + "/commit/" + c.OID, "hookOutput": ""})
}
