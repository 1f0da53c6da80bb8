package agent_test

// An agent started by hand on a login node (SPEC M9): potato-agent
// --server URL --slurm-config slurm.json polls a server over loopback
// HTTP and submits each job with sbatch. The server here is the protocol's
// own handler (lib/agentproto) serving one run the test makes; the
// scheduler is potato-slurm-shim, the stand-in for sbatch, squeue,
// scancel and scontrol, first on PATH.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/agentproto"
	"potato-training/lib/bundle"
	"potato-training/lib/dispatch"
	"potato-training/lib/events"
	"potato-training/lib/trainer"
)

func TestMain(m *testing.M) { os.Exit(testcli.Main(m)) }

// oneRun serves one run to whichever agent claims it.
type oneRun struct {
	dir    string
	claim  *agentproto.Claim
	mu     sync.Mutex
	given  bool
	events []events.Event
	result *agentproto.Result
	done   chan struct{}
}

func (r *oneRun) Claim(ctx context.Context, req agentproto.ClaimRequest) (*agentproto.Claim, error) {
	r.mu.Lock()
	if r.given {
		r.mu.Unlock()
		<-ctx.Done()
		return nil, nil
	}
	r.given = true
	r.mu.Unlock()
	return r.claim, nil
}

func (r *oneRun) BundlePath(id string) (string, error) {
	return filepath.Join(r.dir, "bundle.tar.gz"), nil
}

func (r *oneRun) Events(id string, evs []events.Event, bad []string) (agentproto.Reply, error) {
	r.mu.Lock()
	r.events = append(r.events, evs...)
	r.mu.Unlock()
	return agentproto.Reply{}, nil
}

func (r *oneRun) Predictions(id string, body io.Reader) error {
	return agentproto.StoreFile(filepath.Join(r.dir, "predictions.jsonl"), body)
}

func (r *oneRun) Result(id string, res agentproto.Result) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.result == nil {
		r.result = &res
		close(r.done)
	}
	return nil
}

func (r *oneRun) logHas(text string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if strings.Contains(e.String("msg"), text) || strings.Contains(e.String("step"), text) {
			return true
		}
	}
	return false
}

// manual is an agent started by hand against a server on loopback.
type manual struct {
	run    *oneRun
	srv    *http.Server
	agent  *exec.Cmd
	stderr *strings.Builder
	shim   string // the shim's binary
	env    []string
	jobEnv string
	work   string // the agent's working directory
}

func startManual(t *testing.T, prelude []string, extraEnv ...string) *manual {
	t.Helper()
	return startManualIn(t, false, prelude, extraEnv...)
}

// startManualIn is startManual; relative starts the agent in its work
// directory with --workdir wd and --slurm-config slurm.json.
func startManualIn(t *testing.T, relative bool, prelude []string, extraEnv ...string) *manual {
	t.Helper()
	bin := testcli.Binaries(t)
	dir := t.TempDir()
	cfgPath := testproject.Write(t, dir, 120, 100, "")
	cfg, err := dispatch.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	m, err := bundle.Build(cfg, filepath.Join(dir, "bundle"), []string{"sentiment"})
	if err != nil {
		t.Fatal(err)
	}
	sum, n, err := bundle.PackFile(filepath.Join(dir, "bundle"), filepath.Join(dir, "bundle.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	const runID = "20261202-120000-abcd"
	run := &oneRun{dir: dir, done: make(chan struct{}), claim: &agentproto.Claim{
		RunID: runID, GraceSeconds: 2, HeartbeatTimeoutS: 60, MaxPredictionsMB: 16,
		Bundle: agentproto.BundleInfo{Bytes: n, SHA256: sum},
		Spec:   trainer.Spec{V: 1, RunID: runID, Trainer: "tfidf-logreg", Schemas: m.Schemas, BundleDir: "x", Workdir: "x", Params: map[string]string{}},
	}}
	token := strings.Repeat("ab", 32)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := agentproto.Serve(l, agentproto.NewHandler(run, agentproto.HandlerOptions{TokenSHA256: sha256.Sum256([]byte(token))}))
	t.Cleanup(func() { srv.Close() })

	work := t.TempDir()
	sh := newShim(t, work, prelude)
	mg := &manual{run: run, srv: srv, shim: sh.shim, env: sh.env, jobEnv: sh.jobEnv, work: work, stderr: &strings.Builder{}}
	wd, sjArg := work, sh.config
	if relative {
		wd, sjArg = "wd", "slurm.json"
	}
	mg.agent = exec.Command(filepath.Join(bin, "potato-agent"), "--server", "http://"+l.Addr().String(),
		"--backend", "cluster", "--workdir", wd, "--slurm-config", sjArg, "--once")
	mg.agent.Dir = work
	mg.agent.Env = append(append(sh.env, "POTATO_TRAINING_TOKEN="+token), extraEnv...)
	mg.agent.Stderr = mg.stderr
	if err := mg.agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mg.agent.Process.Kill(); mg.agent.Wait() })
	return mg
}

func (mg *manual) admin(t *testing.T, args ...string) string {
	t.Helper()
	return (&shimCluster{shim: mg.shim, env: mg.env}).admin(t, args...)
}

// shimCluster is the scheduler of a test: potato-slurm-shim's links first
// on the PATH of env, its one node node07, and a slurm.json of partition
// debug whose prelude first keeps the job's environment in jobEnv (to
// show the token is not in it).
type shimCluster struct {
	shim   string // the shim's binary
	env    []string
	config string // slurm.json
	jobEnv string
}

func newShim(t *testing.T, work string, prelude []string) *shimCluster {
	t.Helper()
	bin := testcli.Binaries(t)
	shimBin, state := t.TempDir(), t.TempDir()
	for _, c := range []string{"sbatch", "squeue", "scancel", "scontrol"} {
		if err := os.Symlink(filepath.Join(bin, "potato-slurm-shim"), filepath.Join(shimBin, c)); err != nil {
			t.Fatal(err)
		}
	}
	sh := &shimCluster{shim: filepath.Join(bin, "potato-slurm-shim"), jobEnv: filepath.Join(work, "job.env"),
		config: filepath.Join(work, "slurm.json"),
		env:    append(os.Environ(), "PATH="+shimBin+":"+os.Getenv("PATH"), "POTATO_SLURM_SHIM_DIR="+state)}
	sh.admin(t, "init", "--node", "node07", "--kill-wait", "1")
	slurmJSON, _ := json.Marshal(map[string]any{"partition": "debug", "time": "5:00", "poll_interval_s": 1,
		"prelude": append([]string{"env >" + sh.jobEnv}, prelude...)})
	if err := os.WriteFile(sh.config, slurmJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	return sh
}

func (sh *shimCluster) admin(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(sh.shim, args...)
	cmd.Env = sh.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("potato-slurm-shim %v: %v %s", args, err, out)
	}
	return string(out)
}

func TestManualAgentSubmitsToSLURM(t *testing.T) {
	mg := startManual(t, []string{"sleep 2"})
	run := mg.run
	select {
	case <-run.done:
	case <-time.After(90 * time.Second):
		t.Fatalf("no result\n%s", mg.stderr.String())
	}
	mg.agent.Wait()
	if run.result.ExitCode != 0 || run.result.Error != "" || run.result.Code != "" {
		t.Errorf("result %+v\n%s", run.result, mg.stderr.String())
	}
	for _, want := range []string{"Submitted SLURM job ", "(--partition=debug --time=5:00)", ": RUNNING on node07"} {
		if !run.logHas(want) {
			t.Errorf("no event says %q", want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(run.dir, "predictions.jsonl")); err != nil || len(b) == 0 {
		t.Errorf("no predictions uploaded: %v", err)
	}
	b, err := os.ReadFile(mg.jobEnv)
	if err != nil {
		t.Fatalf("the prelude did not run: %v", err)
	}
	if strings.Contains(string(b), "POTATO_TRAINING_TOKEN") || strings.Contains(string(b), strings.Repeat("ab", 32)) {
		t.Error("the job's environment holds the agent's token")
	}
	if !strings.Contains(string(b), "SLURM_JOB_ID=") {
		t.Errorf("the prelude did not run inside the job:\n%s", b)
	}
}

// The fault: the server goes away while the job runs. Expected: after
// the (shortened) unreachable limit the agent cancels its job itself, so
// the GPU is released, and says why.
func TestManualAgentCancelsItsJobWhenTheServerIsGone(t *testing.T) {
	testcli.Short(t, "it waits for the unreachable limit and a SLURM job's cancel (about 30 s)")
	mg := startManual(t, []string{"sleep 300"}, "POTATO_TRAINING_UNREACHABLE_S=2")
	testproject.WaitFor(t, "the job to run", func() bool { return mg.run.logHas(": RUNNING on node07") })
	mg.srv.Close()
	done := make(chan error, 1)
	go func() { done <- mg.agent.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("the agent did not stop\n%s", mg.stderr.String())
	}
	if !strings.Contains(mg.stderr.String(), "the server could not be reached for 2 seconds") {
		t.Errorf("the agent does not say why it stopped:\n%s", mg.stderr.String())
	}
	out := mg.admin(t, "list")
	if strings.Contains(out, "RUNNING") || strings.Contains(out, "PENDING") {
		t.Errorf("the job is still in the queue:\n%s", out)
	}
}

// The agent started by hand on the login node from its own directory,
// with --workdir wd and --slurm-config slurm.json. Expected: job.sh, run
// by the scheduler in the job's directory, names the job's directory and
// its spec by absolute paths, and the job completes.
func TestManualAgentRelativePaths(t *testing.T) {
	mg := startManualIn(t, true, nil)
	run := mg.run
	select {
	case <-run.done:
	case <-time.After(90 * time.Second):
		t.Fatalf("no result\n%s", mg.stderr.String())
	}
	mg.agent.Wait()
	if run.result.ExitCode != 0 || run.result.Error != "" || mg.agent.ProcessState.ExitCode() != 0 {
		t.Fatalf("result %+v, exit %d\n%s", run.result, mg.agent.ProcessState.ExitCode(), mg.stderr.String())
	}
	job := filepath.Join(mg.work, "wd", "jobs", run.claim.RunID)
	b, err := os.ReadFile(filepath.Join(job, "job.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cd " + job + " ", "--spec " + filepath.Join(job, "spec.json")} {
		if !strings.Contains(string(b), want) {
			t.Errorf("job.sh does not say %q:\n%s", want, b)
		}
	}
}
