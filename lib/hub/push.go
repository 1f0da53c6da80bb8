package hub

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"potato-training/lib/rundir"
	"potato-training/lib/trainer/hf"
)

// PushesFile is the run directory's record of its pushes: one JSON
// object (a Result) a line, appended whole (potato-rundir(5)).
const PushesFile = "hub.jsonl"

// script is push.py's path in the trainer's tree (hf.Files).
const script = "potato_hf/push.py"

// Exit codes of push.py.
const (
	exitMissing = 3
)

// Request is one push: where to, and how.
type Request struct {
	Repo string
	// Private makes a new repo private, and refuses an existing repo that
	// is public.
	Private bool
	// Revision is the branch to commit to, made from main when missing;
	// "" is main.
	Revision string
	// Python is the interpreter that runs push.py; it needs
	// huggingface_hub.
	Python string
	Token  Token
	// Env is push.py's environment (os.Environ() when nil), less any
	// token: the token goes on push.py's standard input alone.
	Env []string
}

// Result is a push done, as potato-dispatch push --json prints it and
// hub.jsonl keeps it.
type Result struct {
	RunID     string    `json:"run_id"`
	Schema    string    `json:"schema"`
	Repo      string    `json:"repo"`
	Revision  string    `json:"revision"`
	Private   bool      `json:"private"`
	Created   bool      `json:"created"`
	RepoURL   string    `json:"repo_url"`
	CommitURL string    `json:"commit_url"`
	CommitOID string    `json:"commit_oid"`
	Files     int       `json:"files"`
	Bytes     int64     `json:"bytes"`
	PushedAt  time.Time `json:"pushed_at"`
}

// MissingDependency is push.py's refusal when its interpreter has no
// huggingface_hub.
type MissingDependency struct{ Msg string }

func (e *MissingDependency) Error() string { return e.Msg }

// Push sends the model's files and the card as README.md to the repo in
// one commit, making the repo (and the branch) when missing, with
// huggingface_hub run by req.Python. The token goes to push.py on its
// standard input, never on a command line or in its environment, and
// is struck from whatever push.py says. The run's log and hub.jsonl
// record the push, or its failure.
func Push(ctx context.Context, root *rundir.Root, m *Model, card string, req Request) (*Result, error) {
	res, err := push(ctx, m, card, req)
	dir := root.RunDir(m.Record.RunID)
	what := fmt.Sprintf("push of %s to the Hugging Face Hub, repo %s", ModelDirName(m.Schema), req.Repo)
	if err != nil {
		appendLog(dir, fmt.Sprintf("%s, failed: %v", what, err))
		return nil, err
	}
	vis := "public"
	if res.Private {
		vis = "private"
	}
	appendLog(dir, fmt.Sprintf("%s (%s), revision %s: %d files, %s, commit %s: %s", what, vis, res.Revision, res.Files, mb(res.Bytes), res.CommitOID, res.CommitURL))
	line, _ := json.Marshal(res)
	if err := appendLine(filepath.Join(dir, PushesFile), append(line, '\n')); err != nil {
		return res, fmt.Errorf("the push is done (%s), but %s could not record it: %w", res.CommitURL, PushesFile, err)
	}
	return res, nil
}

func push(ctx context.Context, m *Model, card string, req Request) (*Result, error) {
	if req.Token.Value == "" {
		return nil, &UsageError{ErrNoToken}
	}
	tmp, err := os.MkdirTemp("", "potato-push-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	path := filepath.Join(tmp, "push.py")
	if err := os.WriteFile(path, hf.Files()[script], 0o600); err != nil {
		return nil, err
	}
	type file struct {
		Path   string `json:"path"`
		InRepo string `json:"path_in_repo"`
	}
	files := make([]file, len(m.Files))
	for i, f := range m.Files {
		abs, err := filepath.Abs(f.Path)
		if err != nil {
			return nil, err
		}
		files[i] = file{abs, f.InRepo}
	}
	in, err := json.Marshal(map[string]any{
		"token": req.Token.Value, "repo": req.Repo, "private": req.Private, "revision": req.Revision,
		"files": files, "readme": card,
		"commit_message": fmt.Sprintf("Model of schema %s, run %s of potato-training", m.Schema, m.Record.RunID),
	})
	if err != nil {
		return nil, err
	}
	var stdout, stderr limitedBuffer
	stdout.max, stderr.max = 1<<20, 64<<10
	cmd := exec.CommandContext(ctx, req.Python, path)
	cmd.Stdin = bytes.NewReader(append(in, '\n'))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = childEnv(req.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err = cmd.Run()
	said := scrub(stderr.String(), req.Token.Value)
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("the push did not finish in time (%s): %w", time.Since(start).Round(time.Second), ctx.Err())
	case errors.As(err, &ee) && ee.ExitCode() == exitMissing:
		return nil, &MissingDependency{Msg: fmt.Sprintf("%s (%s)", message(said), req.Python)}
	case err != nil && message(said) != "":
		return nil, errors.New(message(said))
	case err != nil:
		return nil, fmt.Errorf("running %s: %v", req.Python, err)
	}
	var out struct {
		RepoURL   string `json:"repo_url"`
		CommitURL string `json:"commit_url"`
		CommitOID string `json:"commit_oid"`
		Revision  string `json:"revision"`
		Private   bool   `json:"private"`
		Created   bool   `json:"created"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out); err != nil || out.CommitOID == "" {
		return nil, fmt.Errorf("push.py answered no commit: %q", scrub(stdout.String(), req.Token.Value))
	}
	return &Result{RunID: m.Record.RunID, Schema: m.Schema, Repo: req.Repo, Revision: out.Revision, Private: out.Private,
		Created: out.Created, RepoURL: out.RepoURL, CommitURL: out.CommitURL, CommitOID: out.CommitOID,
		Files: len(m.Files) + 1, Bytes: m.Bytes() + int64(len(card)), PushedAt: time.Now().UTC().Truncate(time.Second)}, nil
}

// childEnv is push.py's environment: env less the token variables (the
// token goes on its standard input, and it reads no token file), with
// Xet uploads, progress bars and telemetry off. HF_HUB_OFFLINE and
// TRANSFORMERS_OFFLINE, which keep runs from downloading models, are
// left out: a push is asked for by name, and the library refuses every
// request while they are set.
func childEnv(env []string) []string {
	if env == nil {
		env = os.Environ()
	}
	drop := []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
		"HF_HUB_DISABLE_XET", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_TELEMETRY"}
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(drop, k)
	})
	return append(out, "HF_HUB_DISABLE_XET=1", "HF_HUB_DISABLE_PROGRESS_BARS=1", "HF_HUB_DISABLE_TELEMETRY=1")
}

// message is what push.py said of its failure: its "push: " lines, or
// its last lines (a traceback).
func message(stderr string) string {
	var said, all []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if m, ok := strings.CutPrefix(l, "push: "); ok {
			said = append(said, m)
		}
		if strings.TrimSpace(l) != "" {
			all = append(all, l)
		}
	}
	if len(said) > 0 {
		return strings.Join(said, "; ")
	}
	if len(all) > 3 {
		all = all[len(all)-3:]
	}
	return strings.Join(all, "; ")
}

// scrub strikes the token from text.
func scrub(text, token string) string {
	if token == "" {
		return text
	}
	return strings.ReplaceAll(text, token, "<token>")
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }

// appendLog appends a line to the run's log, as the dispatch writes it.
func appendLog(dir, msg string) {
	_ = appendLine(filepath.Join(dir, rundir.LogFile), []byte(rundir.LogLine(msg)))
}

// appendLine appends one whole line to a file, in one write.
func appendLine(path string, line []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Pushes are the run's pushes, oldest first, as hub.jsonl holds them; a
// line that is not one is skipped.
func Pushes(root *rundir.Root, id string) ([]Result, error) {
	f, err := os.Open(filepath.Join(root.RunDir(id), PushesFile))
	if errors.Is(err, os.ErrNotExist) {
		return []Result{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := []Result{}
	sc := bufio.NewScanner(io.LimitReader(f, 4<<20))
	for sc.Scan() {
		var r Result
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.CommitOID != "" {
			out = append(out, r)
		}
	}
	return out, sc.Err()
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
