// A claimed job: runJob, from the bundle's download to the result; the
// watch that gives the job up when the server is silent (G9); the
// training process, its environment and its stop.

package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/bundle"
	"potato-training/lib/events"
	"potato-training/lib/trainer"
)

// job is one claimed run on this machine.
type job struct {
	o      Options
	a      *state
	claim  *agentproto.Claim
	dir    string
	mu     sync.Mutex
	queue  []events.Event
	raw    [][]byte
	cancel bool
	grace  time.Duration
	proc   *trainer.Process
	sj     *slurmJob // the submitted job, in SLURM mode
	// predictions is the result event's predictions_file.
	predictions string
	postMu      sync.Mutex
	// why the job was stopped, once it was, and the result's code for it.
	why, whyCode string
	// selfStop is why the agent stopped the job on its own (G9).
	selfStop string
	// abort ends ctx, the job's requests, once the agent has given up on
	// the server.
	abort     context.CancelFunc
	ctx       context.Context
	stopPosts func()
	// queued is told of each event emit queues, so the poster sends it
	// without waiting for its tick.
	queued chan struct{}
	// fetched: the job's bundle is in the cache.
	fetched bool
	// errMsg is the message of the training process's last error event.
	errMsg string
}

func runJob(ctx context.Context, s *state, claim *agentproto.Claim) error {
	o, host := s.o, s.host
	dir := filepath.Join(o.Workdir, "jobs", claim.RunID)
	// jctx ends the job's requests once the agent gives up on the server
	// (G9); the result is then kept in the spool.
	jctx, abort := context.WithCancel(ctx)
	defer abort()
	j := &job{o: o, a: s, claim: claim, dir: dir, grace: time.Duration(claim.GraceSeconds) * time.Second, abort: abort,
		queued: make(chan struct{}, 1)}
	if o.Polling && claim.RunToken != "" {
		// The run's own token: the run goes on if the backend's token is
		// replaced (registered again) meanwhile.
		if c, err := o.Client.WithToken(claim.RunToken); err == nil {
			j.o.Client = c
		}
	}
	s.heard()
	defer j.watch(jctx)()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return s.finish(ctx, j, -1, "", "", fail(agentproto.CodeFailed, err))
	}
	if j.grace <= 0 {
		j.grace = DefaultGrace
	}
	// A cancel arrives in the reply to a post: post at least twice per
	// grace period, so a short grace_seconds still reaches the trainer.
	if hb := j.grace / 2; hb < j.o.Heartbeat {
		j.o.Heartbeat = max(hb, 500*time.Millisecond)
	}
	j.emit(events.Status("downloading", "downloading the bundle"))
	bdir := filepath.Join(dir, "bundle")
	j.startPosting(jctx)
	archive, err := j.bundle(jctx)
	if err == nil {
		os.RemoveAll(bdir)
		err = bundle.UnpackFile(archive, bdir, o.MaxBundleBytes, claim.Bundle.SHA256)
	}
	if err != nil {
		if why := j.stoppedBy(); why != "" {
			return s.finish(ctx, j, -1, "", "", failf(agentproto.CodeUnreachable, "%s: it gave up the job while downloading the bundle", why))
		}
		return s.finish(ctx, j, events.ExitBadSpec, "", "", failf(agentproto.CodeBundleFailed, "the bundle: %w", err))
	}
	if !o.Polling {
		os.Remove(archive)
	}
	spec := claim.Spec
	spec.BundleDir = bdir
	spec.Workdir = filepath.Join(dir, "artifacts")
	if err := os.MkdirAll(spec.Workdir, 0o700); err != nil {
		return s.finish(ctx, j, -1, "", "", fail(agentproto.CodeFailed, err))
	}
	env := deviceEnv(&spec)
	specPath := filepath.Join(dir, "spec.json")
	if err := writeSpec(spec, specPath); err != nil {
		return s.finish(ctx, j, -1, "", "", fail(agentproto.CodeFailed, err))
	}
	var code int
	var trainErr error
	if o.SLURM != nil {
		code, trainErr = j.trainSLURM(ctx, spec, specPath)
	} else {
		code, trainErr = j.train(ctx, spec, specPath, env)
	}
	// The trainer's last events go first; the posts go on during the
	// upload, so a large predictions file does not look like a silent agent.
	j.post(jctx)
	j.mu.Lock()
	pred := trainer.PredictionsPath(spec.Workdir, j.predictions)
	j.mu.Unlock()
	if _, err := os.Stat(pred); err != nil {
		pred = ""
	}
	if !o.Keep {
		os.RemoveAll(bdir)
	}
	return s.finish(ctx, j, code, artifactURI(o.Polling, host, spec.Workdir), pred, trainErr)
}

// bundle returns the job's bundle.tar.gz: for a polling agent from the
// cache by digest, else downloaded into the job's directory.
func (j *job) bundle(ctx context.Context) (string, error) {
	if j.o.Polling {
		return j.fetchBundle(ctx)
	}
	archive := filepath.Join(j.dir, "bundle.tar.gz")
	err := j.o.Client.DownloadBundle(ctx, j.claim.RunID, archive, j.claim.Bundle, func(done, total int64) { j.a.heard() })
	return archive, err
}

// artifactURI names the job's artifacts/ (SPEC G8): HOST:DIR for a
// polling agent, ssh://HOST/DIR for one started over ssh, whose dispatch
// copies the model back from there.
func artifactURI(polling bool, host, dir string) string {
	if polling {
		return host + ":" + dir
	}
	return "ssh://" + host + dir
}

// stoppedBy is why the agent gave up the job on its own, or "".
func (j *job) stoppedBy() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.selfStop
}

// watch is G9: once the server has not answered for Unreachable, the
// agent stops the training process and ends the job's requests. It
// returns the function that ends the watch.
func (j *job) watch(ctx context.Context) func() {
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				if j.a.silence() > j.o.Unreachable {
					why := fmt.Sprintf(MsgUnreachable, int(j.o.Unreachable/time.Second))
					j.mu.Lock()
					if j.selfStop == "" {
						j.selfStop = why
					}
					j.mu.Unlock()
					j.stop(agentproto.CodeUnreachable, why, j.grace)
					j.abort()
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// stop sends SIGTERM to the training process's group, SIGKILL after grace,
// or cancels the SLURM job; why says the reason in words, code as the
// result's code. The stop comes before the log line, which is written
// without the job's lock held: the log is the agent's standard error,
// which the very event that stops the job (a dropped ssh session) may
// have closed or stalled.
func (j *job) stop(code, why string, grace time.Duration) {
	j.mu.Lock()
	if j.cancel {
		j.mu.Unlock()
		return
	}
	j.cancel = true
	j.why, j.whyCode = why, code
	proc, sj := j.proc, j.sj
	j.mu.Unlock()
	if proc != nil {
		proc.Terminate(grace)
	}
	if sj != nil {
		go sj.cancel(grace)
	}
	if proc == nil && sj == nil {
		j.o.logf("%s: stopping the job", why)
	} else {
		j.o.logf("%s: stopping the training process (SIGKILL after %s)", why, grace)
	}
}

// train runs the training process and relays its events; it returns the
// exit code and, when it did not finish normally, why (a *failure).
func (j *job) train(ctx context.Context, spec trainer.Spec, specPath string, env []string) (int, error) {
	// Built-ins run as the worker, Python trainers with --python (their
	// script written once under the workdir), exec: programs as they are.
	argv, err := trainer.Argv(spec.Trainer, specPath, trainer.Programs{Worker: j.o.Worker, Python: j.o.Python,
		ScriptDir: filepath.Join(j.o.Workdir, "trainers")})
	if err != nil {
		return -1, failf(agentproto.CodeStartFailed, "cannot start the training process: %v", err)
	}
	// An exec: program named by a relative path is found from where the
	// agent was started, not from the job's directory it runs in.
	path, err := ProgramPath(argv[0])
	if err != nil {
		return -1, failf(agentproto.CodeStartFailed, "cannot start the training process: %v", err)
	}
	args := argv[1:]
	stderr, err := os.Create(filepath.Join(j.dir, "stderr.log"))
	if err != nil {
		return -1, fail(agentproto.CodeFailed, err)
	}
	defer stderr.Close()
	p, err := trainer.Start(trainer.Command{Path: path, Args: args, Dir: j.dir, Env: env, Stderr: stderr})
	if err != nil {
		return -1, failf(agentproto.CodeStartFailed, "cannot start the training process: %v", err)
	}
	j.mu.Lock()
	j.proc = p
	cancelled := j.cancel
	j.mu.Unlock()
	if cancelled {
		p.Terminate(j.grace)
	}
	j.emit(events.Log("info", j.o.named(fmt.Sprintf("training process %d started in %s", p.PID(), j.dir))))
	go p.Relay(j.emit, func(line string) {
		j.mu.Lock()
		j.raw = append(j.raw, []byte(line))
		j.mu.Unlock()
	})
	why, code := "", ""
	select {
	case <-p.Done():
	case <-j.o.Lost:
		why, code = LostSession, agentproto.CodeLostSession
		j.stop(code, why, j.grace)
		<-p.Done()
	case <-ctx.Done():
		why, code = "the agent was stopped", agentproto.CodeAgentStopped
		j.stop(code, why, j.grace)
		<-p.Done()
	}
	if why == "" {
		why, code = j.stoppedBy(), agentproto.CodeUnreachable
	}
	ex := p.Exit()
	switch {
	case why != "":
		return -1, &failure{code: code, signal: int(ex.Signal), err: fmt.Errorf("%s: it stopped the training process (%s)", why, ex)}
	case ex.Signal != 0:
		return -1, &failure{code: agentproto.CodeKilledBySignal, signal: int(ex.Signal), err: errors.New(ex.String())}
	}
	return ex.Code, nil
}

// deviceEnv turns the device the dispatch chose ("cuda:1", "cuda:0,1",
// "cpu") into the training process's environment, and the spec's device
// into the one the process sees ("cuda:0" once only GPU 1 is visible).
func deviceEnv(spec *trainer.Spec) []string {
	return withoutToken(trainer.Environ(trainer.LaunchEnv(spec)...))
}

// withoutToken drops the token variable: the training process never sees
// the run's credentials.
func withoutToken(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "POTATO_TRAINING_TOKEN=") {
			out = append(out, kv)
		}
	}
	return out
}
