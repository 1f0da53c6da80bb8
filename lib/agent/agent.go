// Package agent is the far side of a remote run, as potato-agent(1)
// describes it: it claims a job over agent protocol v1, downloads and
// unpacks the bundle, runs the training process with the same runner as
// the local backend, relays its events, uploads the predictions and
// reports the result.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/bundle"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
	"potato-training/lib/slurm"
	"potato-training/lib/trainer"
)

// Options configure an agent.
type Options struct {
	Client  *agentproto.Client
	Backend string
	Workdir string // jobs go to Workdir/jobs/<run>
	Python  string
	Once    bool
	Keep    bool // keep each job's bundle
	// Worker is the potato-agent executable that runs built-in trainers.
	Worker string
	// Heartbeat is the longest time between two posts (at most 10 s).
	Heartbeat time.Duration
	// Lost is closed when the connection to the server is known to be gone
	// (the ssh session's standard input reached EOF): the job is stopped.
	Lost <-chan struct{}
	Log  io.Writer
	// MaxBundleBytes bounds an unpacked bundle.
	MaxBundleBytes int64
	// AllowExec lets a job name a program of this machine as its trainer
	// (exec:PATH). Only an agent started over ssh by the dispatch of the
	// machine's own user allows it; a polling agent never does.
	AllowExec bool
	// SLURM, when set, makes this an agent on a login node: each job's
	// training process is submitted with sbatch (SPEC M5, M9).
	SLURM *slurm.Options
	// Unreachable is how long the server may fail every post during a job
	// before the agent stops the job itself (SPEC G9; default 300 s).
	Unreachable time.Duration
}

// DefaultUnreachable is G9's limit.
const DefaultUnreachable = 300 * time.Second

// MsgUnreachable is why an agent stopped a job whose server it could not
// reach.
const MsgUnreachable = "the server could not be reached for %d seconds"

// LostSession is how the agent's result says it stopped its job because
// its ssh session (standard input) ended.
const LostSession = "the agent's ssh session ended"

// ExecPrefix marks a trainer that is a program on the training machine.
const ExecPrefix = "exec:"

// DefaultGrace is the SIGTERM-to-SIGKILL time of a job that carries none.
const DefaultGrace = 20 * time.Second

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "potato-agent: "+format+"\n", args...)
	}
}

// Run claims and runs jobs until ctx ends (or after one with Once).
func Run(ctx context.Context, o Options) error {
	if o.Heartbeat <= 0 || o.Heartbeat > 10*time.Second {
		o.Heartbeat = 10 * time.Second
	}
	if o.MaxBundleBytes <= 0 {
		o.MaxBundleBytes = 64 << 30
	}
	if o.Unreachable <= 0 {
		o.Unreachable = DefaultUnreachable
	}
	host, _ := os.Hostname()
	for {
		claim, err := o.Client.Claim(ctx, agentproto.ClaimRequest{Backend: o.Backend, Host: host, Workdir: o.Workdir, Version: "1"})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("claim: %w", err)
		}
		if claim == nil {
			if o.Once && ctx.Err() != nil {
				return nil
			}
			continue
		}
		if !rundir.ValidID(claim.RunID) {
			return fmt.Errorf("the server handed out a run id %q that is not one", claim.RunID)
		}
		if strings.HasPrefix(claim.Spec.Trainer, ExecPrefix) && !o.AllowExec {
			o.logf("run %s: refusing trainer %s: this agent runs only the toolkit's trainers", claim.RunID, claim.Spec.Trainer)
			_ = o.Client.PostResult(ctx, claim.RunID, agentproto.Result{ExitCode: events.ExitBadSpec,
				Error: "this agent runs only the toolkit's trainers, not " + claim.Spec.Trainer})
			if o.Once {
				return nil
			}
			continue
		}
		if err := runJob(ctx, o, claim, host); err != nil {
			o.logf("run %s: %v", claim.RunID, err)
			if o.Once {
				return err
			}
		}
		if o.Once {
			return nil
		}
	}
}

// job is one claimed run on this machine.
type job struct {
	o      Options
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
	// lastOK is when a post last reached the server.
	lastOK time.Time
	// why the job was stopped, once it was.
	why string
}

func runJob(ctx context.Context, o Options, claim *agentproto.Claim, host string) error {
	dir := filepath.Join(o.Workdir, "jobs", claim.RunID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return report(ctx, o, claim, -1, "", err)
	}
	j := &job{o: o, claim: claim, dir: dir, grace: time.Duration(claim.GraceSeconds) * time.Second, lastOK: time.Now()}
	if j.grace <= 0 {
		j.grace = DefaultGrace
	}
	// A cancel arrives in the reply to a post: post at least twice per
	// grace period, so a short grace_seconds still reaches the trainer.
	if hb := j.grace / 2; hb < j.o.Heartbeat {
		j.o.Heartbeat = max(hb, 500*time.Millisecond)
	}
	j.emit(events.Status("downloading", "downloading the bundle"))
	archive := filepath.Join(dir, "bundle.tar.gz")
	bdir := filepath.Join(dir, "bundle")
	stop := j.startPosting(ctx)
	err := o.Client.DownloadBundle(ctx, claim.RunID, archive, claim.Bundle, nil)
	if err == nil {
		os.RemoveAll(bdir)
		err = bundle.UnpackFile(archive, bdir, o.MaxBundleBytes, claim.Bundle.SHA256)
	}
	if err != nil {
		stop()
		return report(ctx, o, claim, events.ExitBadSpec, "", fmt.Errorf("the bundle: %w", err))
	}
	os.Remove(archive)
	spec := claim.Spec
	spec.BundleDir = bdir
	spec.Workdir = filepath.Join(dir, "artifacts")
	if err := os.MkdirAll(spec.Workdir, 0o755); err != nil {
		stop()
		return report(ctx, o, claim, -1, "", err)
	}
	env := deviceEnv(&spec)
	specPath := filepath.Join(dir, "spec.json")
	if err := spec.Write(specPath); err != nil {
		stop()
		return report(ctx, o, claim, -1, "", err)
	}
	var code int
	var errText string
	if o.SLURM != nil {
		code, errText = j.trainSLURM(ctx, spec, specPath)
	} else {
		code, errText = j.train(ctx, spec, specPath, env)
	}
	// The trainer's last events go first; the posts go on during the
	// upload, so a large predictions file does not look like a silent agent.
	j.post(ctx)
	j.mu.Lock()
	pred := trainer.PredictionsPath(spec.Workdir, j.predictions)
	j.mu.Unlock()
	if _, err := os.Stat(pred); err == nil {
		if err := o.Client.UploadPredictions(ctx, claim.RunID, pred); err != nil {
			stop()
			return report(ctx, o, claim, code, artifactURI(host, spec.Workdir), fmt.Errorf("uploading the predictions: %w", err))
		}
	}
	stop()
	if !o.Keep {
		os.RemoveAll(bdir)
	}
	var rerr error
	if errText != "" {
		rerr = errors.New(errText)
	}
	return report(ctx, o, claim, code, artifactURI(host, spec.Workdir), rerr)
}

func artifactURI(host, dir string) string {
	return "ssh://" + host + dir
}

func report(ctx context.Context, o Options, claim *agentproto.Claim, code int, uri string, err error) error {
	res := agentproto.Result{ExitCode: code, ArtifactURI: uri}
	if err != nil {
		res.Error = err.Error()
	}
	if perr := o.Client.PostResult(ctx, claim.RunID, res); perr != nil {
		return errors.Join(err, fmt.Errorf("reporting the result: %w", perr))
	}
	return err
}

func (j *job) emit(e events.Event) {
	j.mu.Lock()
	j.queue = append(j.queue, e)
	if e.Kind == events.KindResult {
		j.predictions = e.String("predictions_file")
	}
	j.mu.Unlock()
}

// startPosting sends queued events at least every heartbeat period and
// soon after each event, and applies a cancel from a reply. The returned
// function flushes what is left and stops.
func (j *job) startPosting(ctx context.Context) func() {
	done := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		last := time.Time{}
		for {
			select {
			case <-done:
				j.post(ctx)
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				j.mu.Lock()
				pending := len(j.queue) + len(j.raw)
				j.mu.Unlock()
				if pending > 0 || time.Since(last) >= j.o.Heartbeat {
					j.post(ctx)
					last = time.Now()
				}
			}
		}
	}()
	return func() {
		close(done)
		<-flushed
	}
}

func (j *job) post(ctx context.Context) {
	// One post at a time, so events reach the server in their order.
	j.postMu.Lock()
	defer j.postMu.Unlock()
	j.mu.Lock()
	evs, raw := j.queue, j.raw
	j.queue, j.raw = nil, nil
	j.mu.Unlock()
	reply, err := j.o.Client.PostEvents(ctx, j.claim.RunID, evs, raw)
	if err != nil {
		// Put them back; the next post retries.
		j.mu.Lock()
		j.queue = append(evs, j.queue...)
		j.raw = append(raw, j.raw...)
		j.mu.Unlock()
		j.o.logf("posting events: %v", err)
		j.mu.Lock()
		silent := time.Since(j.lastOK)
		j.mu.Unlock()
		if silent > j.o.Unreachable {
			j.stop(fmt.Sprintf(MsgUnreachable, int(j.o.Unreachable/time.Second)), j.grace)
		}
		return
	}
	j.mu.Lock()
	j.lastOK = time.Now()
	j.mu.Unlock()
	if reply.Cancel {
		g := j.grace
		if reply.GraceSeconds > 0 {
			g = time.Duration(reply.GraceSeconds) * time.Second
		}
		j.stop("cancel requested by the server", g)
	}
}

// stop sends SIGTERM to the training process's group, SIGKILL after grace.
func (j *job) stop(why string, grace time.Duration) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cancel {
		return
	}
	j.cancel = true
	j.why = why
	j.o.logf("%s: stopping the training process (SIGKILL after %s)", why, grace)
	if j.proc != nil {
		j.proc.Terminate(grace)
	}
	if j.sj != nil {
		go j.sj.cancel(grace)
	}
}

// train runs the training process and relays its events; it returns the
// exit code and, when it did not finish normally, why.
func (j *job) train(ctx context.Context, spec trainer.Spec, specPath string, env []string) (int, string) {
	path, args := j.o.Worker, []string{"worker", "--spec", specPath}
	if p, ok := strings.CutPrefix(spec.Trainer, ExecPrefix); ok {
		// A program on this machine (an ssh or SLURM host's own trainer).
		path, args = p, []string{"--spec", specPath}
	}
	stderr, err := os.Create(filepath.Join(j.dir, "stderr.log"))
	if err != nil {
		return -1, err.Error()
	}
	defer stderr.Close()
	p, err := trainer.Start(trainer.Command{Path: path, Args: args, Dir: j.dir, Env: env, Stderr: stderr})
	if err != nil {
		return -1, fmt.Sprintf("cannot start the training process: %v", err)
	}
	j.mu.Lock()
	j.proc = p
	cancelled := j.cancel
	j.mu.Unlock()
	if cancelled {
		p.Terminate(j.grace)
	}
	j.emit(events.Log("info", fmt.Sprintf("potato-agent: training process %d started in %s", p.PID(), j.dir)))
	go p.Relay(j.emit, func(line string) {
		j.mu.Lock()
		j.raw = append(j.raw, []byte(line))
		j.mu.Unlock()
	})
	why := ""
	select {
	case <-p.Done():
	case <-j.o.Lost:
		why = LostSession
		j.stop(why, j.grace)
		<-p.Done()
	case <-ctx.Done():
		why = "the agent was stopped"
		j.stop(why, j.grace)
		<-p.Done()
	}
	ex := p.Exit()
	switch {
	case why != "":
		return -1, fmt.Sprintf("%s: it stopped the training process (%s)", why, ex)
	case ex.Signal != 0:
		return -1, ex.String()
	}
	return ex.Code, ""
}

// deviceEnv turns the device the dispatch chose ("cuda:1", "cuda:0,1",
// "cpu") into the training process's environment, and the spec's device
// into the one the process sees ("cuda:0" once only GPU 1 is visible).
func deviceEnv(spec *trainer.Spec) []string {
	var extra []string
	dev := spec.Limits.Device
	switch {
	case strings.HasPrefix(dev, "cuda:"):
		ids := strings.TrimPrefix(dev, "cuda:")
		extra = append(extra, "CUDA_VISIBLE_DEVICES="+ids, "CUDA_DEVICE_ORDER=PCI_BUS_ID")
		spec.Limits.Device = "cuda:0"
		if strings.Contains(ids, ",") {
			spec.Limits.Device = "cuda"
		}
	case dev == "cpu" || dev == "":
		extra = append(extra, "CUDA_VISIBLE_DEVICES=")
		spec.Limits.Device = "cpu"
	}
	extra = append(extra, "POTATO_TRAINING_DEVICE="+spec.Limits.Device)
	return withoutToken(trainer.Environ(spec.Limits.NumThreads, extra...))
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
